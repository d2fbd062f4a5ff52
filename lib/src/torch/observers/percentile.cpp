// `percentile`: clips |x| at a percentile of the streamed histogram
// (kwarg `percentile`, default 99.99; `num_bins`, default 2048). The
// percentile is interpolated linearly inside the bin where the cumulative
// count crosses it. Affine configs clip [-t, t] intersected with the
// observed range (see clip_for_threshold).
#include <algorithm>

#include "histogram.h"

namespace tq {
namespace {

// The value below which `pct` percent of the histogram's mass lies.
float percentile_of(const std::vector<double>& h, float amax, double pct) {
  double total = 0;
  for (double v : h) total += v;
  if (!(total > 0) || pct >= 100) return amax;
  const double target = total * pct / 100.0;
  const double width = double(amax) / double(h.size());
  double cum = 0;
  for (size_t j = 0; j < h.size(); ++j) {
    if (h[j] > 0 && cum + h[j] >= target) {
      double frac = std::clamp((target - cum) / h[j], 0.0, 1.0);
      return float((double(j) + frac) * width);
    }
    cum += h[j];
  }
  return amax;
}

class PercentileObserver : public Observer {
 public:
  explicit PercentileObserver(const ObserverConfig& cfg)
      : cfg_(cfg), hist_(read_kwargs(cfg), cfg.per_channel, cfg.axis, name()) {
    obs::check_config(cfg, name());
  }

  void observe(const at::Tensor& x) override {
    if (x.numel() == 0) return;
    hist_.observe(obs::as_float(x, name()));
  }

  QParams finalize() override {
    return obs::qparams_from_histogram(hist_, cfg_,
                                       [&](size_t, const std::vector<double>& h, float amax) {
                                         return percentile_of(h, amax, pct_);
                                       });
  }

  std::string name() const override { return "percentile"; }

 private:
  int64_t read_kwargs(const ObserverConfig& cfg) {
    obs::Kwargs kw(name(), cfg.kwargs);
    pct_ = kw.number("percentile", 99.99, 0.0, 100.0, true, false);
    int64_t bins = kw.integer("num_bins", 2048, 16, 1 << 16);
    kw.finish();
    return bins;
  }

  ObserverConfig cfg_;
  double pct_ = 99.99;
  obs::AbsHistogram hist_;
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(PercentileObserver, "percentile",
                           "clip at a percentile of |x| (kwarg percentile, default 99.99)");

}  // namespace tq
