// quantize_weight and sqnr_db: hand-computed small cases, the documented
// value = (lut[code] - zero_point) * scale relation, error bounds and SQNR.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "taoquant/error.h"
#include "taoquant/formats.h"

using tq::DType;
using tq::Granularity;
using tq::wformat::quantize_weight;
using tq::wformat::QuantizedWeight;
using tq::wformat::WeightFormat;

namespace {

WeightFormat make_format(DType d, Granularity g, bool symmetric = true, int axis = 0,
                         int group_size = 128) {
  WeightFormat f;
  f.dtype = d;
  f.granularity = g;
  f.symmetric = symmetric;
  f.axis = axis;
  f.group_size = group_size;
  return f;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Raw code (lut index) at a code position, unpacking int4 nibbles.
int code_at(const QuantizedWeight& q, size_t pos) {
  if (q.format.dtype == DType::kInt4) return (q.codes[pos / 2] >> (4 * (pos % 2))) & 0xF;
  return q.codes[pos];
}

// Scale index and code position of flat element i, from the header's rules.
void locate(const QuantizedWeight& q, size_t i, size_t& slice, size_t& pos) {
  const auto& s = q.shape;
  switch (q.format.granularity) {
    case Granularity::kPerTensor:
      slice = 0;
      pos = i;
      return;
    case Granularity::kPerChannel: {
      size_t inner = 1;
      for (size_t d = static_cast<size_t>(q.format.axis) + 1; d < s.size(); ++d)
        inner *= static_cast<size_t>(s[d]);
      slice = (i / inner) % static_cast<size_t>(s[static_cast<size_t>(q.format.axis)]);
      pos = i;
      return;
    }
    case Granularity::kPerGroup: {
      const size_t row_len = static_cast<size_t>(numel(s) / s[0]);
      const size_t r = i / row_len, j = i % row_len;
      const auto gs = static_cast<size_t>(q.group_size);
      const auto gpr = static_cast<size_t>(q.groups_per_row);
      slice = r * gpr + j / gs;
      pos = r * gpr * gs + j;
      return;
    }
  }
}

// Checks the documented decoding relation for every element, and (integer
// formats) that the error is at most half a step.
void check_consistent(const QuantizedWeight& q, const std::vector<float>& w) {
  const size_t n = w.size();
  REQUIRE(q.dequant.size() == n);
  const bool integer = q.format.dtype == DType::kInt8 || q.format.dtype == DType::kUInt8 ||
                       q.format.dtype == DType::kInt4;
  size_t bad_formula = 0, bad_error = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t s = 0, pos = 0;
    locate(q, i, s, pos);
    const float zp = q.zero_points.empty() ? 0.0f : q.zero_points[s];
    const float v = (q.lut[static_cast<size_t>(code_at(q, pos))] - zp) * q.scales[s];
    if (v != q.dequant[i]) ++bad_formula;
    if (integer) {
      const double err = std::fabs(static_cast<double>(w[i]) - q.dequant[i]);
      if (err > q.scales[s] * 0.5 * (1 + 1e-5) + 1e-6 * std::fabs(w[i])) ++bad_error;
    }
  }
  CHECK(bad_formula == 0);
  CHECK(bad_error == 0);
  CHECK(q.bytes() == q.codes.size() + 4 * q.scales.size() + 4 * q.zero_points.size());
  for (float s : q.scales) CHECK((std::isfinite(s) && s > 0));
  CHECK(q.sqnr_db == Approx(tq::wformat::sqnr_db(w.data(), q.dequant.data(), n)));
}

std::vector<float> normal_weights(size_t n, float sigma, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> w(n);
  for (auto& x : w) x = dist(rng);
  return w;
}

int8_t as_int8(uint8_t b) {
  return static_cast<int8_t>(b);
}

}  // namespace

