// OCP FP8 (E4M3FN, E5M2) encode/decode and int4 packing.
#include <limits>

#include "formats/fp8_impl.h"
#include "taoquant/formats.h"

namespace tq::wformat {
namespace {

using detail::bits_float;
using detail::E4M3Traits;
using detail::E5M2Traits;

// Exact value of a code, built from its fields as float32 bits.
template <class T>
float decode_fields(uint8_t code) {
  constexpr int kM = T::kManBits;
  constexpr int kExpAll = (1 << (7 - kM)) - 1;  // all-ones exponent field
  const bool neg = (code & 0x80u) != 0;
  const int e = (code & 0x7F) >> kM;
  const uint32_t m = code & ((1u << kM) - 1u);
  float v;
  if (e == kExpAll && T::kMaxExp + T::kBias < kExpAll) {
    // E5M2-style top binade: m == 0 is infinity, the rest NaN.
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (e == kExpAll && m > T::kMaxMan) {
    v = std::numeric_limits<float>::quiet_NaN();  // E4M3FN: S.1111.111
  } else if (e == 0) {
    // m * 2^(1 - bias - mbits); the power of two is a normal float.
    const float unit = bits_float(static_cast<uint32_t>(127 + 1 - T::kBias - kM) << 23);
    v = static_cast<float>(m) * unit;
  } else {
    v = bits_float((static_cast<uint32_t>(e - T::kBias + 127) << 23) | (m << (23 - kM)));
  }
  return neg ? -v : v;
}

template <class T>
std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (size_t c = 0; c < t.size(); ++c) t[c] = decode_fields<T>(static_cast<uint8_t>(c));
  return t;
}

}  // namespace

float fp8_max(Fp8 f) {
  return f == Fp8::kE4M3FN ? 448.0f : 57344.0f;
}

uint8_t fp8_encode(float x, Fp8 f) {
  return f == Fp8::kE4M3FN ? detail::encode_fp8<E4M3Traits>(x) : detail::encode_fp8<E5M2Traits>(x);
}

const std::array<float, 256>& fp8_table(Fp8 f) {
  static const std::array<float, 256> e4m3 = make_table<E4M3Traits>();
  static const std::array<float, 256> e5m2 = make_table<E5M2Traits>();
  return f == Fp8::kE4M3FN ? e4m3 : e5m2;
}

float fp8_decode(uint8_t code, Fp8 f) {
  return fp8_table(f)[code];
}

void pack_int4(const int8_t* v, size_t n, uint8_t* out) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const auto lo = static_cast<uint8_t>(v[2 * i] & 0x0F);
    const auto hi = static_cast<uint8_t>(v[2 * i + 1] & 0x0F);
    out[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
  if (n % 2 != 0) out[pairs] = static_cast<uint8_t>(v[n - 1] & 0x0F);
}

void unpack_int4(const uint8_t* packed, size_t n, int8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const int nib = (packed[i / 2] >> ((i % 2) * 4)) & 0x0F;
    out[i] = static_cast<int8_t>((nib ^ 8) - 8);
  }
}

}  // namespace tq::wformat
