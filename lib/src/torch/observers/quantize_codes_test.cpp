// quantize_codes against LibTorch's own quantize_per_tensor /
// quantize_per_channel (their int_repr), value for value: on the weights of
// a trained Fashion-MNIST CNN, on values exactly halfway between two codes
// (ties round to even), beyond the range (clamped), on another axis, and
// with zero points.
#include <ATen/ATen.h>
#include <torch/script.h>

#include <limits>

#include <catch2/catch.hpp>

#include "taoquant/observer.h"

namespace {

at::Tensor libtorch_codes(const at::Tensor& x, const tq::QParams& q) {
  const auto dt = q.dtype == tq::DType::kUInt8 ? at::kQUInt8 : at::kQInt8;
  if (!q.per_channel) return at::quantize_per_tensor(x, q.scale[0], q.zero_point[0], dt).int_repr();
  auto s = at::tensor(std::vector<double>(q.scale.begin(), q.scale.end()), at::kDouble);
  auto z = at::tensor(std::vector<int64_t>(q.zero_point.begin(), q.zero_point.end()), at::kLong);
  return at::quantize_per_channel(x, s, z, q.axis, dt).int_repr();
}

tq::QParams per_channel(const at::Tensor& w, int axis) {
  tq::QParams q;
  q.per_channel = true;
  q.axis = axis;
  q.dtype = tq::DType::kInt8;
  const at::Tensor amax = w.abs().transpose(0, axis).flatten(1).amax(1);
  for (int64_t c = 0; c < amax.size(0); ++c) {
    q.scale.push_back(std::max(amax[c].item<float>() / 127.5f, 1e-8f));
    q.zero_point.push_back(0);
  }
  return q;
}

void check_same(const at::Tensor& x, const tq::QParams& q) {
  const at::Tensor ours = tq::quantize_codes(x, q), ref = libtorch_codes(x, q);
  REQUIRE(ours.sizes() == ref.sizes());
  REQUIRE(ours.scalar_type() == ref.scalar_type());
  CHECK(ours.ne(ref).sum().item<int64_t>() == 0);
}

}  // namespace

TEST_CASE("quantize_codes: LibTorch's codes for a trained CNN's weights", "[quantize_codes]") {
  auto m = torch::jit::load(std::string(TQ_MODELS_DIR) + "/fmnist/cnn.pt");
  int weights = 0;
  for (const auto& p : m.named_parameters()) {
    if (p.value.dim() < 2) continue;
    ++weights;
    check_same(p.value.detach(), per_channel(p.value.detach(), 0));
  }
  CHECK(weights >= 3);
}

TEST_CASE("quantize_codes: ties, clamping, another axis, zero points", "[quantize_codes]") {
  at::manual_seed(7);
  // Exactly halfway between codes (k + 0.5) * scale with a power-of-two
  // scale: ties go to the even code, as LibTorch's nearbyint does.
  const at::Tensor k = at::arange(-300, 300, at::kFloat);
  tq::QParams t;
  t.scale = {0.25f};
  t.zero_point = {0};
  t.dtype = tq::DType::kInt8;
  check_same((k + 0.5) * 0.25, t);  // and beyond +-128 codes: clamped
  t.dtype = tq::DType::kUInt8;
  t.zero_point = {131};
  check_same((k + 0.5) * 0.25, t);
  t.scale = {0.0173f};
  check_same(at::randn({3, 5, 7}) * 2, t);
  // Per channel along dim 1, with zero points.
  const at::Tensor w = at::randn({4, 6, 3, 3}) * 0.3;
  tq::QParams c = per_channel(w, 1);
  c.dtype = tq::DType::kUInt8;
  for (size_t i = 0; i < c.zero_point.size(); ++i) c.zero_point[i] = static_cast<int32_t>(100 + i);
  check_same(w, c);
  check_same(w, per_channel(w, 3));
  // A value that is not finite is a code at an end of the range, never an
  // undefined cast (LibTorch's own cast is undefined there).
  tq::QParams n;
  n.scale = {0.1f};
  n.zero_point = {0};
  n.dtype = tq::DType::kInt8;
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor odd = tq::quantize_codes(
      at::tensor({std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1e30f}), n);
  CHECK(odd[0].item<int>() == -128);
  CHECK(odd[1].item<int>() == 127);
  CHECK(odd[2].item<int>() == -128);
  CHECK(odd[3].item<int>() == 127);
  // A channel count that does not match its scales is an error, not a read
  // past the end.
  tq::QParams bad = per_channel(w, 0);
  bad.scale.pop_back();
  CHECK_THROWS(tq::quantize_codes(w, bad));
}