TEST_CASE("quantize_weight int8 per-tensor symmetric by hand", "[formats][quant]") {
  const std::vector<float> w = {12.7f, -3.14f, 0.26f, 0.04f, -0.06f, 0.0f};
  const auto q =
      quantize_weight(w.data(), {2, 3}, make_format(DType::kInt8, Granularity::kPerTensor));
  REQUIRE(q.scales.size() == 1);
  CHECK(q.scales[0] == 12.7f / 127.0f);
  CHECK(q.zero_points.empty());
  const std::vector<int> expect = {127, -31, 3, 0, -1, 0};
  REQUIRE(q.codes.size() == 6);
  for (size_t i = 0; i < 6; ++i) CHECK(as_int8(q.codes[i]) == expect[i]);
  REQUIRE(q.lut.size() == 256);
  CHECK(q.lut[0xFF] == -1.0f);
  CHECK(q.lut[0x80] == -128.0f);
  CHECK(q.lut[0x7F] == 127.0f);
  CHECK(q.bytes() == 6 + 4);
  CHECK(q.group_size == 0);
  CHECK(q.shape == std::vector<int64_t>{2, 3});
  check_consistent(q, w);
}

TEST_CASE("quantize_weight int8 per-channel axis 0 with a zero channel", "[formats][quant]") {
  const std::vector<float> w = {1.27f, -0.5f, 0.123f, 0.0f, 0.0f, 0.0f, -2.54f, 1.0f, 0.0f};
  const auto q =
      quantize_weight(w.data(), {3, 3}, make_format(DType::kInt8, Granularity::kPerChannel));
  REQUIRE(q.scales.size() == 3);
  CHECK(q.scales[0] == 1.27f / 127.0f);
  CHECK(q.scales[1] == 1.0f);  // zero channel
  CHECK(q.scales[2] == 2.54f / 127.0f);
  const std::vector<int> expect = {127, -50, 12, 0, 0, 0, -127, 50, 0};
  for (size_t i = 0; i < w.size(); ++i) CHECK(as_int8(q.codes[i]) == expect[i]);
  for (size_t i = 3; i < 6; ++i) CHECK(q.dequant[i] == 0.0f);
  CHECK(std::isfinite(q.sqnr_db));
  check_consistent(q, w);
}

TEST_CASE("quantize_weight per-channel on axis 1 (ConvTranspose layout)", "[formats][quant]") {
  // [in=2, out=2, kh=1, kw=2]: channel = index 1.
  const std::vector<float> w = {1.27f, 0.1f, 2.54f, -1.0f,   // in 0: out 0, out 1
                                -0.5f, 0.0f, 0.3f,  -2.0f};  // in 1: out 0, out 1
  const auto q = quantize_weight(w.data(), {2, 2, 1, 2},
                                 make_format(DType::kInt8, Granularity::kPerChannel, true, 1));
  REQUIRE(q.scales.size() == 2);
  CHECK(q.scales[0] == 1.27f / 127.0f);
  CHECK(q.scales[1] == 2.54f / 127.0f);
  const std::vector<int> expect = {127, 10, 127, -50, -50, 0, 15, -100};
  for (size_t i = 0; i < w.size(); ++i) {
    INFO("i = " << i);
    CHECK(as_int8(q.codes[i]) == expect[i]);
  }
  check_consistent(q, w);
}

