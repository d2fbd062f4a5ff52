// Weight quantization to int8/uint8/int4/fp8 with per-tensor, per-channel
// or per-group scales.
//
// Every element goes through one templated kernel that produces its code,
// its decoded value and the SQNR energies in the same step. Contiguous
// slices (per-tensor, per-channel on axis 0, per-group) are scanned for
// their range and quantized right after, while they are still in cache;
// per-channel on an inner axis scans the whole tensor first.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "formats/fp8_impl.h"
#include "taoquant/error.h"
#include "taoquant/formats.h"

namespace tq::wformat {
namespace {

// Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 leaves
// no fraction bits, so the FPU's default rounding does the work. Needs
// IEEE single evaluation (SSE on x86-64, any AArch64) and no -ffast-math.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

using Energy = SqnrEnergy;

// ---- Per-slice quantizers: code + decoded value of one element ----------

// Integer formats. Clamping happens in units of steps relative to the zero
// point, so the rounded value is the code minus the zero point.
struct IntQ {
  float scale = 1;
  float lo = 0, hi = 0;  // qmin - zp, qmax - zp
  int zp = 0;
  uint8_t operator()(float x, float& dq) const {
    float v = x / scale;
    v = v < lo ? lo : (v > hi ? hi : v);
    const float r = round_even(v);
    dq = r * scale;
    return static_cast<uint8_t>(static_cast<int>(r) + zp);  // two's complement byte
  }
  uint8_t zero_code() const { return static_cast<uint8_t>(zp); }
};

template <class T>
struct Fp8Q {
  float scale = 1;
  const float* table = nullptr;
  uint8_t operator()(float x, float& dq) const {
    const uint8_t c = detail::encode_fp8<T>(x / scale);
    dq = table[c] * scale;
    return c;
  }
  uint8_t zero_code() const { return 0; }
};

// ---- Scale selection ------------------------------------------------------

// A nonzero range whose scale would be subnormal gets FLT_MIN instead, so no
// consumer ever sees a subnormal (flushed-to-zero) scale; elements then
// round as usual (errors stay below FLT_MIN / 2).
float safe_scale(float s) {
  return s < FLT_MIN ? FLT_MIN : s;
}

struct IntFormat {
  int qmin, qmax;  // code range
  float sym_den;   // symmetric: scale = amax / sym_den
  bool symmetric;
  IntQ make(float mn, float mx, float& scale, float& zp) const {
    IntQ q;
    if (symmetric) {
      const float amax = std::max(-mn, mx);
      q.scale = amax > 0 ? safe_scale(amax / sym_den) : 1.0f;
      q.zp = 0;
    } else {
      const float lo = std::min(mn, 0.0f), hi = std::max(mx, 0.0f);
      const float steps = static_cast<float>(qmax - qmin);
      if (hi > lo) {
        float s = (hi - lo) / steps;
        if (!std::isfinite(s)) s = hi / steps - lo / steps;  // range above FLT_MAX
        q.scale = safe_scale(s);
        const float z = static_cast<float>(qmin) - std::nearbyint(lo / q.scale);
        q.zp = static_cast<int>(
            std::min(std::max(z, static_cast<float>(qmin)), static_cast<float>(qmax)));
      } else {
        q.scale = 1;
        q.zp = 0;  // all zeros: code 0 is the value 0 in every integer format
      }
    }
    q.lo = static_cast<float>(qmin - q.zp);
    q.hi = static_cast<float>(qmax - q.zp);
    scale = q.scale;
    zp = static_cast<float>(q.zp);
    return q;
  }
  // The quantizer of given qparams (quantize_weight_with, WeightGrid).
  IntQ from(float scale, float zp) const {
    IntQ q;
    q.scale = scale;
    q.zp = static_cast<int>(zp);
    q.lo = static_cast<float>(qmin - q.zp);
    q.hi = static_cast<float>(qmax - q.zp);
    return q;
  }
};

template <class T>
struct Fp8Format {
  float max_value;
  const float* table;
  Fp8Q<T> make(float mn, float mx, float& scale, float& zp) const {
    Fp8Q<T> q;
    const float amax = std::max(-mn, mx);
    q.scale = amax > 0 ? safe_scale(amax / max_value) : 1.0f;
    q.table = table;
    scale = q.scale;
    zp = 0;
    return q;
  }
  Fp8Q<T> from(float scale, float) const { return {scale, table}; }
};

// A format whose qparams are given: the slice's scale and zero point are
// already in the output (copied from another quantization of the same shape).
template <class Fmt>
struct Fixed {
  Fmt f;
  auto make(float, float, float& scale, float& zp) const { return f.from(scale, zp); }
};

// ---- Code writers ---------------------------------------------------------

struct ByteWriter {
  uint8_t* out;
  void put(size_t pos, uint8_t c) const { out[pos] = c; }
};

// Two codes per byte, even positions in the low nibble; `out` starts zeroed.
struct NibbleWriter {
  uint8_t* out;
  void put(size_t pos, uint8_t c) const {
    out[pos >> 1] |= static_cast<uint8_t>((c & 0x0Fu) << ((pos & 1u) << 2));
  }
};

// ---- Kernels --------------------------------------------------------------

// Range of x[0..n); `base` is the flat index of x[0] (for the message).
void scan_range(const float* x, size_t n, size_t base, float& mn, float& mx) {
  float lo = mn, hi = mx;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      throw RuntimeError("quantize_weight: weight element " + std::to_string(base + i) + " is " +
                         (std::isnan(v) ? "NaN" : "infinite") +
                         "; only finite weights can be quantized");
    }
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  mn = lo;
  mx = hi;
}

template <class Q, class W>
void quantize_run(const float* x, size_t n, const Q& q, const W& w, size_t pos, float* dq,
                  Energy& e) {
  Energy acc = e;
  for (size_t i = 0; i < n; ++i) {
    float d;
    w.put(pos + i, q(x[i], d));
    dq[i] = d;
    acc.add(x[i], d);
  }
  e = acc;
}

constexpr float kEmptyMin = std::numeric_limits<float>::infinity();

// Per-tensor and per-channel: the tensor seen as [outer, channels, inner].
template <class Fmt, class W>
void quantize_channels(const float* x, size_t outer, size_t channels, size_t inner, const Fmt& fmt,
                       const W& w, QuantizedWeight& out, Energy& e) {
  using Q = decltype(fmt.make(0, 0, out.scales[0], out.scales[0]));
  float* dq = out.dequant.data();
  float zp = 0;
  float* zps = out.zero_points.empty() ? nullptr : out.zero_points.data();
  if (outer == 1) {
    // Each channel is contiguous: scan then quantize while it is cached.
    for (size_t c = 0; c < channels; ++c) {
      const size_t off = c * inner;
      float mn = kEmptyMin, mx = -kEmptyMin;
      scan_range(x + off, inner, off, mn, mx);
      const Q q = fmt.make(mn, mx, out.scales[c], zps ? zps[c] : zp);
      quantize_run(x + off, inner, q, w, off, dq + off, e);
    }
    return;
  }
  std::vector<float> mins(channels, kEmptyMin), maxs(channels, -kEmptyMin);
  for (size_t o = 0; o < outer; ++o)
    for (size_t c = 0; c < channels; ++c) {
      const size_t off = (o * channels + c) * inner;
      scan_range(x + off, inner, off, mins[c], maxs[c]);
    }
  std::vector<Q> qs(channels);
  for (size_t c = 0; c < channels; ++c)
    qs[c] = fmt.make(mins[c], maxs[c], out.scales[c], zps ? zps[c] : zp);
  for (size_t o = 0; o < outer; ++o)
    for (size_t c = 0; c < channels; ++c) {
      const size_t off = (o * channels + c) * inner;
      quantize_run(x + off, inner, qs[c], w, off, dq + off, e);
    }
}

// Per-group: rows of `row_len` elements, groups of `gs`, each row padded to
// `gpr * gs` codes with the code of the value 0.
template <class Fmt, class W>
void quantize_groups(const float* x, size_t rows, size_t row_len, size_t gs, size_t gpr,
                     const Fmt& fmt, const W& w, QuantizedWeight& out, Energy& e) {
  float* dq = out.dequant.data();
  float zp = 0;
  float* zps = out.zero_points.empty() ? nullptr : out.zero_points.data();
  for (size_t r = 0; r < rows; ++r) {
    for (size_t g = 0; g < gpr; ++g) {
      const size_t s = r * gpr + g;
      const size_t start = g * gs;
      const size_t len = std::min(gs, row_len - start);
      const size_t off = r * row_len + start;
      const size_t pos = s * gs;
      float mn = kEmptyMin, mx = -kEmptyMin;
      scan_range(x + off, len, off, mn, mx);
      const auto q = fmt.make(mn, mx, out.scales[s], zps ? zps[s] : zp);
      quantize_run(x + off, len, q, w, pos, dq + off, e);
      if (q.zero_code() != 0)
        for (size_t i = len; i < gs; ++i) w.put(pos + i, q.zero_code());
    }
  }
}

// ---- Validation and layout ------------------------------------------------

std::string fmt_name(const WeightFormat& f) {
  return std::string(to_string(f.dtype)) + " " + std::string(to_string(f.granularity));
}

struct Layout {
  size_t numel = 1;
  size_t slices = 1;             // number of scales
  size_t outer = 1, inner = 1;   // per-tensor / per-channel view
  size_t rows = 0, row_len = 0;  // per-group view
  size_t gs = 0, gpr = 0;
  size_t code_elems = 0;  // codes including per-group padding
};

// The dtype, granularity and symmetry fit together.
void check_format(const WeightFormat& f) {
  const DType d = f.dtype;
  if (d == DType::kNative)
    throw UsageError("quantize_weight: dtype native is not a quantized format");
  const auto allowed = weight_granularities(d);
  if (std::find(allowed.begin(), allowed.end(), f.granularity) == allowed.end()) {
    std::string list;
    for (Granularity g : allowed) list += (list.empty() ? "" : ", ") + std::string(to_string(g));
    throw UsageError("quantize_weight: " + fmt_name(f) + " is not supported; " +
                     std::string(to_string(d)) + " weights allow granularity " + list);
  }
  if (dtype_traits(d).is_float8 && !f.symmetric)
    throw UsageError("quantize_weight: " + std::string(to_string(d)) +
                     " is symmetric only (symmetric: false is not supported)");
  if (d == DType::kUInt8 && f.symmetric)
    throw UsageError(
        "quantize_weight: uint8 is asymmetric only (symmetric: true is not supported; use int8 "
        "for symmetric quantization)");
}

Layout check_and_layout(const std::vector<int64_t>& shape, const WeightFormat& f) {
  check_format(f);
  Layout l;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      throw RuntimeError("quantize_weight: negative dimension " + std::to_string(shape[i]) +
                         " at index " + std::to_string(i));
    l.numel *= static_cast<size_t>(shape[i]);
  }
  const int rank = static_cast<int>(shape.size());
  switch (f.granularity) {
    case Granularity::kPerTensor:
      l.inner = l.numel;
      l.code_elems = l.numel;
      break;
    case Granularity::kPerChannel: {
      if (f.axis < 0 || f.axis >= rank)
        throw UsageError("quantize_weight: per_channel axis " + std::to_string(f.axis) +
                         " is out of range for a tensor of rank " + std::to_string(rank));
      const auto axis = static_cast<size_t>(f.axis);
      for (size_t i = 0; i < axis; ++i) l.outer *= static_cast<size_t>(shape[i]);
      for (size_t i = axis + 1; i < shape.size(); ++i) l.inner *= static_cast<size_t>(shape[i]);
      l.slices = static_cast<size_t>(shape[axis]);
      l.code_elems = l.numel;
      break;
    }
    case Granularity::kPerGroup: {
      if (rank < 1)
        throw UsageError("quantize_weight: per_group needs a tensor of rank >= 1 (got a scalar)");
      if (f.group_size <= 0)
        throw UsageError("quantize_weight: per_group group_size must be positive, got " +
                         std::to_string(f.group_size));
      l.rows = static_cast<size_t>(shape[0]);
      l.row_len = 1;
      for (size_t i = 1; i < shape.size(); ++i) l.row_len *= static_cast<size_t>(shape[i]);
      l.gs = std::min(static_cast<size_t>(f.group_size), l.row_len);
      l.gpr = l.gs == 0 ? 0 : (l.row_len + l.gs - 1) / l.gs;
      l.slices = l.rows * l.gpr;
      l.code_elems = l.slices * l.gs;
      break;
    }
  }
  return l;
}

