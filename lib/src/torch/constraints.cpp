// Applying QParamConstraints to computed qparams (see qparams.h for the
// rules and why power-of-two rounding goes up).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "taoquant/observer.h"
#include "taoquant/qparams.h"

namespace tq {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// PyTorch's symmetric zero point: 0 for signed ranges, the middle for
// unsigned ones (128 for [0, 255]).
int symmetric_zero_point(int qmin, int qmax) {
  return qmin < 0 ? 0 : (qmin + qmax + 1) / 2;
}

bool integer_dtype(DType d) {
  return dtype_traits(d).is_integer;
}

std::vector<int32_t> zero_points_of(const QParams& q) {
  if (q.zero_point.empty()) return std::vector<int32_t>(q.scale.size(), 0);
  if (q.zero_point.size() != q.scale.size())
    throw RuntimeError("qparams: " + std::to_string(q.scale.size()) + " scales but " +
                       std::to_string(q.zero_point.size()) + " zero points");
  return q.zero_point;
}

bool is_symmetric(const QParams& q, const std::vector<int32_t>& zps) {
  if (!integer_dtype(q.dtype)) return true;
  const int c = symmetric_zero_point(q.quant_min, q.quant_max);
  return std::all_of(zps.begin(), zps.end(), [c](int32_t z) { return z == c; });
}

// float(min_scale) rounded up, so that a clamped scale is never below it.
float min_scale_float(double m) {
  if (m > FLT_MAX)
    throw RuntimeError("min_scale " + num(m) + " is larger than the largest float scale");
  float f = static_cast<float>(m);
  if (static_cast<double>(f) < m) f = std::nextafter(f, FLT_MAX);
  return f;
}

void check_scale(float s, size_t i) {
  if (!(s > 0) || !std::isfinite(s))
    throw RuntimeError("qparams: scale[" + std::to_string(i) + "] = " + num(s) +
                       " is not a positive finite number");
}

}  // namespace

bool constraints_active(const QParamConstraints& c) {
  return c.symmetric_only || c.power_of_two_scale || c.min_scale > 0 || c.quant_min.has_value() ||
         c.quant_max.has_value();
}

bool is_power_of_two(double s) {
  if (!(s > 0) || !std::isfinite(s)) return false;
  int e = 0;
  return std::frexp(s, &e) == 0.5;
}

float pot_ceil(float s) {
  if (!(s > 0) || !std::isfinite(s))
    throw RuntimeError("power-of-two scale: " + num(s) + " is not a positive finite number");
  int e = 0;
  const float m = std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1)
  if (m == 0.5f) return s;
  const float r = std::ldexp(1.0f, e);
  if (!std::isfinite(r))
    throw RuntimeError("power-of-two scale: " + num(s) + " has no power of two above it in float");
  return r;
}

float constrain_scale(float s, const QParamConstraints& c) {
  check_scale(s, 0);
  if (c.min_scale > 0) s = std::max(s, min_scale_float(c.min_scale));
  if (c.power_of_two_scale) s = pot_ceil(s);
  return s;
}

QParams apply_constraints(const QParams& in, const QParamConstraints& c) {
  QParams q = in;
  std::vector<int32_t> zps = zero_points_of(in);
  for (size_t i = 0; i < in.scale.size(); ++i) check_scale(in.scale[i], i);
  if (!integer_dtype(in.dtype)) {
    // Float8: amax scaling only; no integer range, always symmetric.
    for (auto& s : q.scale) s = constrain_scale(s, c);
    return q;
  }
  const int old_lo = in.quant_min, old_hi = in.quant_max;
  if (old_lo >= old_hi)
    throw RuntimeError("qparams: quant_min " + std::to_string(old_lo) + " is not below quant_max " +
                       std::to_string(old_hi));
  int lo = old_lo, hi = old_hi;
  if (c.quant_min) lo = std::max(lo, *c.quant_min);
  if (c.quant_max) hi = std::min(hi, *c.quant_max);
  if (lo >= hi)
    throw RuntimeError("qparams: the range [" + std::to_string(old_lo) + ", " +
                       std::to_string(old_hi) + "] of " + std::string(to_string(in.dtype)) +
                       " and the backend's bounds [" +
                       (c.quant_min ? std::to_string(*c.quant_min) : "-inf") + ", " +
                       (c.quant_max ? std::to_string(*c.quant_max) : "inf") + "] do not overlap");
  const bool narrowed = lo != old_lo || hi != old_hi;
  const bool was_symmetric = is_symmetric(in, zps);
  const bool symmetric = was_symmetric || c.symmetric_only;
  const double old_span = old_hi - old_lo, span = hi - lo;

  q.quant_min = lo;
  q.quant_max = hi;
  q.zero_point.assign(zps.size(), 0);
  for (size_t i = 0; i < in.scale.size(); ++i) {
    const double s_in = in.scale[i];
    const int zp = zps[i];
    // The real range the incoming qparams represent.
    const double rlo = (old_lo - zp) * s_in, rhi = (old_hi - zp) * s_in;
    double s = s_in;
    if (symmetric && !was_symmetric) {
      s = std::max(-rlo, rhi) / (span / 2.0);
    } else if (narrowed) {
      s = s_in * (old_span / span);  // same real range over fewer steps
    }
    if (!(s > 0) || !std::isfinite(s) || s > FLT_MAX)
      throw RuntimeError("qparams: constraining scale[" + std::to_string(i) + "] = " + num(s_in) +
                         " gives " + num(s) + ", which is not a usable scale");
    const float sf = constrain_scale(static_cast<float>(s), c);
    q.scale[i] = sf;
    if (symmetric) {
      q.zero_point[i] = symmetric_zero_point(lo, hi);
    } else if (sf != in.scale[i] || narrowed) {
      const double z = lo - std::nearbyint(rlo / sf);
      q.zero_point[i] = static_cast<int32_t>(std::min<double>(std::max<double>(z, lo), hi));
    } else {
      q.zero_point[i] = zp;
    }
  }
  return q;
}