TEST_CASE("quantize_weight asymmetric int8 and uint8 zero points", "[formats][quant]") {
  const std::vector<float> w = {-1.0f, 0.5f, 3.0f, 0.0f};
  SECTION("int8") {
    const auto q =
        quantize_weight(w.data(), {4}, make_format(DType::kInt8, Granularity::kPerTensor, false));
    const float scale = 4.0f / 255.0f;
    CHECK(q.scales[0] == scale);
    const float zp = -128.0f - std::nearbyint(-1.0f / scale);
    CHECK(zp == -64.0f);
    REQUIRE(q.zero_points.size() == 1);
    CHECK(q.zero_points[0] == zp);
    CHECK(as_int8(q.codes[0]) == -128);
    CHECK(as_int8(q.codes[1]) == -32);
    CHECK(as_int8(q.codes[2]) == 127);
    CHECK(as_int8(q.codes[3]) == -64);  // 0 maps exactly to the zero point
    CHECK(q.dequant[3] == 0.0f);
    CHECK(q.bytes() == 4 + 4 + 4);
    check_consistent(q, w);
  }
  SECTION("uint8") {
    const auto q =
        quantize_weight(w.data(), {4}, make_format(DType::kUInt8, Granularity::kPerTensor, false));
    const float scale = 4.0f / 255.0f;
    CHECK(q.scales[0] == scale);
    CHECK(q.zero_points[0] == 64.0f);
    const std::vector<int> expect = {0, 96, 255, 64};
    for (size_t i = 0; i < 4; ++i) CHECK(q.codes[i] == expect[i]);
    CHECK(q.lut[200] == 200.0f);
    check_consistent(q, w);
  }
  SECTION("all-positive data keeps 0 in range") {
    const std::vector<float> p = {1.0f, 2.0f, 3.0f};
    const auto q =
        quantize_weight(p.data(), {3}, make_format(DType::kUInt8, Granularity::kPerTensor, false));
    CHECK(q.scales[0] == 3.0f / 255.0f);
    CHECK(q.zero_points[0] == 0.0f);
    CHECK(q.codes[2] == 255);
    check_consistent(q, p);
  }
  SECTION("zero point ties round to even and codes stay in range") {
    // Range 255 -> scale 1. min/scale = -2.5 -> zp = -128 - (-2) = -126.
    const std::vector<float> a = {-2.5f, 252.5f};
    const auto qa =
        quantize_weight(a.data(), {2}, make_format(DType::kInt8, Granularity::kPerTensor, false));
    CHECK(qa.scales[0] == 1.0f);
    CHECK(qa.zero_points[0] == -126.0f);
    CHECK(as_int8(qa.codes[0]) == -128);  // -2 after clamping, error 0.5
    CHECK(as_int8(qa.codes[1]) == 126);   // 252.5 ties to 252
    check_consistent(qa, a);
    // min/scale = -1.5 -> zp = -126; 253.5 would round to 254 = code 128
    // without the clamp to qmax.
    const std::vector<float> b = {-1.5f, 253.5f};
    const auto qb =
        quantize_weight(b.data(), {2}, make_format(DType::kInt8, Granularity::kPerTensor, false));
    CHECK(qb.zero_points[0] == -126.0f);
    CHECK(as_int8(qb.codes[1]) == 127);
    check_consistent(qb, b);
  }
  SECTION("uint8 per-channel zero channel") {
    const std::vector<float> z = {0.0f, 0.0f, -1.0f, 2.0f};
    const auto q = quantize_weight(z.data(), {2, 2},
                                   make_format(DType::kUInt8, Granularity::kPerChannel, false));
    CHECK(q.scales[0] == 1.0f);
    CHECK(q.zero_points[0] == 0.0f);
    CHECK(q.codes[0] == 0);
    CHECK(q.dequant[0] == 0.0f);
    CHECK(q.zero_points[1] == 85.0f);  // 0 - round(-1 / (3/255))
    check_consistent(q, z);
  }
}

