// `entropy`: TensorRT-style KL-divergence calibration on the |x| histogram.
//
// For each candidate threshold at bin edge i (from start_bin, default 128,
// to num_bins, default 2048, every `stride` bins):
//  - P is the first i bins, with the mass of the clipped bins added to bin i-1;
//  - Q quantizes the first i bins into nq chunks (chunk j: bins
//    [j*(i/nq), (j+1)*(i/nq)), the last one up to i) and spreads each chunk's
//    mass evenly over its nonzero bins;
//  - both are smoothed (zero bins get eps = 1e-4 of one sample's mass, the
//    nonzero bins shrink in proportion to keep the sum) and KL(P || Q) is
//    computed.
// The threshold with the smallest divergence wins (the larger one on a tie).
// nq is the number of non-negative levels the threshold's grid has: 128 for
// int8 (TensorRT's num_quantized_bins), 256 for uint8 affine on one-signed
// data, 8 for int4; fp8 uses 128 (its 8-bit code count; the non-uniform fp8
// grid is not modelled). Candidates with i <= nq are skipped (Q would equal P).
// Exact zeros (ReLU outputs, padding) are left out of the histogram unless
// skip_zeros is false: every grid represents them exactly, and as one spike
// in bin 0 they would dominate the divergence (Q spreads a chunk's mass over
// its bins, so a spike costs about log(i / nq) whatever the clip).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "histogram.h"

namespace tq {
namespace {

constexpr double kSmoothEps = 1e-4;

// Normalises `raw[0..n)` in place to a smoothed probability distribution.
// Returns the probability given to a bin that was zero (0 if none), or -1
// when the distribution is all zero.
double smooth(std::vector<double>& raw, int64_t n) {
  double sum = 0;
  int64_t zeros = 0;
  for (int64_t k = 0; k < n; ++k) {
    sum += raw[k];
    zeros += raw[k] == 0;
  }
  if (!(sum > 0)) return -1;
  // MXNet/TensorRT smoothing on raw counts adds eps = 1e-4 to each zero bin;
  // relative to one sample that is 1e-4 / sum.
  // (Capped so that a nearly empty histogram keeps most of its own mass.)
  const double eps = zeros ? std::min(kSmoothEps / sum, 0.1 / double(zeros)) : 0.0;
  const double keep = (1.0 - eps * double(zeros)) / sum;
  for (int64_t k = 0; k < n; ++k) raw[k] = raw[k] == 0 ? eps : raw[k] * keep;
  return eps;
}

float entropy_threshold(const std::vector<double>& h, float amax, int64_t start_bin, int64_t stride,
                        const std::function<int64_t(float)>& levels_at) {
  const int64_t B = int64_t(h.size());
  const double width = double(amax) / double(B);
  std::vector<double> tail(B + 1, 0.0);
  for (int64_t i = B - 1; i >= 0; --i) tail[i] = tail[i + 1] + h[i];
  std::vector<double> P(B), Q(B);
  double best = std::numeric_limits<double>::infinity();
  int64_t best_i = B;
  for (int64_t i = std::max<int64_t>(1, start_bin);; i += stride) {
    if (i > B) {
      if (i - stride >= B) break;
      i = B;  // always try the full range
    }
    const float t = float(double(i) * width);
    const int64_t nq = levels_at(t);
    if (nq >= i) continue;
    // Reference distribution P: outliers folded into the last kept bin.
    std::copy(h.begin(), h.begin() + i, P.begin());
    P[i - 1] += tail[i];
    // Candidate Q: i bins quantized into nq chunks, expanded over nonzero bins.
    const int64_t merged = i / nq;
    for (int64_t j = 0; j < nq; ++j) {
      const int64_t s = j * merged, e = j == nq - 1 ? i : s + merged;
      double mass = 0;
      int64_t nonzero = 0;
      for (int64_t k = s; k < e; ++k) {
        mass += h[k];
        nonzero += h[k] != 0;
      }
      const double each = nonzero ? mass / double(nonzero) : 0.0;
      for (int64_t k = s; k < e; ++k) Q[k] = h[k] != 0 ? each : 0.0;
    }
    const double eps_p = smooth(P, i), eps_q = smooth(Q, i);
    if (eps_p < 0 || eps_q < 0) continue;
    // Bins that are zero in both contribute eps_p * log(eps_p / eps_q) each.
    double kl = 0;
    int64_t both_zero = 0;
    for (int64_t k = 0; k < i; ++k) {
      // Zero in P (before smoothing) implies zero in Q.
      const bool p_zero = h[k] == 0 && !(k == i - 1 && tail[i] > 0);
      if (p_zero) {
        ++both_zero;
        continue;
      }
      kl += P[k] * std::log(P[k] / Q[k]);
    }
    if (both_zero) kl += double(both_zero) * eps_p * std::log(eps_p / eps_q);
    if (kl <= best) {
      best = kl;
      best_i = i;
    }
  }
  return float(double(best_i) * width);
}

class EntropyObserver : public obs::HistogramObserver {
 public:
  explicit EntropyObserver(const ObserverConfig& cfg)
      : HistogramObserver(cfg, "entropy"),
        start_bin_(kw_.integer("start_bin", 128, 1, 1 << 16)),
        stride_(kw_.integer("stride", 1, 1, 1 << 16)),
        skip_zeros_(kw_.boolean("skip_zeros", true)) {
    kw_.finish();
    if (start_bin_ > hist_.num_bins())
      throw SpecError({}, "observer '" + name() + "': start_bin (" + std::to_string(start_bin_) +
                              ") must not exceed num_bins (" + std::to_string(hist_.num_bins()) +
                              ")");
  }

 private:
  float threshold(size_t c, const std::vector<double>& h, float amax) override {
    const bool fp8 = dtype_traits(cfg_.dtype).is_float8;
    const float lo = hist_.range().lo[c], hi = hist_.range().hi[c];
    auto levels_at = [&](float t) -> int64_t {
      return fp8 ? 128 : int64_t(obs::grid_levels(t, lo, hi, cfg_).size());
    };
    return entropy_threshold(h, amax, start_bin_, stride_, levels_at);
  }
  bool skip_zeros() const override { return skip_zeros_; }

  int64_t start_bin_, stride_;
  bool skip_zeros_;
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(EntropyObserver, "entropy",
                           "TensorRT-style KL-divergence threshold over a 2048-bin |x| histogram");

}  // namespace tq