std::vector<std::string> constraint_violations(const QParams& q, const QParamConstraints& c) {
  std::vector<std::string> out;
  const auto zps = zero_points_of(q);
  const bool integer = integer_dtype(q.dtype);
  if (integer && c.quant_min && q.quant_min < *c.quant_min)
    out.push_back("quant_min " + std::to_string(q.quant_min) + " is below the backend's bound " +
                  std::to_string(*c.quant_min));
  if (integer && c.quant_max && q.quant_max > *c.quant_max)
    out.push_back("quant_max " + std::to_string(q.quant_max) + " is above the backend's bound " +
                  std::to_string(*c.quant_max));
  constexpr size_t kMaxLines = 8;
  size_t extra = 0;
  auto add = [&](std::string s) {
    if (out.size() < kMaxLines)
      out.push_back(std::move(s));
    else
      ++extra;
  };
  if (integer && c.symmetric_only && !is_symmetric(q, zps)) {
    const int want = symmetric_zero_point(q.quant_min, q.quant_max);
    for (size_t i = 0; i < zps.size(); ++i)
      if (zps[i] != want)
        add("zero_point[" + std::to_string(i) + "] = " + std::to_string(zps[i]) +
            " (symmetric needs " + std::to_string(want) + ")");
  }
  for (size_t i = 0; i < q.scale.size(); ++i) {
    const float s = q.scale[i];
    if (!(s > 0) || !std::isfinite(s)) {
      add("scale[" + std::to_string(i) + "] = " + num(s) + " is not a positive finite number");
      continue;
    }
    if (c.min_scale > 0 && s < c.min_scale)
      add("scale[" + std::to_string(i) + "] = " + num(s) + " is below min_scale " +
          num(c.min_scale));
    if (c.power_of_two_scale && !is_power_of_two(s))
      add("scale[" + std::to_string(i) + "] = " + num(s) + " is not a power of two");
  }
  if (extra) out.push_back("... and " + std::to_string(extra) + " more");
  return out;
}

bool weight_code_range(const wformat::WeightFormat& f, int& qmin, int& qmax) {
  switch (f.dtype) {
    case DType::kInt8:
      qmin = f.symmetric ? -127 : -128;
      qmax = 127;
      return true;
    case DType::kUInt8:
      qmin = 0;
      qmax = 255;
      return true;
    case DType::kInt4:
      qmin = -8;
      qmax = 7;
      return true;
    default:
      return false;
  }
}

namespace {

// A weight's flat element index -> its slice (scale) and its code's position.
struct SliceMap {
  Granularity granularity;
  size_t numel = 1, inner = 0, channels = 1, row_len = 0, gs = 0, gpr = 0, code_elems = 0;

  explicit SliceMap(const wformat::QuantizedWeight& q) : granularity(q.format.granularity) {
    for (auto d : q.shape) numel *= static_cast<size_t>(d);
    inner = numel;
    if (granularity == Granularity::kPerChannel) {
      const auto axis = static_cast<size_t>(q.format.axis);
      inner = 1;
      for (size_t i = axis + 1; i < q.shape.size(); ++i) inner *= static_cast<size_t>(q.shape[i]);
      channels = static_cast<size_t>(q.shape[axis]);
    } else if (granularity == Granularity::kPerGroup) {
      row_len = q.shape.empty() || q.shape[0] == 0 ? 0 : numel / static_cast<size_t>(q.shape[0]);
      gs = static_cast<size_t>(q.group_size);
      gpr = static_cast<size_t>(q.groups_per_row);
    }
    code_elems =
        granularity == Granularity::kPerGroup ? (row_len ? numel / row_len : 0) * gpr * gs : numel;
  }