TEST_CASE("quantize_weight per-group with a ragged last group", "[formats][quant]") {
  // Rows of 5, groups of 2: groups {0,1} {2,3} {4,pad}.
  const std::vector<float> w = {1.27f, -0.5f, 0.7f,  -7.0f, 0.02f,   // row 0
                                0.0f,  0.0f,  2.54f, 1.0f,  -3.0f};  // row 1
  SECTION("int8") {
    const auto q = quantize_weight(w.data(), {2, 5},
                                   make_format(DType::kInt8, Granularity::kPerGroup, true, 0, 2));
    CHECK(q.group_size == 2);
    CHECK(q.groups_per_row == 3);
    REQUIRE(q.codes.size() == 12);
    REQUIRE(q.scales.size() == 6);
    CHECK(q.scales[0] == 1.27f / 127.0f);
    CHECK(q.scales[1] == 7.0f / 127.0f);
    CHECK(q.scales[2] == 0.02f / 127.0f);
    CHECK(q.scales[3] == 1.0f);  // zero group
    CHECK(q.scales[4] == 2.54f / 127.0f);
    CHECK(q.scales[5] == 3.0f / 127.0f);
    const std::vector<int> expect = {127, -50, 13, -127, 127, 0, 0, 0, 127, 50, -127, 0};
    for (size_t i = 0; i < 12; ++i) {
      INFO("code position " << i);
      CHECK(as_int8(q.codes[i]) == expect[i]);
    }
    check_consistent(q, w);
  }
  SECTION("int4 packed, group larger than the row") {
    const auto q = quantize_weight(w.data(), {2, 5},
                                   make_format(DType::kInt4, Granularity::kPerGroup, true, 0, 128));
    CHECK(q.group_size == 5);
    CHECK(q.groups_per_row == 1);
    REQUIRE(q.codes.size() == 5);  // 10 nibbles
    CHECK(q.scales[0] == 7.0f / 7.0f);
    CHECK(q.scales[1] == 3.0f / 7.0f);
    std::vector<int8_t> c(10);
    tq::wformat::unpack_int4(q.codes.data(), 10, c.data());
    const std::vector<int> expect = {1, 0, 1, -7, 0, 0, 0, 6, 2, -7};
    for (size_t i = 0; i < 10; ++i) CHECK(c[i] == expect[i]);
    REQUIRE(q.lut.size() == 16);
    CHECK(q.lut[0xF] == -1.0f);
    CHECK(q.lut[8] == -8.0f);
    CHECK(q.lut[7] == 7.0f);
    check_consistent(q, w);
  }
  SECTION("int4 odd padded length, asymmetric padding decodes to 0") {
    const auto q = quantize_weight(w.data(), {2, 5},
                                   make_format(DType::kInt4, Granularity::kPerGroup, false, 0, 3));
    CHECK(q.group_size == 3);
    CHECK(q.groups_per_row == 2);
    REQUIRE(q.codes.size() == 6);  // 2 rows * 6 codes / 2
    for (size_t s = 0; s < 4; ++s) {
      const size_t pad = s * 3 + 2;  // last code of each second group
      if (s % 2 == 1) {
        const int nib = (q.codes[pad / 2] >> (4 * (pad % 2))) & 0xF;
        CHECK(q.lut[static_cast<size_t>(nib)] == q.zero_points[s]);
      }
    }
    check_consistent(q, w);
  }
}

TEST_CASE("quantize_weight int4 per-tensor and per-channel", "[formats][quant]") {
  // amax 0.875 -> scale 0.125 exactly, so the ties below are exact.
  const std::vector<float> w = {0.875f, -0.4375f, 0.0625f, -0.875f, 0.1875f};
  const auto q = quantize_weight(w.data(), {5}, make_format(DType::kInt4, Granularity::kPerTensor));
  CHECK(q.scales[0] == 0.125f);
  REQUIRE(q.codes.size() == 3);
  std::vector<int8_t> c(5);
  tq::wformat::unpack_int4(q.codes.data(), 5, c.data());
  const std::vector<int> expect = {7, -4, 0, -7, 2};  // ties: -3.5 -> -4, 0.5 -> 0, 1.5 -> 2
  for (size_t i = 0; i < 5; ++i) CHECK(c[i] == expect[i]);
  CHECK((q.codes[2] >> 4) == 0);
  check_consistent(q, w);
}

