#include "histogram.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

namespace tq::obs {

namespace {
// histc counts in float32, exact up to 2^24 per bin: feed at most that many
// values per call.
constexpr int64_t kHistcChunk = int64_t(1) << 24;
constexpr int64_t kPerTensorOversample = 4;
}  // namespace

AbsHistogram::AbsHistogram(int64_t num_bins, bool per_channel, int axis, std::string who)
    : bins_(num_bins),
      ibins_(per_channel ? num_bins : num_bins * kPerTensorOversample),
      per_channel_(per_channel),
      axis_(axis),
      who_(std::move(who)) {}

float AbsHistogram::amax(size_t c) const {
  return std::max(-range_.lo[c], range_.hi[c]);
}

double AbsHistogram::total(size_t c) const {
  double s = 0;
  for (int64_t i = 0; i < ibins_; ++i) s += counts_[c * ibins_ + i];
  return s;
}

void AbsHistogram::observe(const at::Tensor& xf) {
  if (xf.numel() == 0) return;
  Range cur = tensor_range(xf, per_channel_, axis_, who_);
  check_channels(range_, cur, who_);
  if (range_.empty()) {
    top_.assign(cur.size(), 0.0f);
    counts_.assign(cur.size() * ibins_, 0.0);
    zeros_.assign(cur.size(), 0.0);
  }
  merge_range(range_, cur, who_);
  for (size_t c = 0; c < cur.size(); ++c) grow(c, std::max(-cur.lo[c], cur.hi[c]));
  if (per_channel_)
    add_per_channel(xf);
  else
    add_per_tensor(xf);
}

void AbsHistogram::grow(size_t c, float amax) {
  float& top = top_[c];
  if (amax <= top) return;
  if (top == 0) {  // only zeros so far (all in bin 0, which stays bin 0)
    top = amax;
    return;
  }
  int64_t factor = 1;
  while (top < amax) {
    top *= 2;  // exact in float: the bin edges of the merged bins coincide
    if (factor < ibins_) factor *= 2;
  }
  double* h = &counts_[c * ibins_];
  for (int64_t j = 0; j < ibins_; ++j) {
    double s = 0;
    if (j * factor < ibins_)
      for (int64_t i = j * factor; i < std::min(ibins_, (j + 1) * factor); ++i) s += h[i];
    h[j] = s;  // j * factor >= j: reads never see an already merged slot
  }
}

void AbsHistogram::add_per_tensor(const at::Tensor& xf) {
  const float top = top_[0];
  double* h = counts_.data();
  zeros_[0] += double(xf.numel() - at::count_nonzero(xf).item<int64_t>());
  if (top == 0) {  // every value is zero
    h[0] += double(xf.numel());
    return;
  }
  // Histogram of the signed values over [-R, R] with 2 * ibins bins, folded
  // onto |x|: no |x| temporary, one pass per chunk.
  at::Tensor flat = xf.reshape({-1});
  const int64_t n = flat.numel();
  for (int64_t start = 0; start < n; start += kHistcChunk) {
    at::Tensor part = flat.slice(0, start, std::min(n, start + kHistcChunk));
    at::Tensor hc = at::histc(part, 2 * ibins_, -top, top).contiguous();
    const float* p = hc.data_ptr<float>();
    for (int64_t j = 0; j < ibins_; ++j) h[j] += double(p[ibins_ + j]) + double(p[ibins_ - 1 - j]);
  }
}

void AbsHistogram::add_per_channel(const at::Tensor& xf) {
  int64_t axis = channel_axis(xf, axis_, who_);
  at::Tensor y = channels_first(xf, axis);  // [C, N]
  const int64_t C = y.size(0);
  at::Tensor nonzero = at::count_nonzero(y, c10::IntArrayRef{1}).contiguous();
  for (int64_t c = 0; c < C; ++c)
    zeros_[c] += double(y.size(1) - nonzero.data_ptr<int64_t>()[c]);
  std::vector<float> factor(C);
  for (int64_t c = 0; c < C; ++c) factor[c] = top_[c] > 0 ? float(ibins_) / top_[c] : 0.0f;
  at::Tensor f = at::from_blob(factor.data(), {C, 1}, at::kFloat);
  at::Tensor idx = at::mul(y.abs(), f).clamp_(0, double(ibins_ - 1)).to(at::kLong);
  idx.add_(at::arange(C, at::kLong).mul_(ibins_).unsqueeze(1));
  at::Tensor cnt = at::bincount(idx.reshape({-1}), {}, C * ibins_).contiguous();
  const int64_t* p = cnt.data_ptr<int64_t>();
  for (int64_t i = 0; i < C * ibins_; ++i) counts_[i] += double(p[i]);
}

std::vector<double> AbsHistogram::counts(size_t c, bool skip_zeros) const {
  std::vector<double> out = rebinned(c);
  if (skip_zeros) out[0] = std::max(0.0, out[0] - zeros_[c]);
  return out;
}

std::vector<double> AbsHistogram::rebinned(size_t c) const {
  std::vector<double> out(bins_, 0.0);
  const double* h = &counts_[c * ibins_];
  const double a = amax(c);
  if (!(a > 0)) {
    out[0] = total(c);
    return out;
  }
  const double w = double(top_[c]) / ibins_;  // internal bin width
  const double W = a / bins_;                 // final bin width
  // The exact zeros are a point mass at 0: final bin 0, never spread.
  out[0] = zeros_[c];
  for (int64_t i = 0; i < ibins_; ++i) {
    const double count = i == 0 ? std::max(0.0, h[0] - zeros_[c]) : h[i];
    if (count == 0) continue;
    // No value exceeds amax: an internal bin straddling it holds values <= amax.
    double lo = std::min(i * w, a), hi = std::min((i + 1) * w, a);
    if (hi <= lo) {
      out[std::min<int64_t>(bins_ - 1, int64_t(lo / W))] += count;
      continue;
    }
    int64_t j0 = std::min<int64_t>(bins_ - 1, int64_t(lo / W));
    int64_t j1 = std::min<int64_t>(bins_ - 1, int64_t(hi / W));
    if (j0 == j1) {
      out[j0] += count;
      continue;
    }
    const double dens = count / (hi - lo);
    double placed = 0;
    for (int64_t j = j0; j < j1; ++j) {
      double part = dens * (std::min(hi, (j + 1) * W) - std::max(lo, j * W));
      out[j] += part;
      placed += part;
    }
    // The remainder, so the count is kept (rounding may leave it a hair below 0).
    out[j1] += std::max(0.0, count - placed);
  }
  return out;
}

QParams qparams_from_histogram(const AbsHistogram& h, const ObserverConfig& cfg,
                               const ThresholdFn& threshold, bool skip_zeros) {
  Range clip;
  for (size_t c = 0; c < h.channels(); ++c) {
    float a = h.amax(c);
    float t = a > 0 ? std::clamp(threshold(c, h.counts(c, skip_zeros), a), 0.0f, a) : 0.0f;
    auto [lo, hi] = clip_for_threshold(t, h.range().lo[c], h.range().hi[c], cfg);
    clip.lo.push_back(lo);
    clip.hi.push_back(hi);
  }
  return qparams_for_clip(h.range(), clip, cfg);
}

}  // namespace tq::obs
