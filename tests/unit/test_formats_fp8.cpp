// OCP FP8 encode/decode and int4 packing, checked against tables derived
// here from the format definitions (sign / exponent / mantissa arithmetic).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "taoquant/formats.h"

using tq::wformat::Fp8;

namespace {

struct FormatDef {
  Fp8 f;
  const char* name;
  int exp_bits, man_bits, bias;
  bool ieee_specials;  // E5M2: all-ones exponent is inf/NaN; E4M3FN: only S.1111.111 is NaN
  double max;
  double min_subnormal;
  uint8_t max_code;
};

const FormatDef kE4M3{Fp8::kE4M3FN, "E4M3FN", 4, 3, 7, false, 448.0, std::ldexp(1.0, -9), 0x7E};
const FormatDef kE5M2{Fp8::kE5M2, "E5M2", 5, 2, 15, true, 57344.0, std::ldexp(1.0, -16), 0x7B};

enum class Kind { kFinite, kInf, kNaN };

struct RefCode {
  Kind kind;
  double value;  // signed; for kInf the sign carries +-1
};

// Reference decoding straight from the field definitions.
RefCode ref_decode(const FormatDef& d, int code) {
  const int sign = (code >> 7) & 1;
  const int e = (code >> d.man_bits) & ((1 << d.exp_bits) - 1);
  const int m = code & ((1 << d.man_bits) - 1);
  const int e_all = (1 << d.exp_bits) - 1;
  const int m_all = (1 << d.man_bits) - 1;
  const double s = sign ? -1.0 : 1.0;
  if (d.ieee_specials && e == e_all) return {m == 0 ? Kind::kInf : Kind::kNaN, s};
  if (!d.ieee_specials && e == e_all && m == m_all) return {Kind::kNaN, 0};
  if (e == 0)
    return {Kind::kFinite, s * std::ldexp(static_cast<double>(m), 1 - d.bias - d.man_bits)};
  const double frac = 1.0 + static_cast<double>(m) / static_cast<double>(1 << d.man_bits);
  return {Kind::kFinite, s * std::ldexp(frac, e - d.bias)};
}

// Positive finite values (with 0) in increasing order, and their codes.
struct Ladder {
  std::vector<double> values;
  std::vector<uint8_t> codes;
};

Ladder positive_ladder(const FormatDef& d) {
  std::map<double, int> by_value;
  for (int c = 0; c < 128; ++c) {
    const RefCode r = ref_decode(d, c);
    if (r.kind == Kind::kFinite) by_value[r.value] = c;
  }
  Ladder l;
  for (const auto& [v, c] : by_value) {
    l.values.push_back(v);
    l.codes.push_back(static_cast<uint8_t>(c));
  }
  return l;
}

// Independent reference encoder: nearest ladder value, ties to the even
// mantissa (even code), saturating, NaN -> 0x7F with sign.
uint8_t ref_encode(const FormatDef& d, const Ladder& l, float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= d.max) return sign | d.max_code;
  const auto it = std::upper_bound(l.values.begin(), l.values.end(), a);
  const size_t hi = static_cast<size_t>(it - l.values.begin());
  const size_t lo = hi - 1;
  const double dlo = a - l.values[lo], dhi = l.values[hi] - a;
  size_t pick;
  if (dlo < dhi)
    pick = lo;
  else if (dhi < dlo)
    pick = hi;
  else
    pick = (l.codes[lo] & 1) == 0 ? lo : hi;
  return sign | l.codes[pick];
}

const FormatDef& def_of(int i) {
  return i == 0 ? kE4M3 : kE5M2;
}

}  // namespace

