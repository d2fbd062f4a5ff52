// Inline OCP FP8 encoder shared by fp8.cpp and quantize.cpp (private).
//
// Both formats are sign / exponent / mantissa with an exponent bias; codes
// with exponent field 0 are subnormal (value = m * 2^(1 - bias - mbits)).
//   E4M3FN: bias 7, 3 mantissa bits, no infinities, NaN = S.1111.111,
//           max S.1111.110 = 448.
//   E5M2:   bias 15, 2 mantissa bits, inf = S.11111.00, NaN = S.11111.{01,10,11},
//           max S.11110.11 = 57344.
// Encoding works on the float32 bit pattern only (no libm, no FP rounding
// mode dependence): rebias the exponent and round the 23-bit mantissa to
// nearest even with an integer add; the carry moves into the exponent on its
// own, and the subnormal range shifts the mantissa (with its implicit bit)
// further right with the same rounding rule.
#pragma once

#include <cstdint>
#include <cstring>

namespace tq::wformat::detail {

struct E4M3Traits {
  static constexpr int kManBits = 3;
  static constexpr int kBias = 7;
  static constexpr int kMaxExp = 8;  // unbiased exponent of the largest value
  static constexpr uint32_t kMaxMan = 6;
};

struct E5M2Traits {
  static constexpr int kManBits = 2;
  static constexpr int kBias = 15;
  static constexpr int kMaxExp = 15;
  static constexpr uint32_t kMaxMan = 3;
};

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The NaN code (with sign bit clear) is 0x7F in both formats.
constexpr uint8_t kFp8NanCode = 0x7F;

template <class T>
constexpr uint8_t fp8_max_code() {
  return static_cast<uint8_t>(((T::kMaxExp + T::kBias) << T::kManBits) | T::kMaxMan);
}

template <class T>
constexpr uint32_t fp8_max_bits() {
  return (static_cast<uint32_t>(127 + T::kMaxExp) << 23) | (T::kMaxMan << (23 - T::kManBits));
}

// Round to nearest even, saturate to +-max (also +-inf), NaN -> sign|0x7F.
template <class T>
inline uint8_t encode_fp8(float x) {
  constexpr int kShift = 23 - T::kManBits;
  constexpr uint32_t kMaxBits = fp8_max_bits<T>();
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - T::kBias) << 23;
  constexpr uint32_t kRebias = static_cast<uint32_t>(127 - T::kBias) << 23;
  // Right shift that takes a float with biased exponent e to fp8 subnormal
  // units: 2^(e - 150) / 2^(1 - bias - mbits).
  constexpr int kSubShiftBase = 127 + 23 + 1 - T::kBias - T::kManBits;

  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= kMaxBits) {
    if (a > 0x7F800000u) return sign | kFp8NanCode;
    return sign | fp8_max_code<T>();
  }
  uint32_t mag;
  if (a >= kMinNormalBits) {
    const uint32_t r = a - kRebias;
    mag = (r + ((1u << (kShift - 1)) - 1u) + ((r >> kShift) & 1u)) >> kShift;
  } else {
    const int s = kSubShiftBase - static_cast<int>(a >> 23);
    if (s > 24) {
      mag = 0;  // below half the smallest subnormal (float subnormals too)
    } else {
      const uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
      mag = (m + ((1u << (s - 1)) - 1u) + ((m >> s) & 1u)) >> s;
    }
  }
  return static_cast<uint8_t>(sign | mag);
}

}  // namespace tq::wformat::detail
