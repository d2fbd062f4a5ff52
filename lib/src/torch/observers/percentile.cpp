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

class PercentileObserver : public obs::HistogramObserver {
 public:
  explicit PercentileObserver(const ObserverConfig& cfg)
      : HistogramObserver(cfg, "percentile"),
        pct_(kw_.number("percentile", 99.99, 0.0, 100.0, true, false)) {
    kw_.finish();
  }

 private:
  float threshold(size_t, const std::vector<double>& h, float amax) override {
    return percentile_of(h, amax, pct_);
  }

  double pct_;
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(PercentileObserver, "percentile",
                           "clip at a percentile of |x| (kwarg percentile, default 99.99)");

}  // namespace tq
