// Applying a backend's declared QParamConstraints (backend.h) to computed
// quantization parameters: the second half of the BackendConfig idea. The
// first half, refusing a spec that asks for something the backend cannot do,
// is check_capabilities() / apply_capabilities() in backend.h.
//
// The rules, in the order they are applied:
//  1. quant_min / quant_max: an integer range wider than the backend's bounds
//     is narrowed to them, and the scale grows by old/new range so the same
//     real range stays representable.
//  2. symmetric_only: affine qparams are made symmetric around 0 (zero point
//     0 for signed ranges, (qmin + qmax + 1) / 2 for unsigned ones, as
//     PyTorch's symmetric observers do), covering max(|lo|, |hi|).
//  3. min_scale: scales below it are raised to it.
//  4. power_of_two_scale: each scale is rounded UP to the next power of two,
//     scale = 2^ceil(log2(scale)), computed exactly (frexp, no log2 rounding).
//     Up, not to nearest: a larger step never clips more of the range the
//     observer chose; rounding down could clip up to half of it, and
//     "nearest" up to 29%. An observer that wants to trade clipping for
//     resolution picks its power of two itself (the pot_int8 example's
//     observer does); an exact power of two is left unchanged.
// Zero points of affine qparams are recomputed for the new scale.
// Float8 qparams have no integer range: only rules 3 and 4 apply to them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "taoquant/backend.h"
#include "taoquant/formats.h"

namespace tq {

struct QParams;  // observer.h

// Do the constraints ask for anything at all?
bool constraints_active(const QParamConstraints& c);

// True when s is exactly 2^k for some integer k (s > 0, finite).
bool is_power_of_two(double s);
// The smallest power of two >= s (s itself when it is one). Throws
// RuntimeError for s <= 0, NaN, inf, or a result above FLT_MAX.
float pot_ceil(float s);
// One scale under rules 3 and 4.
float constrain_scale(float s, const QParamConstraints& c);

// Applies rules 1-4. Throws RuntimeError when the qparams are malformed
// (scale/zero-point counts differ, non-positive scale) or when the dtype's
// range and the backend's bounds do not overlap.
QParams apply_constraints(const QParams& qp, const QParamConstraints& c);

// What about `qp` breaks the constraints, one line each (empty = none).
// Backends can assert on this in their tests.
std::vector<std::string> constraint_violations(const QParams& qp, const QParamConstraints& c);

// wformat::quantize_weight() followed by the constraints: the scales (and zero
// points) are constrained and the tensor is quantized again with them, so
// codes, dequantized values and SQNR match the constrained scales. With no
// active constraint this is exactly wformat::quantize_weight(). UsageError when
// the format is asymmetric and the constraints require symmetric.
wformat::QuantizedWeight quantize_weight_constrained(const float* w,
                                                     const std::vector<int64_t>& shape,
                                                     const wformat::WeightFormat& f,
                                                     const QParamConstraints& c);

// The integer range of a weight format as wformat::quantize_weight() uses it
// (symmetric int8 is [-127, 127]); false for float8.
bool weight_code_range(const wformat::WeightFormat& f, int& qmin, int& qmax);

}  // namespace tq
