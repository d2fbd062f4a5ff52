// Declared qparam constraints applied to computed qparams (qparams.h):
// power-of-two rounding, min_scale, range bounds, symmetry, and weights
// quantized under constraints.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <random>

#include "taoquant/formats.h"
#include "taoquant/observer.h"
#include "taoquant/qparams.h"

namespace {

tq::QParams int8_symmetric(std::vector<float> scales) {
  tq::QParams q;
  q.dtype = tq::DType::kInt8;
  q.quant_min = -128;
  q.quant_max = 127;
  q.per_channel = scales.size() > 1;
  q.scale = std::move(scales);
  q.zero_point.assign(q.scale.size(), 0);
  return q;
}

std::vector<float> random_weights(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(n);
  for (auto& v : w) v = d(g);
  return w;
}

}  // namespace

TEST_CASE("pot_ceil and is_power_of_two are exact", "[constraints]") {
  CHECK(tq::pot_ceil(1.0f) == 1.0f);
  CHECK(tq::pot_ceil(0.75f) == 1.0f);
  CHECK(tq::pot_ceil(0.5f) == 0.5f);
  CHECK(tq::pot_ceil(3.0f) == 4.0f);
  CHECK(tq::pot_ceil(std::nextafter(0.25f, 1.0f)) == 0.5f);
  CHECK(tq::pot_ceil(0.0078125f) == 0.0078125f);                          // 2^-7 stays
  CHECK(tq::pot_ceil(0.01f) == 0.015625f);                                // 2^-6
  CHECK(tq::pot_ceil(std::ldexp(1.0f, -149)) == std::ldexp(1.0f, -149));  // subnormal power of two
  CHECK(tq::pot_ceil(3e-45f) == std::ldexp(1.0f, -148));
  CHECK_THROWS_AS(tq::pot_ceil(0.0f), tq::RuntimeError);
  CHECK_THROWS_AS(tq::pot_ceil(-1.0f), tq::RuntimeError);
  CHECK_THROWS_AS(tq::pot_ceil(NAN), tq::RuntimeError);
  CHECK_THROWS_AS(tq::pot_ceil(FLT_MAX), tq::RuntimeError);  // 2^128 is not a float
  CHECK(tq::is_power_of_two(0.125));
  CHECK(tq::is_power_of_two(1024));
  CHECK_FALSE(tq::is_power_of_two(0.1));
  CHECK_FALSE(tq::is_power_of_two(0));
  CHECK_FALSE(tq::is_power_of_two(-0.5));
  CHECK_FALSE(tq::is_power_of_two(INFINITY));
}

TEST_CASE("apply_constraints: power of two rounds up, min_scale clamps first", "[constraints]") {
  tq::QParamConstraints c;
  CHECK_FALSE(tq::constraints_active(c));
  c.power_of_two_scale = true;
  auto q = tq::apply_constraints(int8_symmetric({0.01f, 0.3f, 1.0f, 0.0009765625f}), c);
  CHECK((q.scale == std::vector<float>{0.015625f, 0.5f, 1.0f, 0.0009765625f}));
  CHECK((q.zero_point == std::vector<int32_t>{0, 0, 0, 0}));
  CHECK(tq::constraint_violations(q, c).empty());

  c.min_scale = 0.02;
  q = tq::apply_constraints(int8_symmetric({0.01f, 0.3f}), c);
  CHECK((q.scale == std::vector<float>{0.03125f, 0.5f}));  // 0.01 -> 0.02 -> 2^-5
  c.power_of_two_scale = false;
  q = tq::apply_constraints(int8_symmetric({0.01f, 0.3f}), c);
  CHECK(q.scale[0] >= 0.02f);
  CHECK(q.scale[0] == Approx(0.02));
  CHECK(q.scale[1] == 0.3f);

  auto v = tq::constraint_violations(int8_symmetric({0.01f, 0.3f}), c);
  REQUIRE(v.size() == 1);
  CHECK(v[0].find("scale[0]") != std::string::npos);
  CHECK(v[0].find("below min_scale") != std::string::npos);
}