std::vector<float> make_lut(DType d) {
  std::vector<float> lut;
  switch (d) {
    case DType::kInt8:
      for (int c = 0; c < 256; ++c) lut.push_back(static_cast<float>(static_cast<int8_t>(c)));
      break;
    case DType::kUInt8:
      for (int c = 0; c < 256; ++c) lut.push_back(static_cast<float>(c));
      break;
    case DType::kInt4:
      for (int c = 0; c < 16; ++c) lut.push_back(static_cast<float>(c < 8 ? c : c - 16));
      break;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2: {
      const auto& t = fp8_table(d == DType::kFp8E4M3 ? Fp8::kE4M3FN : Fp8::kE5M2);
      lut.assign(t.begin(), t.end());
      break;
    }
    case DType::kNative:
      break;
  }
  return lut;
}

template <class Fmt, class W>
void dispatch_layout(const float* w, const Layout& l, Granularity g, const Fmt& fmt,
                     const W& writer, QuantizedWeight& q, Energy& e) {
  if (g == Granularity::kPerGroup)
    quantize_groups(w, l.rows, l.row_len, l.gs, l.gpr, fmt, writer, q, e);
  else
    quantize_channels(w, l.outer, l.slices, l.inner, fmt, writer, q, e);
}

// Runs `fn(format, writer)` with the format object and code writer of `f`.
// `codes` is where the writer puts codes; `lut` the fp8 decode table.
template <class Fn>
void with_format(const WeightFormat& f, uint8_t* codes, const float* lut, Fn&& fn) {
  const ByteWriter bytes{codes};
  const NibbleWriter nibbles{codes};
  switch (f.dtype) {
    case DType::kInt8:
      return fn(IntFormat{f.symmetric ? -127 : -128, 127, 127.0f, f.symmetric}, bytes);
    case DType::kUInt8:
      return fn(IntFormat{0, 255, 0.0f, false}, bytes);
    case DType::kInt4:
      return fn(IntFormat{-8, 7, 7.0f, f.symmetric}, nibbles);
    case DType::kFp8E4M3:
      return fn(Fp8Format<detail::E4M3Traits>{448.0f, lut}, bytes);
    case DType::kFp8E5M2:
      return fn(Fp8Format<detail::E5M2Traits>{57344.0f, lut}, bytes);
    case DType::kNative:
      return;  // rejected by check_and_layout
  }
}

