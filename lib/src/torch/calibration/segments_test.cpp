// ForwardPieces (sequential GPTQ's cut forward) and LayerInputStream's early
// stop, on the trained residual net and on small modules built here.
#include <catch2/catch.hpp>

#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/model.h"
#include "taoquant/weight_algorithms.h"
#include "taoquant/weight_quant.h"

using Catch::Matchers::Contains;
using torch::jit::Module;

namespace {

using CU = std::shared_ptr<torch::jit::CompilationUnit>;

Module linear(const CU& cu, int64_t in, int64_t out) {
  Module m("__torch__.Lin", cu, /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_parameter("weight", torch::randn({out, in}), false);
  m.register_parameter("bias", torch::randn({out}), false);
  m.define("def forward(self, x):\n  return torch.linear(x, self.weight, self.bias)\n");
  return m;
}

// fc1 -> relu -> fc2 ..., with forward `body` (x in, x out).
Module two_layers(const std::string& body) {
  CU cu = std::make_shared<torch::jit::CompilationUnit>();
  Module m("__torch__.Net", cu, /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_module("fc1", linear(cu, 8, 8));
  m.register_module("fc2", linear(cu, 8, 8));
  m.define("def forward(self, x):\n" + body + "  return x\n");
  return m;
}

}  // namespace

TEST_CASE("ForwardPieces: layer inputs at each cut of the residual net, weights set between pieces",
          "[jit][gptq][resnet]") {
  Module m = torch::jit::load(std::string(TQ_MODELS_DIR) + "/fmnist/resnet.pt");
  m.eval();
  std::set<std::string> layers;
  for (const auto& [name, g] : tq::layer_geometries(m))
    if (g.why.empty()) layers.insert(name);
  REQUIRE(layers.size() >= 8);
  tq::ForwardPieces p(m, layers);
  REQUIRE(p.why().empty());
  REQUIRE(p.order().size() == layers.size());
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({4, 1, 28, 28});
  const auto ref = tq::capture_layer_inputs(m, {x});
  auto v = p.start({x});
  for (size_t k = 0; k < p.order().size(); ++k) {
    INFO(p.order()[k]);
    p.advance(k, v);
    CHECK(at::equal(v.at(p.input_index(k)).toTensor(), ref.at(p.order()[k])));
  }
  // A weight set on the pieces' model after cut 0 is the one piece 1 uses
  // (attributes are read inside each piece, never carried across a cut).
  const std::string first = p.order()[0];
  auto v1 = p.start({x});
  p.advance(0, v1);
  auto layer = tq::find_submodule(p.model(), first);
  const at::Tensor w = layer.attr("weight").toTensor();
  tq::set_weight_values(layer, std::vector<float>(static_cast<size_t>(w.numel()), 0.25f));
  p.advance(1, v1);
  Module changed = m.clone();
  auto cl = tq::find_submodule(changed, first);
  tq::set_weight_values(cl, std::vector<float>(static_cast<size_t>(w.numel()), 0.25f));
  const auto ref2 = tq::capture_layer_inputs(changed, {x});
  CHECK(at::equal(v1.at(p.input_index(1)).toTensor(), ref2.at(p.order()[1])));
  CHECK_FALSE(at::equal(v1.at(p.input_index(1)).toTensor(), ref.at(p.order()[1])));
}

TEST_CASE("ForwardPieces says why a model cannot be cut", "[jit][gptq]") {
  SECTION("a layer called twice") {
    Module m = two_layers("  x = self.fc1.forward(x)\n  x = self.fc1.forward(x)\n");
    tq::ForwardPieces p(m, {"fc1"});
    CHECK_THAT(p.why(), Contains("fc1 is called more than once"));
  }
  SECTION("a layer inside a loop") {
    Module m = two_layers(
        "  for i in range(2):\n    x = self.fc1.forward(x)\n  x = self.fc2.forward(x)\n");
    tq::ForwardPieces p(m, {"fc1", "fc2"});
    CHECK_THAT(p.why(), Contains("fc1 is called inside a loop or a branch"));
  }
  SECTION("a straight model can be cut") {
    Module m = two_layers("  x = torch.relu(self.fc1.forward(x))\n  x = self.fc2.forward(x)\n");
    tq::ForwardPieces p(m, {"fc1", "fc2"});
    CHECK(p.why().empty());
    CHECK(p.order() == std::vector<std::string>{"fc1", "fc2"});
  }
}

TEST_CASE("LayerInputStream::run_until stops after the last call of the layers", "[jit][gptq]") {
  const at::Tensor x = torch::randn({2, 8});
  std::vector<std::string> seen;
  auto record = [&](const std::string& l, const at::Tensor&) { seen.push_back(l); };
  SECTION("straight: fc2 is never reached") {
    Module m = two_layers("  x = self.fc1.forward(x)\n  x = self.fc2.forward(x)\n");
    tq::LayerInputStream s(m);
    s.run_until({x}, record, {"fc1"});
    CHECK(seen == std::vector<std::string>{"fc1"});
  }
  SECTION("a layer called twice: both calls") {
    Module m = two_layers(
        "  x = self.fc1.forward(x)\n  x = self.fc1.forward(x)\n  x = self.fc2.forward(x)\n");
    tq::LayerInputStream s(m);
    s.run_until({x}, record, {"fc1"});
    CHECK(seen == std::vector<std::string>{"fc1", "fc1"});
  }
  SECTION("inside a loop: the model runs to its end") {
    Module m = two_layers(
        "  for i in range(2):\n    x = self.fc1.forward(x)\n  x = self.fc2.forward(x)\n");
    tq::LayerInputStream s(m);
    s.run_until({x}, record, {"fc1"});
    CHECK(seen == std::vector<std::string>{"fc1", "fc1", "fc2"});
  }
}
