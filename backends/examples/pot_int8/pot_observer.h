// The pot_int8 example's own observer, "pot_mse": picks each scale among the
// powers of two by the quantization error it expects, instead of taking the
// smallest power of two that avoids clipping.
#pragma once

#include <string>
#include <vector>

#include <taoquant/observer.h>

namespace pot_int8 {

// For each channel (or the whole tensor) it keeps the exact |x| maximum and a
// histogram of |x| with `bins_per_octave` logarithmic bins per power of two,
// separately for positive and negative values. finalize() tries
// 2^k for k = k_ceil, k_ceil - 1, ..., k_ceil - search, where 2^k_ceil is the
// smallest power of two that covers the maximum without clipping, and keeps
// the one with the smallest expected squared error: rounding error plus
// clipping error, integrated exactly over each bin assuming the values are
// uniform within it. Ties go to the larger scale.
//
// Config: a signed integer dtype (int8, int4), symmetric. kwargs
// (observer_or_fake_quant_kwargs): search (0..8, default 3),
// bins_per_octave (4..64, default 16), quant_min / quant_max (a narrower
// signed range, e.g. -127 / 127).
class PotMseObserver : public tq::Observer {
 public:
  explicit PotMseObserver(const tq::ObserverConfig& cfg);
  void observe(const at::Tensor& x) override;
  tq::QParams finalize() override;
  std::string name() const override { return "pot_mse"; }

  // The expected squared error of quantizing the values summarized by one
  // channel's histograms with scale 2^k.
  double expected_error(size_t channel, int k) const;

 private:
  static constexpr int kMinExp = -40, kMaxExp = 24;  // |x| in [2^-40, 2^24)
  size_t bins() const { return static_cast<size_t>((kMaxExp - kMinExp) * bins_per_octave_); }
  double edge(size_t i) const;

  tq::ObserverConfig cfg_;
  int qmin_ = -128, qmax_ = 127;
  int search_ = 3;
  int bins_per_octave_ = 16;
  size_t channels_ = 0;
  std::vector<double> hist_;  // [channel][sign][bin]
  std::vector<double> amax_, min_, max_;
};

}  // namespace pot_int8