TEST_CASE("quantize_weight consistency over dtypes, granularities and shapes", "[formats][quant]") {
  const auto w = normal_weights(6 * 5 * 3 * 3, 0.2f, 11);
  const std::vector<int64_t> shape = {6, 5, 3, 3};
  struct Case {
    DType d;
    bool sym;
  };
  for (const Case c :
       {Case{DType::kInt8, true}, Case{DType::kInt8, false}, Case{DType::kUInt8, false},
        Case{DType::kInt4, true}, Case{DType::kInt4, false}, Case{DType::kFp8E4M3, true},
        Case{DType::kFp8E5M2, true}}) {
    for (const Granularity g : tq::weight_granularities(c.d)) {
      for (const int axis : {0, 1, 3}) {
        for (const int gs : {4, 45, 200}) {
          if (g != Granularity::kPerChannel && axis != 0) continue;
          if (g != Granularity::kPerGroup && gs != 4) continue;
          INFO(tq::to_string(c.d) << " sym " << c.sym << " " << tq::to_string(g) << " axis " << axis
                                  << " group " << gs);
          const auto q = quantize_weight(w.data(), shape, make_format(c.d, g, c.sym, axis, gs));
          check_consistent(q, w);
          CHECK(q.sqnr_db > 10);
        }
      }
    }
  }
}

TEST_CASE("quantize_weight SQNR on random normal weights", "[formats][quant]") {
  const std::vector<int64_t> shape = {64, 256};
  const auto w = normal_weights(64 * 256, 0.05f, 3);
  const auto i8 =
      quantize_weight(w.data(), shape, make_format(DType::kInt8, Granularity::kPerChannel));
  CHECK(i8.sqnr_db > 35.0);
  CHECK(i8.sqnr_db < 50.0);
  const auto i4 =
      quantize_weight(w.data(), shape, make_format(DType::kInt4, Granularity::kPerGroup));
  CHECK(i4.sqnr_db > 12.0);
  CHECK(i4.sqnr_db < i8.sqnr_db - 15.0);
  CHECK(i8.bytes() == 64 * 256 + 4 * 64);
  CHECK(i4.bytes() == 64 * 256 / 2 + 4 * 64 * 2);

  // FP8 is scale invariant: the same SQNR whatever the weights' magnitude.
  const auto e4 =
      quantize_weight(w.data(), shape, make_format(DType::kFp8E4M3, Granularity::kPerTensor));
  CHECK(e4.sqnr_db > 29.0);
  CHECK(e4.sqnr_db < 35.0);
  for (const float k : {1e-6f, 1e-3f, 1e3f, 1e6f}) {
    std::vector<float> ws(w);
    for (auto& x : ws) x *= k;
    const auto qs =
        quantize_weight(ws.data(), shape, make_format(DType::kFp8E4M3, Granularity::kPerTensor));
    CHECK(qs.sqnr_db == Approx(e4.sqnr_db).margin(0.1));
  }
  const auto e5 =
      quantize_weight(w.data(), shape, make_format(DType::kFp8E5M2, Granularity::kPerChannel));
  CHECK(e5.sqnr_db > 22.0);
  CHECK(e5.sqnr_db < e4.sqnr_db);
}

TEST_CASE("quantize_weight fp8 by hand", "[formats][quant]") {
  const std::vector<float> w = {4.48f, -1.0f, 0.0f, 2.24f};
  const auto q =
      quantize_weight(w.data(), {4}, make_format(DType::kFp8E4M3, Granularity::kPerTensor));
  CHECK(q.scales[0] == 4.48f / 448.0f);
  CHECK(q.codes[0] == 0x7E);  // 448
  CHECK(q.codes[2] == 0x00);
  CHECK(q.codes[3] == 0x76);  // 224 = 1.75 * 2^7
  CHECK(q.codes[1] == tq::wformat::fp8_encode(-1.0f / q.scales[0], tq::wformat::Fp8::kE4M3FN));
  CHECK(q.lut.size() == 256);
  check_consistent(q, w);
}