// quantize_weight, with the qparams of `fixed` when given.
QuantizedWeight quantize_impl(const float* w, const std::vector<int64_t>& shape,
                              const WeightFormat& f, const QuantizedWeight* fixed) {
  const Layout l = check_and_layout(shape, f);
  QuantizedWeight q;
  q.format = f;
  q.shape = shape;
  const bool int4 = f.dtype == DType::kInt4;
  q.codes.assign(int4 ? (l.code_elems + 1) / 2 : l.code_elems, 0);
  q.scales.assign(l.slices, 1.0f);
  if (!f.symmetric) q.zero_points.assign(l.slices, 0.0f);
  if (fixed) {
    if (fixed->scales.size() != l.slices || fixed->zero_points.size() != q.zero_points.size())
      throw UsageError("quantize_weight_with: the given qparams have " +
                       std::to_string(fixed->scales.size()) + " scales; " + fmt_name(f) +
                       " needs " + std::to_string(l.slices));
    q.scales = fixed->scales;
    q.zero_points = fixed->zero_points;
  }
  q.lut = make_lut(f.dtype);
  if (f.granularity == Granularity::kPerGroup) {
    q.group_size = static_cast<int64_t>(l.gs);
    q.groups_per_row = static_cast<int64_t>(l.gpr);
  }
  q.dequant.resize(l.numel);
  Energy e;
  with_format(f, q.codes.data(), q.lut.data(), [&](const auto& fmt, const auto& writer) {
    using F = std::decay_t<decltype(fmt)>;
    if (fixed)
      dispatch_layout(w, l, f.granularity, Fixed<F>{fmt}, writer, q, e);
    else
      dispatch_layout(w, l, f.granularity, fmt, writer, q, e);
  });
  q.sqnr_db = e.db();
  return q;
}

}  // namespace