  void locate(size_t e, size_t& slice, size_t& pos) const {
    slice = 0;
    pos = e;
    if (granularity == Granularity::kPerChannel) {
      slice = (e / inner) % channels;
    } else if (granularity == Granularity::kPerGroup) {
      const size_t r = e / row_len, j = e % row_len;
      slice = r * gpr + j / gs;
      pos = r * gpr * gs + j;
    }
  }
};

// Quantizes `w` again into `q` (same layout) with the scales and zero points
// of `cq`.
void requantize(const float* w, wformat::QuantizedWeight& q, const QParams& cq) {
  const auto& f = q.format;
  const bool integer = integer_dtype(f.dtype);
  const bool int4 = f.dtype == DType::kInt4;
  const wformat::Fp8 fp8 = f.dtype == DType::kFp8E5M2 ? wformat::Fp8::kE5M2 : wformat::Fp8::kE4M3FN;
  const SliceMap map(q);
  const size_t numel = map.numel, gs = map.gs, code_elems = map.code_elems;

  std::vector<int32_t> zps = cq.zero_point;
  zps.resize(cq.scale.size(), 0);
  std::vector<int8_t> nibbles(int4 ? code_elems : 0, 0);
  if (!int4) q.codes.assign(code_elems, 0);
  auto put = [&](size_t pos, int code) {
    if (int4)
      nibbles[pos] = static_cast<int8_t>(code);
    else
      q.codes[pos] = static_cast<uint8_t>(code);  // two's complement byte for int8
  };
  if (integer && f.granularity == Granularity::kPerGroup)  // padding decodes to 0
    for (size_t s = 0; s < cq.scale.size(); ++s)
      for (size_t i = 0; i < gs; ++i) put(s * gs + i, zps[s]);

  for (size_t e = 0; e < numel; ++e) {
    size_t slice = 0, pos = e;
    map.locate(e, slice, pos);
    const float s = cq.scale[slice];
    if (integer) {
      const float lo = static_cast<float>(cq.quant_min - zps[slice]);
      const float hi = static_cast<float>(cq.quant_max - zps[slice]);
      const float v = std::min(std::max(w[e] / s, lo), hi);
      const float r = std::nearbyint(v);  // ties to even, as wformat::quantize_weight
      put(pos, static_cast<int>(r) + zps[slice]);
      q.dequant[e] = r * s;
    } else {
      const uint8_t code = wformat::fp8_encode(w[e] / s, fp8);
      put(pos, code);
      q.dequant[e] = wformat::fp8_decode(code, fp8) * s;
    }
  }
  if (int4) {
    q.codes.assign((code_elems + 1) / 2, 0);
    wformat::pack_int4(nibbles.data(), code_elems, q.codes.data());
  }
  q.scales = cq.scale;
  if (!q.zero_points.empty())
    for (size_t i = 0; i < q.zero_points.size(); ++i) q.zero_points[i] = static_cast<float>(zps[i]);
  q.sqnr_db = wformat::sqnr_db(w, q.dequant.data(), numel);
}

}  // namespace

wformat::QuantizedWeight quantize_weight_constrained(const float* w,
                                                     const std::vector<int64_t>& shape,
                                                     const wformat::WeightFormat& f,
                                                     const QParamConstraints& c) {
  auto q = wformat::quantize_weight(w, shape, f);
  if (!constraints_active(c)) return q;
  if (c.symmetric_only && !f.symmetric)
    throw UsageError("quantize_weight: the backend supports symmetric quantization only, but " +
                     std::string(to_string(f.dtype)) + " weights were asked to be asymmetric");
  QParams qp;
  qp.dtype = f.dtype;
  qp.per_channel = f.granularity != Granularity::kPerTensor;
  qp.axis = f.axis;
  qp.scale = q.scales;
  qp.zero_point.assign(q.scales.size(), 0);
  for (size_t i = 0; i < q.zero_points.size() && i < qp.zero_point.size(); ++i)
    qp.zero_point[i] = static_cast<int32_t>(q.zero_points[i]);
  if (!weight_code_range(f, qp.quant_min, qp.quant_max)) qp.quant_min = qp.quant_max = 0;
  const QParams cq = apply_constraints(qp, c);
  if (cq.scale == qp.scale && cq.zero_point == qp.zero_point && cq.quant_min == qp.quant_min &&
      cq.quant_max == qp.quant_max)
    return q;
  requantize(w, q, cq);
  return q;
}

}  // namespace tq