TEST_CASE("fp8 decode matches the format definition for all 256 codes", "[formats][fp8]") {
  for (int fi = 0; fi < 2; ++fi) {
    const FormatDef& d = def_of(fi);
    const auto& table = tq::wformat::fp8_table(d.f);
    int nan_codes = 0, inf_codes = 0;
    for (int c = 0; c < 256; ++c) {
      INFO(d.name << " code " << c);
      const RefCode r = ref_decode(d, c);
      const float got = tq::wformat::fp8_decode(static_cast<uint8_t>(c), d.f);
      switch (r.kind) {
        case Kind::kNaN:
          ++nan_codes;
          CHECK(std::isnan(got));
          CHECK(std::isnan(table[c]));
          break;
        case Kind::kInf:
          ++inf_codes;
          CHECK(std::isinf(got));
          CHECK((got > 0) == (r.value > 0));
          break;
        case Kind::kFinite:
          CHECK(static_cast<double>(got) == r.value);
          CHECK(std::signbit(got) == ((c & 0x80) != 0));  // -0 for 0x80
          CHECK(table[c] == got);
          break;
      }
    }
    CHECK(nan_codes == (fi == 0 ? 2 : 6));
    CHECK(inf_codes == (fi == 0 ? 0 : 2));
    CHECK(tq::wformat::fp8_max(d.f) == static_cast<float>(d.max));
    CHECK(tq::wformat::fp8_decode(d.max_code, d.f) == static_cast<float>(d.max));
    CHECK(tq::wformat::fp8_decode(0x01, d.f) == static_cast<float>(d.min_subnormal));
  }
  CHECK(&tq::wformat::fp8_table(Fp8::kE4M3FN) == &tq::wformat::fp8_table(Fp8::kE4M3FN));
}

TEST_CASE("fp8 encode(decode(c)) == c for every finite code", "[formats][fp8]") {
  for (int fi = 0; fi < 2; ++fi) {
    const FormatDef& d = def_of(fi);
    for (int c = 0; c < 256; ++c) {
      if (ref_decode(d, c).kind != Kind::kFinite) continue;
      INFO(d.name << " code " << c);
      CHECK(tq::wformat::fp8_encode(tq::wformat::fp8_decode(static_cast<uint8_t>(c), d.f), d.f) ==
            c);
    }
    CHECK(tq::wformat::fp8_encode(0.0f, d.f) == 0x00);
    CHECK(tq::wformat::fp8_encode(-0.0f, d.f) == 0x80);
  }
}

TEST_CASE("fp8 ties round to the even mantissa, off-midpoint rounds to nearer", "[formats][fp8]") {
  for (int fi = 0; fi < 2; ++fi) {
    const FormatDef& d = def_of(fi);
    const Ladder l = positive_ladder(d);
    REQUIRE(l.values.size() == (fi == 0 ? 127u : 124u));
    for (size_t i = 0; i + 1 < l.values.size(); ++i) {
      const double lo = l.values[i], hi = l.values[i + 1];
      const float mid = static_cast<float>((lo + hi) / 2);
      REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);  // exact in float
      const uint8_t even = (l.codes[i] & 1) == 0 ? l.codes[i] : l.codes[i + 1];
      REQUIRE((l.codes[i] & 1) != (l.codes[i + 1] & 1));
      const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
      const float below = std::nextafter(mid, 0.0f);
      for (const float s : {1.0f, -1.0f}) {
        const uint8_t sign = s < 0 ? 0x80 : 0x00;
        INFO(d.name << " between " << lo << " and " << hi << " sign " << s);
        CHECK(tq::wformat::fp8_encode(s * mid, d.f) == (sign | even));
        CHECK(tq::wformat::fp8_encode(s * above, d.f) == (sign | l.codes[i + 1]));
        CHECK(tq::wformat::fp8_encode(s * below, d.f) == (sign | l.codes[i]));
      }
    }
  }
}