size_t QuantizedWeight::bytes() const {
  return codes.size() + sizeof(float) * (scales.size() + zero_points.size());
}

QuantizedWeight quantize_weight(const float* w, const std::vector<int64_t>& shape,
                                const WeightFormat& f) {
  return quantize_impl(w, shape, f, nullptr);
}

QuantizedWeight quantize_weight_with(const float* w, const QuantizedWeight& qparams) {
  return quantize_impl(w, qparams.shape, qparams.format, &qparams);
}

WeightGrid::WeightGrid(const QuantizedWeight& q) : q_(q) {
  const Layout l = check_and_layout(q.shape, q.format);
  inner_ = l.inner;
  slices_ = l.slices;
  row_len_ = l.row_len;
  gs_ = l.gs;
  gpr_ = l.gpr;
}

size_t WeightGrid::slice(size_t flat) const {
  switch (q_.format.granularity) {
    case Granularity::kPerTensor:
      return 0;
    case Granularity::kPerChannel:
      return (flat / inner_) % slices_;
    case Granularity::kPerGroup:
      return (flat / row_len_) * gpr_ + (flat % row_len_) / gs_;
  }
  return 0;
}

float WeightGrid::nearest(size_t flat, float v) const {
  const size_t s = slice(flat);
  const float scale = q_.scales.at(s);
  const float zp = q_.zero_points.empty() ? 0.0f : q_.zero_points[s];
  float dq = 0;
  with_format(q_.format, nullptr, q_.lut.data(),
              [&](const auto& fmt, const auto&) { (void)fmt.from(scale, zp)(v, dq); });
  return dq;
}

}  // namespace tq::wformat