TEST_CASE("apply_constraints: integer bounds narrow the range and keep the real range",
          "[constraints]") {
  tq::QParamConstraints c;
  c.quant_min = -127;
  c.quant_max = 127;
  auto q = tq::apply_constraints(int8_symmetric({1.0f}), c);
  CHECK(q.quant_min == -127);
  CHECK(q.quant_max == 127);
  CHECK(q.scale[0] == Approx(255.0 / 254.0));
  CHECK(q.zero_point[0] == 0);

  // Affine uint8 narrowed to [0, 127]: the same real range over half the steps.
  tq::QParams a;
  a.dtype = tq::DType::kUInt8;
  a.quant_min = 0;
  a.quant_max = 255;
  a.scale = {0.1f};
  a.zero_point = {51};  // range [-5.1, 20.4]
  tq::QParamConstraints u;
  u.quant_max = 127;
  auto n = tq::apply_constraints(a, u);
  CHECK(n.quant_max == 127);
  CHECK(n.scale[0] == Approx(0.1 * 255 / 127));
  CHECK(n.zero_point[0] == 25);  // 0 - round(-5.1 / 0.2008)
  CHECK(tq::constraint_violations(a, u).size() == 1);

  tq::QParamConstraints none;
  none.quant_max = -1;
  CHECK_THROWS_WITH(tq::apply_constraints(a, none), Catch::Contains("do not overlap"));
}

TEST_CASE("apply_constraints: symmetric_only makes affine qparams symmetric", "[constraints]") {
  tq::QParams a;
  a.dtype = tq::DType::kUInt8;
  a.quant_min = 0;
  a.quant_max = 255;
  a.scale = {0.1f};
  a.zero_point = {10};  // range [-1.0, 24.5]
  tq::QParamConstraints c;
  c.symmetric_only = true;
  auto v = tq::constraint_violations(a, c);
  REQUIRE(v.size() == 1);
  CHECK(v[0].find("zero_point[0] = 10") != std::string::npos);
  auto s = tq::apply_constraints(a, c);
  CHECK(s.zero_point[0] == 128);  // PyTorch's symmetric quint8 zero point
  CHECK(s.scale[0] == Approx(24.5 / 127.5));
  CHECK(tq::constraint_violations(s, c).empty());

  c.power_of_two_scale = true;
  s = tq::apply_constraints(a, c);
  CHECK(s.scale[0] == 0.25f);
  CHECK(s.zero_point[0] == 128);

  // Affine int8 with pot only: the zero point follows the new scale.
  tq::QParams b = int8_symmetric({0.1f});
  b.zero_point = {-28};  // range [-10, 15.5]
  tq::QParamConstraints p;
  p.power_of_two_scale = true;
  auto bp = tq::apply_constraints(b, p);
  CHECK(bp.scale[0] == 0.125f);
  CHECK(bp.zero_point[0] == -48);  // -128 - round(-10 / 0.125)
}

TEST_CASE("apply_constraints: float8 gets min_scale and powers of two only", "[constraints]") {
  tq::QParams f;
  f.dtype = tq::DType::kFp8E4M3;
  f.scale = {0.003f};
  f.zero_point = {0};
  tq::QParamConstraints c;
  c.power_of_two_scale = true;
  c.quant_min = -127;  // not applicable to float8
  auto q = tq::apply_constraints(f, c);
  CHECK(q.scale[0] == 0.00390625f);

  tq::QParams bad = int8_symmetric({0.1f, 0.2f});
  bad.zero_point = {0};
  CHECK_THROWS_WITH(tq::apply_constraints(bad, c), Catch::Contains("2 scales but 1 zero points"));
  bad = int8_symmetric({0.0f});
  CHECK_THROWS_WITH(tq::apply_constraints(bad, c), Catch::Contains("not a positive finite number"));
}