TEST_CASE("fp8 saturates, maps NaN to NaN and underflows to signed zero", "[formats][fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int fi = 0; fi < 2; ++fi) {
    const FormatDef& d = def_of(fi);
    INFO(d.name);
    const auto mx = static_cast<float>(d.max);
    const uint8_t pos_max = d.max_code, neg_max = 0x80 | d.max_code;
    for (const float v :
         {mx, mx * 1.5f, std::nextafter(mx, inf), 1e30f, std::numeric_limits<float>::max(), inf}) {
      INFO("value " << v);
      CHECK(tq::wformat::fp8_encode(v, d.f) == pos_max);
      CHECK(tq::wformat::fp8_encode(-v, d.f) == neg_max);
    }
    CHECK(std::isnan(tq::wformat::fp8_decode(tq::wformat::fp8_encode(nan, d.f), d.f)));
    CHECK(std::isnan(tq::wformat::fp8_decode(tq::wformat::fp8_encode(-nan, d.f), d.f)));

    const auto half_min = static_cast<float>(d.min_subnormal / 2);
    CHECK(tq::wformat::fp8_encode(half_min, d.f) == 0x00);
    CHECK(tq::wformat::fp8_encode(-half_min, d.f) == 0x80);
    CHECK(tq::wformat::fp8_encode(std::nextafter(half_min, 1.0f), d.f) == 0x01);
    CHECK(tq::wformat::fp8_encode(-std::nextafter(half_min, 1.0f), d.f) == 0x81);
    CHECK(tq::wformat::fp8_encode(std::nextafter(half_min, 0.0f), d.f) == 0x00);
    CHECK(tq::wformat::fp8_encode(1e-30f, d.f) == 0x00);
    CHECK(tq::wformat::fp8_encode(std::numeric_limits<float>::denorm_min(), d.f) == 0x00);
    CHECK(tq::wformat::fp8_encode(-std::numeric_limits<float>::denorm_min(), d.f) == 0x80);
    // 1.5 * min subnormal is a tie between codes 1 and 2 -> 2 (even).
    CHECK(tq::wformat::fp8_encode(static_cast<float>(1.5 * d.min_subnormal), d.f) == 0x02);
  }
}

TEST_CASE("fp8 encode agrees with a reference encoder across all float binades", "[formats][fp8]") {
  const Ladder ladders[2] = {positive_ladder(kE4M3), positive_ladder(kE5M2)};
  std::vector<float> xs;
  // A stride through all 2^32 bit patterns touches every exponent and sign.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) {
    const auto bits = static_cast<uint32_t>(u);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    if (std::isfinite(x)) xs.push_back(x);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f), narrow(-0.05f, 0.05f);
  for (int i = 0; i < 20000; ++i) {
    xs.push_back(wide(rng));
    xs.push_back(narrow(rng));
  }
  for (int fi = 0; fi < 2; ++fi) {
    const FormatDef& d = def_of(fi);
    size_t mismatches = 0, specials = 0;
    for (const float x : xs) {
      const uint8_t got = tq::wformat::fp8_encode(x, d.f);
      if (got != ref_encode(d, ladders[fi], x)) {
        if (mismatches++ < 5) FAIL_CHECK(d.name << " x=" << x << " got " << int(got));
      }
      // Finite input never produces inf or NaN (E5M2 has inf codes).
      if (!std::isfinite(tq::wformat::fp8_decode(got, d.f))) ++specials;
    }
    INFO(d.name);
    CHECK(mismatches == 0);
    CHECK(specials == 0);
  }
}

TEST_CASE("int4 pack/unpack", "[formats][int4]") {
  SECTION("known byte layout") {
    const int8_t v[] = {1, -1};
    uint8_t out[1] = {0};
    tq::wformat::pack_int4(v, 2, out);
    CHECK(out[0] == 0xF1);
    const int8_t w[] = {-8, 7, 3};
    uint8_t o2[2] = {0xAA, 0xAA};
    tq::wformat::pack_int4(w, 3, o2);
    CHECK(o2[0] == 0x78);
    CHECK(o2[1] == 0x03);  // odd count: high nibble of the last byte is zero
  }
  SECTION("round trip of all 16 values, even and odd counts") {
    std::vector<int8_t> all;
    for (int v = -8; v <= 7; ++v) all.push_back(static_cast<int8_t>(v));
    for (const size_t n : {size_t{16}, size_t{15}, size_t{1}, size_t{0}}) {
      INFO("n = " << n);
      std::vector<uint8_t> packed((n + 1) / 2, 0xFF);
      tq::wformat::pack_int4(all.data(), n, packed.data());
      std::vector<int8_t> back(n, 99);
      tq::wformat::unpack_int4(packed.data(), n, back.data());
      CHECK(std::equal(back.begin(), back.end(), all.begin()));
      for (size_t i = 0; i < n; ++i) {
        const int nib = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
        CHECK(nib == (all[i] & 0xF));
      }
      if (n % 2 == 1) CHECK((packed.back() >> 4) == 0);
    }
  }
}
