// Number formats: OCP FP8 (E4M3FN, E5M2), int4 packing, and weight
// quantization to int8/uint8/int4/fp8 with per-tensor, per-channel or
// per-group scales. Torch-free: plain arrays in, plain arrays out.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "taoquant/enums.h"
#include "taoquant/sqnr.h"

namespace tq::wformat {

enum class Fp8 { kE4M3FN, kE5M2 };

// Largest finite value: 448 (E4M3FN), 57344 (E5M2).
float fp8_max(Fp8 f);
// Round to nearest, ties to even; saturating to +-max (finite overflow and
// +-inf both saturate); NaN maps to a NaN code. -0 keeps its sign bit.
uint8_t fp8_encode(float x, Fp8 f);
// Exact value of a code (NaN codes give NaN; E5M2 infinity codes give +-inf).
float fp8_decode(uint8_t code, Fp8 f);
// fp8_decode of every code, indexed by code.
const std::array<float, 256>& fp8_table(Fp8 f);

// int4 packing: two signed 4-bit values per byte, element 2i in the low
// nibble and 2i+1 in the high nibble; an odd count leaves the last high
// nibble zero. `out` holds (n + 1) / 2 bytes. Values must be in [-8, 7].
void pack_int4(const int8_t* v, size_t n, uint8_t* out);
void unpack_int4(const uint8_t* packed, size_t n, int8_t* out);

// How one weight tensor is quantized.
struct WeightFormat {
  DType dtype = DType::kInt8;  // not kNative
  Granularity granularity = Granularity::kPerChannel;
  int axis = 0;          // channel axis for per-channel
  int group_size = 128;  // per-group: contiguous elements of a row (rows = dim 0)
  bool symmetric = true;
};

// The result of quantizing one tensor.
//  - Element order of `codes` is the input's row-major order, except
//    per-group, where each row (dim 0) is padded to `groups_per_row *
//    group_size` elements.
//  - `codes` holds one byte per element (two's complement for int8), or two
//    per byte for int4 (see pack_int4).
//  - value = (lut[code] - zero_point[s]) * scale[s], where s is the element's
//    tensor/channel/group index.
//  - Scales: symmetric amax / qmax (127 int8, 7 int4, fp8_max for fp8);
//    asymmetric (int8 [-128,127], uint8 [0,255], int4 [-8,7]) affine over
//    [min(x,0), max(x,0)], zero_point = qmin - round_half_even(min / scale).
//    An all-zero slice gets scale 1, zero point 0 and code 0; a nonzero scale
//    never goes below FLT_MIN (no subnormal scales).
//  - Per-group padding codes decode to 0 (code 0 when symmetric, the group's
//    zero point when asymmetric).
//  - Scales are ordered by slice: channel index, or row * groups_per_row + group.
struct QuantizedWeight {
  WeightFormat format;
  std::vector<int64_t> shape;  // original shape
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> zero_points;  // empty when symmetric
  std::vector<float> lut;          // 256 entries (8-bit), 16 (int4)
  int64_t group_size = 0;          // effective (per-group only)
  int64_t groups_per_row = 0;      // per-group only
  std::vector<float> dequant;      // decoded values, original shape and order
  double sqnr_db = 0;              // +inf when exact
  size_t bytes() const;            // codes + scales + zero points
};

// Throws tq::Error on an unsupported combination (e.g. int4 per-tensor is
// allowed; fp8 per-group is not).
// UsageError: native dtype, a granularity not in weight_granularities(dtype),
// asymmetric fp8, symmetric uint8, per-channel axis outside [0, rank),
// per-group on a scalar or group_size <= 0. RuntimeError: NaN/inf weights,
// negative dimensions.
QuantizedWeight quantize_weight(const float* w, const std::vector<int64_t>& shape,
                                const WeightFormat& f);

// Quantizes `w` (same shape and format as `qparams`) with the scales and
// zero points of `qparams` instead of ones computed from w's range. Values
// already on that grid (e.g. from WeightGrid) keep their codes.
QuantizedWeight quantize_weight_with(const float* w, const QuantizedWeight& qparams);

// The grid of one quantized tensor: the value that an element at a flat
// (row-major) index rounds to under that tensor's scales and zero points,
// exactly as quantize_weight_with rounds it. GPTQ rounds column by column
// on it.
class WeightGrid {
 public:
  explicit WeightGrid(const QuantizedWeight& qparams);
  float nearest(size_t flat, float v) const;
  size_t slice(size_t flat) const;  // the index of the element's scale

 private:
  const QuantizedWeight& q_;
  size_t inner_ = 1, slices_ = 1, row_len_ = 1, gs_ = 1, gpr_ = 1;
};

// 10*log10(sum(ref^2) / sum((ref-x)^2)); +inf when equal (sqnr.h).
using ::tq::sqnr_db;

}  // namespace tq::wformat