TEST_CASE("quantize_weight_constrained: codes, values and SQNR follow the constrained scales",
          "[constraints]") {
  const std::vector<int64_t> shape{16, 8, 3, 3};
  const auto w = random_weights(16 * 8 * 9, 7);
  tq::wformat::WeightFormat f;
  f.dtype = tq::DType::kInt8;
  f.granularity = tq::Granularity::kPerChannel;
  f.axis = 0;
  f.symmetric = true;

  // No active constraint: exactly wformat::quantize_weight.
  auto plain = tq::wformat::quantize_weight(w.data(), shape, f);
  auto same = tq::quantize_weight_constrained(w.data(), shape, f, {});
  CHECK(same.scales == plain.scales);
  CHECK(same.codes == plain.codes);

  tq::QParamConstraints c;
  c.power_of_two_scale = true;
  auto q = tq::quantize_weight_constrained(w.data(), shape, f, c);
  REQUIRE(q.scales.size() == 16);
  const size_t per = w.size() / 16;
  for (size_t ch = 0; ch < 16; ++ch) {
    CHECK(tq::is_power_of_two(q.scales[ch]));
    CHECK(q.scales[ch] >= plain.scales[ch]);
    CHECK(q.scales[ch] < 2 * plain.scales[ch]);
    for (size_t i = ch * per; i < (ch + 1) * per; ++i) {
      const auto code = static_cast<int8_t>(q.codes[i]);
      CHECK(q.dequant[i] == code * q.scales[ch]);
      CHECK(std::abs(w[i] - q.dequant[i]) <= q.scales[ch] / 2 * (1 + 1e-6));
    }
  }
  // Up to 2x coarser steps: at most ~6 dB below the unconstrained SQNR.
  CHECK(q.sqnr_db <= plain.sqnr_db);
  CHECK(q.sqnr_db > plain.sqnr_db - 6.1);
  CHECK(q.sqnr_db == Approx(tq::wformat::sqnr_db(w.data(), q.dequant.data(), w.size())));

  tq::QParamConstraints sym;
  sym.symmetric_only = true;
  f.symmetric = false;
  CHECK_THROWS_AS(tq::quantize_weight_constrained(w.data(), shape, f, sym), tq::UsageError);
}

TEST_CASE("quantize_weight_constrained: per-group int4 affine under min_scale", "[constraints]") {
  const std::vector<int64_t> shape{4, 40};  // groups of 16: 3 per row, the last padded
  auto w = random_weights(160, 11);
  tq::wformat::WeightFormat f;
  f.dtype = tq::DType::kInt4;
  f.granularity = tq::Granularity::kPerGroup;
  f.group_size = 16;
  f.symmetric = false;
  tq::QParamConstraints c;
  c.min_scale = 0.05;
  auto q = tq::quantize_weight_constrained(w.data(), shape, f, c);
  REQUIRE(q.groups_per_row == 3);
  REQUIRE(q.scales.size() == 12);
  std::vector<int8_t> codes(4 * 3 * 16);
  tq::wformat::unpack_int4(q.codes.data(), codes.size(), codes.data());
  for (size_t s = 0; s < q.scales.size(); ++s) CHECK(q.scales[s] >= 0.05f);
  for (size_t r = 0; r < 4; ++r)
    for (size_t j = 0; j < 48; ++j) {
      const size_t slice = r * 3 + j / 16;
      const int code = codes[r * 48 + j];
      CHECK(code >= -8);
      CHECK(code <= 7);
      if (j >= 40) {
        CHECK(code == static_cast<int>(q.zero_points[slice]));  // padding decodes to 0
        continue;
      }
      CHECK(q.dequant[r * 40 + j] ==
            Approx((code - q.zero_points[slice]) * q.scales[slice]).margin(1e-7));
    }
}
