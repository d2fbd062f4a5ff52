// DFQ's high-bias absorption (equalization: {absorb_bias: true}) against the
// paper's definition, on a model whose BatchNorms shift half their channels
// to 10 sigma (tests/torch/test_data_fixtures.py, high_bias.pt).
#include <torch/script.h>

#include <catch2/catch.hpp>

#include "taoquant/equalization.h"
#include "taoquant/model.h"
#include "taoquant/weight_algorithms.h"
#include "test_data_util.h"

using namespace tqtest_data;

namespace {

at::Tensor param(torch::jit::Module& m, const std::string& path) {
  const auto dot = path.rfind('.');
  return tq::find_submodule(m, path.substr(0, dot))
      .attr(path.substr(dot + 1))
      .toTensor()
      .detach()
      .clone();
}

}  // namespace

TEST_CASE("high-bias absorption follows the DFQ definition and keeps the function",
          "[algorithms][equalization][absorb]") {
  auto m = torch::jit::load(fixture("high_bias.pt"));
  m.eval();
  const auto pairs = tq::equalization_pairs(m);
  REQUIRE(pairs.size() == 2);
  // Inputs small enough that every shifted channel stays above its c_i:
  // there the absorption is exact.
  torch::NoGradGuard ng;
  const at::Tensor x = 0.01 * torch::randn({4, 1, 12, 12});
  const at::Tensor before = m.forward({x}).toTensor();
  const at::Tensor beta_a = param(m, "bn_a.bias"), gamma_a = param(m, "bn_a.weight");
  const at::Tensor wb = param(m, "b.weight"), bias_b = param(m, "b.bias");
  const at::Tensor wd = param(m, "d.weight"), mean_d = param(m, "bn_d.running_mean");

  const auto facts = tq::absorb_high_biases(m, pairs);
  CHECK(facts.absorbed == 2);
  // c_i = max(0, beta_i - 3 |gamma_i|): 7 on channels 0-3, 0 elsewhere.
  const at::Tensor c = (beta_a - 3 * gamma_a.abs()).clamp_min(0);
  CHECK(c.slice(0, 0, 4).allclose(torch::full({4}, 7.0)));
  CHECK(param(m, "bn_a.bias").allclose(beta_a - c));
  // b's bias gains sum over input channels and taps of W_b * c.
  CHECK(
      param(m, "b.bias").allclose(bias_b + (wb.sum({2, 3}) * c.view({1, -1})).sum(1), 1e-5, 1e-5));
  // d has no bias: bn_d's running mean loses depthwise filter i's sum * c_i.
  CHECK(param(m, "bn_d.running_mean").allclose(mean_d - wd.sum({1, 2, 3}) * c, 1e-5, 1e-5));
  for (const auto& p : facts.pairs) {
    CHECK(p.channels == 4);
    CHECK(p.max_shift == Approx(7.0));
  }
  REQUIRE(facts.pairs.size() == 2);
  CHECK(facts.pairs[0].compensated_in == "b.bias");
  CHECK(facts.pairs[1].compensated_in == "bn_d.running_mean");
  CHECK(facts.to_json()["pairs"][1]["compensated_in"] == "bn_d.running_mean");
  const at::Tensor after = m.forward({x}).toTensor();
  CHECK(((after - before).abs().max() / before.abs().max()).item<double>() < 1e-5);
}

TEST_CASE("high-bias absorption skips pairs it cannot change", "[algorithms][absorb]") {
  // The trained CNN has no BatchNorm: nothing to read c from.
  auto m = torch::jit::load(models("fmnist/cnn.pt"));
  m.eval();
  const auto facts = tq::absorb_high_biases(m, tq::equalization_pairs(m));
  CHECK(facts.absorbed == 0);
  for (const auto& p : facts.pairs) CHECK(p.skipped == "no BatchNorm after the first layer");
  CHECK(facts.to_json()["pairs"][0]["skipped"] == "no BatchNorm after the first layer");
}
