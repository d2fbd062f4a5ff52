// Helpers shared by the observers (internal): kwargs parsing, config checks,
// per-channel reductions, and the quantization grid a clip threshold implies.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include "taoquant/json.h"

#include "taoquant/observer.h"

namespace tq::obs {

// Reads observer_or_fake_quant_kwargs. Every read records an accepted key;
// finish() rejects the keys nobody read. Errors are SpecErrors without a
// location (ObserverRegistry::create adds it).
class Kwargs {
 public:
  Kwargs(std::string observer, const nlohmann::json& kwargs);
  // A number in [lo, hi] (lo_open/hi_open exclude the bound).
  double number(const std::string& key, double def, double lo, double hi, bool lo_open = false,
                bool hi_open = false);
  // An integer in [lo, hi] (2048.0 is accepted as 2048).
  int64_t integer(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  // true/false.
  bool boolean(const std::string& key, bool def);
  // Throws on keys that were never read, listing the accepted ones.
  void finish() const;

 private:
  const nlohmann::json* find(const std::string& key);
  [[noreturn]] void bad(const std::string& key, const std::string& expected) const;
  std::string who_;
  nlohmann::json kwargs_;
  std::vector<std::string> accepted_;
};

// Rejects configurations no observer can serve (native dtype, symmetric
// uint8 with reduce_range as PyTorch does). SpecError without a location.
void check_config(const ObserverConfig& cfg, const std::string& who);

// `x` as float32 (no copy when it already is). RuntimeError for non-real types.
at::Tensor as_float(const at::Tensor& x, const std::string& who);

// The channel axis in [0, dim) (negative counts from the end), or a
// RuntimeError naming the shape.
int64_t channel_axis(const at::Tensor& x, int axis, const std::string& who);

// `x` reshaped to [C, N] with the channel axis first (a copy only when the
// channel axis is not already the outermost).
at::Tensor channels_first(const at::Tensor& x, int64_t axis);

// Running per-tensor or per-channel min/max of float32 values.
struct Range {
  std::vector<float> lo, hi;  // one entry per channel (1 per-tensor)
  bool empty() const { return lo.empty(); }
  size_t size() const { return lo.size(); }
};

// min/max of `xf` (float32): per-tensor (1 entry) or per channel along
// `axis`. RuntimeError on NaN/inf, naming the observer.
Range tensor_range(const at::Tensor& xf, bool per_channel, int axis, const std::string& who);

// Checks that `cur` has the channel count seen before (RuntimeError).
void check_channels(const Range& seen, const Range& cur, const std::string& who);

// acc = elementwise [min(acc.lo, cur.lo), max(acc.hi, cur.hi)] (acc = cur when empty).
void merge_range(Range& acc, const Range& cur, const std::string& who);

// Quantization parameters for a chosen clip per channel, recording the
// observed range (min_val/max_val) and the clip (clip_min/clip_max).
QParams qparams_for_clip(const Range& observed, const Range& clip, const ObserverConfig& cfg);

// The signed clip [lo, hi] that a threshold t on |x| gives: [-t, t] for
// symmetric and fp8 formats; for affine formats [-t, t] intersected with the
// observed range [obs_lo, obs_hi], widened to contain 0.
std::pair<float, float> clip_for_threshold(float t, float obs_lo, float obs_hi,
                                           const ObserverConfig& cfg);

// The non-negative representable magnitudes (ascending, first 0) of the
// quantization grid that threshold t gives, in |x| units: k * scale for the
// integer formats, the fp8 values scaled by t / fp8_max for fp8.
std::vector<double> grid_levels(float t, float obs_lo, float obs_hi, const ObserverConfig& cfg);

// "minmax per-tensor uint8 affine" style label for messages.
std::string describe(const ObserverConfig& cfg);

// Base of the observers that keep the running min/max of what they see
// (minmax, max); they take no kwargs.
class RunningRangeObserver : public Observer {
 public:
  void observe(const at::Tensor& x) override;
  std::string name() const override { return name_; }

 protected:
  RunningRangeObserver(const ObserverConfig& cfg, std::string name);
  ObserverConfig cfg_;
  std::string name_;
  Range range_;
};

}  // namespace tq::obs
