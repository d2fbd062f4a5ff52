// Quantization ranges and qparams from a (min, max) range, following
// PyTorch 1.13's UniformQuantizationObserverBase._calculate_qparams
// bit for bit: float32 arithmetic in the same order, the float32 machine
// epsilon as the smallest scale, round-half-even zero points clamped to the
// quantized range, and zero point 128 for symmetric quint8.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "taoquant/formats.h"
#include "taoquant/observer.h"

namespace tq {

void quant_range(DType dtype, bool reduce_range, int& qmin, int& qmax) {
  switch (dtype) {
    case DType::kUInt8:
      qmin = 0;
      qmax = reduce_range ? 127 : 255;
      return;
    case DType::kInt8:
      qmin = reduce_range ? -64 : -128;
      qmax = reduce_range ? 63 : 127;
      return;
    case DType::kInt4:  // a custom range in PyTorch terms: reduce_range halves both ends
      qmin = reduce_range ? -4 : -8;
      qmax = reduce_range ? 3 : 7;
      return;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2: {
      // Not an integer grid: the largest finite magnitude, for reports.
      auto f = dtype == DType::kFp8E5M2 ? wformat::Fp8::kE5M2 : wformat::Fp8::kE4M3FN;
      qmax = int(wformat::fp8_max(f));
      qmin = -qmax;
      return;
    }
    case DType::kNative:
      break;
  }
  throw UsageError("quant_range: dtype '" + std::string(to_string(dtype)) +
                   "' has no quantization range");
}

namespace {

// One channel's scale and zero point from its range [lo, hi], as PyTorch's
// observers compute them (fp8: ModelOpt's amax scaling).
void channel_qparams(float lo, float hi, const ObserverConfig& cfg, int qmin, int qmax,
                     float& scale, int32_t& zero_point) {
  const bool fp8 = dtype_traits(cfg.dtype).is_float8;
  const float eps = std::numeric_limits<float>::epsilon();  // torch.finfo(torch.float32).eps
  const float min_neg = std::min(lo, 0.0f);
  float max_pos = std::max(hi, 0.0f);
  if (fp8) {
    // amax scaling (ModelOpt): the largest magnitude maps to the format's max.
    const float amax = std::max(-min_neg, max_pos);
    const float fmax = float(qmax);
    scale = amax > 0 ? std::max(amax / fmax, FLT_MIN) : 1.0f;
    zero_point = 0;
  } else if (cfg.symmetric) {
    max_pos = std::max(-min_neg, max_pos);
    // float(quant_max - quant_min) / 2 in Python, then a float32 tensor division.
    const float denom = float(double(qmax - qmin) / 2.0);
    scale = std::max(max_pos / denom, eps);
    // quint8 without a customised range uses 128; int4 is our custom signed range.
    zero_point = cfg.dtype == DType::kUInt8 ? 128 : 0;
  } else {
    const float width = max_pos - min_neg;
    scale = std::max(width / float(qmax - qmin), eps);
    // torch.round: round half to even (nearbyint in the default rounding mode).
    float r = std::nearbyint(min_neg / scale);
    r = std::clamp(r, -1e9f, 1e9f);  // keeps the int conversion defined; far beyond the clamp
    const int zp = qmin - int(r);
    zero_point = std::clamp(zp, qmin, qmax);
  }
}

}  // namespace

QParams qparams_from_range(const std::vector<float>& min_vals, const std::vector<float>& max_vals,
                           const ObserverConfig& cfg) {
  if (min_vals.size() != max_vals.size())
    throw RuntimeError("qparams_from_range: " + std::to_string(min_vals.size()) + " minima but " +
                       std::to_string(max_vals.size()) + " maxima");
  QParams q;
  q.per_channel = cfg.per_channel;
  q.axis = cfg.axis;
  q.dtype = cfg.dtype;
  quant_range(cfg.dtype, cfg.reduce_range, q.quant_min, q.quant_max);
  // Nothing observed: PyTorch's defaults (scale 1, zero point 0).
  bool unobserved = min_vals.empty() || (min_vals.size() == 1 &&
                                         min_vals[0] == std::numeric_limits<float>::infinity() &&
                                         max_vals[0] == -std::numeric_limits<float>::infinity());
  if (unobserved) {
    q.scale = {1.0f};
    q.zero_point = {0};
    return q;
  }
  const size_t n = min_vals.size();
  q.scale.resize(n);
  q.zero_point.resize(n);
  q.min_val = q.clip_min = *std::min_element(min_vals.begin(), min_vals.end());
  q.max_val = q.clip_max = *std::max_element(max_vals.begin(), max_vals.end());
  for (size_t c = 0; c < n; ++c) {
    const float lo = min_vals[c], hi = max_vals[c];
    if (!(lo <= hi))  // PyTorch asserts min <= max; NaN fails here too
      throw RuntimeError("qparams_from_range: min " + std::to_string(lo) + " is not <= max " +
                         std::to_string(hi) +
                         (n > 1 ? " (channel " + std::to_string(c) + ")" : std::string()));
    channel_qparams(lo, hi, cfg, q.quant_min, q.quant_max, q.scale[c], q.zero_point[c]);
  }
  return q;
}

}  // namespace tq
