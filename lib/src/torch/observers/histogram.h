// A streaming histogram of |x| with bounded memory, shared by the histogram
// observers (entropy, percentile, mse) by composition.
//
// Per channel c it keeps a fixed number of internal bins over [0, R_c]. The
// first batch with a nonzero value sets R_c to its amax. When a later batch
// exceeds R_c, R_c doubles until it covers the new amax and each group of
// 2^k old bins merges into one bin, so counts are kept exactly and no raw
// values are stored. counts() re-bins the internal histogram to `num_bins`
// equal bins over [0, amax_c], spreading each internal bin's count uniformly
// over its width. Per tensor, the internal histogram has 4x the requested
// bins so that this final re-binning loses little resolution; per channel it
// has exactly num_bins (memory is C * num_bins * 8 bytes). Exact zeros are
// also counted apart (they are in bin 0 too): every grid represents them
// exactly, so entropy and mse can leave them out.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common.h"

namespace tq::obs {

class AbsHistogram {
 public:
  AbsHistogram(int64_t num_bins, bool per_channel, int axis, std::string who);

  // Adds a float32 tensor (see as_float). RuntimeError on NaN/inf, a bad
  // axis or a channel count that differs from earlier batches.
  void observe(const at::Tensor& xf);

  bool empty() const { return range_.empty(); }
  size_t channels() const { return range_.size(); }
  const Range& range() const { return range_; }  // signed min/max per channel
  float amax(size_t c) const;
  int64_t num_bins() const { return bins_; }
  int64_t internal_bins() const { return ibins_; }
  float internal_top(size_t c) const { return top_[c]; }  // R_c
  // Total count of channel c (the number of values observed for it).
  double total(size_t c) const;
  // How many values of channel c were exactly 0.
  double zeros(size_t c) const { return zeros_[c]; }
  // num_bins counts of |x| over [0, amax(c)] (all in bin 0 when amax is 0);
  // without the exact zeros when skip_zeros.
  std::vector<double> counts(size_t c, bool skip_zeros = false) const;

 private:
  void grow(size_t c, float amax);
  std::vector<double> rebinned(size_t c) const;
  void add_per_tensor(const at::Tensor& xf);
  void add_per_channel(const at::Tensor& xf);

  int64_t bins_, ibins_;
  bool per_channel_;
  int axis_;
  std::string who_;
  Range range_;
  std::vector<float> top_;      // R_c (0 until a nonzero value arrives)
  std::vector<double> counts_;  // channels x ibins_
  std::vector<double> zeros_;   // exact zeros per channel
};

// For each channel: threshold(c, counts, amax) picks t in [0, amax] on the
// |x| histogram (without the exact zeros when skip_zeros); the clip is
// clip_for_threshold(t, ...). Returns the qparams with the observed range and
// the clip (PyTorch defaults when empty).
using ThresholdFn = std::function<float(size_t c, const std::vector<double>& counts, float amax)>;
QParams qparams_from_histogram(const AbsHistogram& h, const ObserverConfig& cfg,
                               const ThresholdFn& threshold, bool skip_zeros = false);

// Base of the histogram observers (entropy, mse, percentile): |x| streams
// into an AbsHistogram; the subclass picks each channel's clip threshold.
class HistogramObserver : public Observer {
 public:
  void observe(const at::Tensor& x) override {
    if (x.numel() == 0) return;
    hist_.observe(as_float(x, name_));
  }
  QParams finalize() override {
    return qparams_from_histogram(
        hist_, cfg_,
        [this](size_t c, const std::vector<double>& h, float amax) {
          return threshold(c, h, amax);
        },
        skip_zeros());
  }
  std::string name() const override { return name_; }

 protected:
  // Reads num_bins from the kwargs; the subclass's constructor reads its own
  // from kw_, then calls kw_.finish().
  HistogramObserver(const ObserverConfig& cfg, std::string name)
      : cfg_(cfg),
        name_(std::move(name)),
        kw_(name_, cfg.kwargs),
        hist_(num_bins(kw_), cfg.per_channel, cfg.axis, name_) {
    check_config(cfg, name_);
  }
  // The threshold on |x| for channel c, in [0, amax], from its counts.
  virtual float threshold(size_t c, const std::vector<double>& counts, float amax) = 0;
  virtual bool skip_zeros() const { return false; }
  // num_bins (default 2048), read first from every histogram observer's kwargs.
  static int64_t num_bins(Kwargs& kw) { return kw.integer("num_bins", 2048, 16, 1 << 16); }

  ObserverConfig cfg_;
  std::string name_;
  Kwargs kw_;  // the observer's kwargs (observer_or_fake_quant_kwargs)
  AbsHistogram hist_;
};

}  // namespace tq::obs