TEST_CASE("quantize_weight edge cases", "[formats][quant]") {
  SECTION("all zeros: scale 1, zero codes, exact") {
    const std::vector<float> z(8, 0.0f);
    for (const DType d : {DType::kInt8, DType::kInt4, DType::kFp8E4M3, DType::kFp8E5M2}) {
      const auto q = quantize_weight(z.data(), {2, 4}, make_format(d, Granularity::kPerTensor));
      CHECK(q.scales[0] == 1.0f);
      for (uint8_t c : q.codes) CHECK(c == 0);
      CHECK(std::isinf(q.sqnr_db));
      CHECK(q.sqnr_db > 0);
    }
  }
  SECTION("tiny range gets a normal scale") {
    const std::vector<float> t = {1e-40f, -3e-41f};
    const auto q =
        quantize_weight(t.data(), {2}, make_format(DType::kInt8, Granularity::kPerTensor));
    CHECK(q.scales[0] == std::numeric_limits<float>::min());
    check_consistent(q, t);
  }
  SECTION("empty tensor") {
    const auto q =
        quantize_weight(nullptr, {0, 4}, make_format(DType::kInt8, Granularity::kPerTensor));
    CHECK(q.codes.empty());
    CHECK(q.dequant.empty());
    CHECK(q.scales.size() == 1);
  }
}

TEST_CASE("quantize_weight rejects unsupported combinations", "[formats][quant]") {
  const std::vector<float> w = {1, 2, 3, 4};
  const auto ex = [&](const WeightFormat& f, const std::vector<int64_t>& shape = {2, 2}) {
    try {
      quantize_weight(w.data(), shape, f);
    } catch (const tq::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(ex(make_format(DType::kFp8E4M3, Granularity::kPerGroup)),
             Catch::Contains("per_group") && Catch::Contains("per_tensor"));
  CHECK_THAT(ex(make_format(DType::kFp8E5M2, Granularity::kPerGroup)),
             Catch::Contains("per_group"));
  CHECK_THAT(ex(make_format(DType::kUInt8, Granularity::kPerChannel, true)),
             Catch::Contains("uint8") && Catch::Contains("symmetric"));
  CHECK_THAT(ex(make_format(DType::kFp8E4M3, Granularity::kPerTensor, false)),
             Catch::Contains("symmetric"));
  CHECK_THAT(ex(make_format(DType::kNative, Granularity::kPerTensor)), Catch::Contains("native"));
  CHECK_THAT(ex(make_format(DType::kInt8, Granularity::kPerChannel, true, 2)),
             Catch::Contains("axis 2"));
  CHECK_THAT(ex(make_format(DType::kInt8, Granularity::kPerGroup, true, 0, 0)),
             Catch::Contains("group_size"));
  CHECK_THROWS_AS(
      quantize_weight(w.data(), {2, 2}, make_format(DType::kUInt8, Granularity::kPerTensor, true)),
      tq::UsageError);

  std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  CHECK_THROWS_WITH(
      quantize_weight(bad.data(), {3}, make_format(DType::kInt8, Granularity::kPerTensor)),
      Catch::Contains("element 1") && Catch::Contains("NaN"));
  bad[1] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(
      quantize_weight(bad.data(), {3}, make_format(DType::kInt4, Granularity::kPerGroup)),
      tq::RuntimeError);
}

TEST_CASE("sqnr_db", "[formats][quant]") {
  const std::vector<float> a = {1.0f, -2.0f, 3.0f};
  CHECK(std::isinf(tq::wformat::sqnr_db(a.data(), a.data(), 3)));
  CHECK(tq::wformat::sqnr_db(a.data(), a.data(), 3) > 0);
  const std::vector<float> b = {1.0f, -2.0f, 3.1f};
  // signal 14, noise 0.01 -> 10 log10(1400)
  CHECK(tq::wformat::sqnr_db(a.data(), b.data(), 3) ==
        Approx(10.0 * std::log10(1400.0)).epsilon(1e-5));
}
