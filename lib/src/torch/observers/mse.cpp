// `mse`: the clip threshold that minimises the expected squared
// quantization error of the observed |x| distribution.
//
// The error of a threshold t is computed exactly for the streamed histogram,
// taking the values in each bin as uniformly spread over it: values round to
// the nearest level of the grid t implies (grid_levels: k * scale for the
// integer formats, the scaled fp8 values for fp8) and saturate at the top
// level. Candidates are num_candidates (default 100) thresholds evenly spaced
// over [start_fraction * amax, amax] (start_fraction default 0.01), then as
// many again between the best candidate's neighbours. The smallest error
// wins (the larger threshold on a tie). Exact zeros are left out: every grid
// represents them exactly.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "histogram.h"

namespace tq {
namespace {

// Integral of (x - level)^2 over [x0, x1], without cancellation.
double segment_error(double x0, double x1, double level) {
  const double a = x0 - level, b = x1 - level;
  return (x1 - x0) * (a * a + a * b + b * b) / 3.0;
}

// Expected squared error (times the count) of quantizing the histogram h
// (bins of `width` from 0) to `levels` (ascending, levels[0] = 0).
double quant_error(const std::vector<double>& h, double width, const std::vector<double>& levels) {
  const size_t K = levels.size();
  auto upper = [&](size_t k) {  // the decision boundary above level k
    return k + 1 < K ? 0.5 * (levels[k] + levels[k + 1]) : std::numeric_limits<double>::infinity();
  };
  double err = 0;
  size_t k = 0;
  for (size_t b = 0; b < h.size(); ++b) {
    if (h[b] == 0) continue;
    const double lo = double(b) * width, hi = lo + width, density = h[b] / width;
    while (upper(k) <= lo) ++k;
    double x0 = lo;
    for (size_t kk = k;; ++kk) {
      const double x1 = std::min(hi, upper(kk));
      err += density * segment_error(x0, x1, levels[kk]);
      if (x1 >= hi) break;
      x0 = x1;
    }
  }
  return err;
}

float mse_threshold(const std::vector<double>& h, float amax, int64_t n, double start_fraction,
                    const std::function<std::vector<double>(float)>& levels_at) {
  const double width = double(amax) / double(h.size());
  double best_err = std::numeric_limits<double>::infinity();
  double best_t = amax;
  auto search = [&](double lo, double hi) {
    for (int64_t j = 0; j < n; ++j) {
      const double t = lo + (hi - lo) * double(j) / double(n - 1);
      const double e = quant_error(h, width, levels_at(float(t)));
      if (e <= best_err) {
        best_err = e;
        best_t = t;
      }
    }
  };
  const double lo = start_fraction * amax, step = (amax - lo) / double(n - 1);
  search(lo, amax);
  search(std::max(lo, best_t - step), std::min<double>(amax, best_t + step));
  return float(best_t);
}

class MseObserver : public obs::HistogramObserver {
 public:
  explicit MseObserver(const ObserverConfig& cfg)
      : HistogramObserver(cfg, "mse"),
        num_candidates_(kw_.integer("num_candidates", 100, 2, 100000)),
        start_fraction_(kw_.number("start_fraction", 0.01, 0.0, 1.0, true, false)) {
    kw_.finish();
  }

 private:
  float threshold(size_t c, const std::vector<double>& h, float amax) override {
    const float lo = hist_.range().lo[c], hi = hist_.range().hi[c];
    auto levels_at = [&](float t) { return obs::grid_levels(t, lo, hi, cfg_); };
    return mse_threshold(h, amax, num_candidates_, start_fraction_, levels_at);
  }
  bool skip_zeros() const override { return true; }

  int64_t num_candidates_;
  double start_fraction_;
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(MseObserver, "mse",
                           "the clip that minimises the quantization MSE of the |x| histogram");

}  // namespace tq
