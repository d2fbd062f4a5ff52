// The plan: pattern matching, rule order, skip_names, locations, errors.
#include <catch2/catch.hpp>

#include "taoquant/plan.h"

using Catch::Matchers::Contains;
using tq::DType;
using tq::Granularity;
using tq::LayerInfo;
using tq::LayerKind;

namespace {

tq::Spec parse(const std::string& text) {
  return tq::parse_spec_text(text, "spec.yaml");
}

std::vector<LayerInfo> layers() {
  return {{"features.conv1", "Conv2d", LayerKind::kConv2d, {32, 1, 3, 3}, true},
          {"features.conv2", "Conv2d", LayerKind::kConv2d, {64, 32, 3, 3}, true},
          {"up", "ConvTranspose2d", LayerKind::kConvTranspose2d, {64, 8, 2, 2}, false},
          {"classifier.fc1", "Linear", LayerKind::kLinear, {256, 3136}, true},
          {"classifier.fc2", "MyLinear", LayerKind::kLinear, {10, 256}, true}};
}

}  // namespace

TEST_CASE("wildcard_match: shell patterns, case-sensitive", "[plan]") {
  using tq::wildcard_match;
  CHECK(wildcard_match("*", ""));
  CHECK(wildcard_match("features.*", "features.conv1"));
  CHECK_FALSE(wildcard_match("features.*", "classifier.fc1"));
  CHECK(wildcard_match("*.conv?", "features.conv1"));
  CHECK_FALSE(wildcard_match("*.conv?", "features.conv10"));
  CHECK(wildcard_match("fc[12]", "fc2"));
  CHECK_FALSE(wildcard_match("fc[!12]", "fc2"));
  CHECK(wildcard_match("fc[a-c]", "fcb"));
  CHECK_FALSE(wildcard_match("Linear", "linear"));
  CHECK(wildcard_match("a[", "a["));  // an unclosed class is literal
  CHECK(wildcard_match("a\\*", "a*"));
  CHECK_FALSE(wildcard_match("a\\*", "ab"));
  CHECK(wildcard_match("**x", "abx"));
}

TEST_CASE("pattern_selects: name, then class, then kind", "[plan]") {
  const auto l = layers();
  CHECK(tq::pattern_selects("classifier.fc2", l[4]));
  CHECK(tq::pattern_selects("MyLinear", l[4]));
  CHECK(tq::pattern_selects("Linear", l[4]));  // the canonical kind of a Linear subclass
  CHECK_FALSE(tq::pattern_selects("Conv2d", l[4]));
  CHECK(tq::pattern_selects("Conv*", l[2]));
}

TEST_CASE("build_plan: defaults, later rules win, skip_names last", "[plan]") {
  auto spec = parse(R"(quantize:
  default_layer_dtype: int8
  algorithm: entropy
  layers:
    - module_name: "features.*"
      weights: {dtype: int4, granularity: per_group, group_size: 16}
    - module_name: features.conv2
      weights: {dtype: uint8, symmetric: false, observer_or_fake_quant: mse}
  skip_names: [classifier.fc2, nothing.here]
)");
  auto plan = tq::build_plan(spec, layers());
  REQUIRE(plan.layers.size() == 5);
  CHECK(plan.algorithm == "entropy");
  CHECK(plan.algorithm_loc.line == 3);
  const auto& c1 = plan.layers[0];
  CHECK(c1.weights.dtype == DType::kInt4);
  CHECK(c1.weights.str() == "int4/g16");
  CHECK(c1.decided_by == "layers[0] 'features.*'");
  CHECK(c1.loc.line == 5);
  CHECK(c1.weights.loc.line == 6);
  CHECK_FALSE(c1.weights.observer_explicit);
  CHECK(c1.weights.observer == "entropy");
  const auto& c2 = plan.layers[1];
  CHECK(c2.weights.dtype == DType::kUInt8);
  CHECK(c2.weights.granularity == Granularity::kPerChannel);  // the new dtype's default
  CHECK(c2.weights.observer == "mse");
  CHECK(c2.weights.observer_explicit);
  CHECK(c2.decided_by == "layers[1] 'features.conv2'");
  CHECK(plan.layers[3].weights.str() == "int8/per_channel");
  CHECK(plan.layers[3].decided_by == "default");
  const auto& fc2 = plan.layers[4];
  CHECK(fc2.skipped);
  CHECK_FALSE(fc2.quantized());
  CHECK(fc2.why_float() == "skip_names[0] 'classifier.fc2'");
  CHECK(fc2.loc.line == 9);
  CHECK(plan.num_quantized() == 4);
  REQUIRE(plan.warnings.size() == 1);
  CHECK_THAT(plan.warnings[0],
             Contains("skip_names[1] 'nothing.here' matches no quantizable layer"));
}

TEST_CASE("build_plan: native layers say why, weight-only drops activations", "[plan]") {
  auto spec = parse(R"(quantize:
  default_activation_dtype: int8
  layers:
    - module_name: Linear
      weights: {dtype: int8}
)");
  auto plan = tq::build_plan(spec, layers());
  CHECK(plan.layers[0].why_float() == "native, default");
  CHECK(plan.layers[3].why_float().empty());
  CHECK(plan.layers[3].activations.dtype == DType::kNative);
  REQUIRE(plan.warnings.size() == 1);
  CHECK(plan.warnings[0] == "activation dtypes are ignored in mode weight_only_ptq");
  auto j = tq::plan_to_json(plan);
  CHECK(j["num_quantized"] == 2);
  CHECK(j["layers"][0]["float_reason"] == "native, default");
  CHECK_FALSE(j["layers"][3].contains("float_reason"));
}

TEST_CASE("build_plan: per-layer settings checked against the layer, at the rule", "[plan]") {
  auto expect = [](const std::string& yaml, const std::string& part, int line) {
    auto spec = parse(yaml);
    try {
      tq::build_plan(spec, layers());
      FAIL("no error");
    } catch (const tq::SpecError& e) {
      CHECK_THAT(e.what(), Contains(part));
      CHECK(e.loc().line == line);
    }
  };
  expect(
      "quantize:\n  layers:\n    - module_name: classifier.fc*\n      weights: {dtype: int8, "
      "quant_axis: 3}\n",
      "quant_axis 3 is out of range for layer 'classifier.fc1' whose weight has 2 dimensions", 3);
  expect(
      "quantize:\n  layers:\n    - module_name: Linear\n      weights: {dtype: fp8_e4m3fn, "
      "granularity: per_group}\n",
      "granularity 'per_group' is not available for dtype 'fp8_e4m3fn'", 3);
  expect(
      "quantize:\n  layers:\n    - module_name: up\n      weights: {dtype: uint8, symmetric: "
      "true}\n",
      "uint8 weights are affine", 3);
}

TEST_CASE("build_plan: weight rounding per layer and the algorithms each layer gets",
          "[plan][algorithms]") {
  auto spec = parse(R"(quantize:
  default_layer_dtype: int4
  weight_rounding: {method: gptq, block_size: 32}
  bias_correction: true
  layers:
    - module_name: "classifier.*"
      weights: {dtype: int8, rounding: nearest}
  skip_names: [features.conv1]
)");
  auto plan = tq::build_plan(spec, layers());
  CHECK(plan.algorithms.gptq.block_size == 32);
  const auto* conv2 = plan.find("features.conv2");
  REQUIRE(conv2);
  CHECK(conv2->weights.rounding == tq::Rounding::kGptq);
  CHECK(conv2->algorithms(plan) == std::vector<std::string>{"gptq", "bias_correction"});
  const auto* fc1 = plan.find("classifier.fc1");
  CHECK(fc1->weights.rounding == tq::Rounding::kNearest);
  CHECK(fc1->algorithms(plan) == std::vector<std::string>{"bias_correction"});
  // A skipped layer gets nothing.
  CHECK(plan.find("features.conv1")->algorithms(plan).empty());
  auto j = tq::plan_to_json(plan);
  CHECK(j["algorithms"]["weight_rounding"] == "gptq");
  CHECK(j["algorithms"]["gptq"]["block_size"] == 32);
  CHECK(j["layers"][1]["algorithms"] == nlohmann::json::array({"gptq", "bias_correction"}));
  CHECK(j["layers"][1]["weights"]["rounding"] == "gptq");
}

TEST_CASE("build_plan: SmoothQuant and AWQ apply to the layers the graph gives a producer",
          "[plan][algorithms]") {
  auto awq = parse(R"(quantize:
  default_layer_dtype: int4
  awq: {grid: 10}
  weight_rounding: gptq
  skip_names: [classifier.fc2]
)");
  auto plan = tq::build_plan(awq, layers());
  CHECK(plan.algorithms.awq.grid == 10);
  CHECK(plan.algorithms.gptq.act_order);  // the default
  for (auto& lp : plan.layers)
    if (lp.info.name.rfind("classifier.", 0) == 0) lp.smoothed_by = "features.conv2";
  CHECK(plan.find("classifier.fc1")->algorithms(plan) == std::vector<std::string>{"awq", "gptq"});
  CHECK(plan.find("classifier.fc2")->algorithms(plan).empty());  // skipped
  CHECK(plan.find("features.conv2")->algorithms(plan) == std::vector<std::string>{"gptq"});
  CHECK(tq::plan_to_json(plan)["layers"][3]["smoothed_by"] == "features.conv2");

  auto sq = parse(R"(quantize:
  mode: static_ptq
  default_layer_dtype: int8
  default_activation_dtype: int8
  smoothquant: {alpha: 0.75}
  layers:
    - module_name: "classifier.fc2"
      activations: {dtype: native}
)");
  plan = tq::build_plan(sq, layers());
  CHECK(plan.algorithms.smoothquant.alpha == 0.75);
  for (auto& lp : plan.layers) lp.smoothed_by = "x";
  CHECK(plan.find("classifier.fc1")->algorithms(plan) == std::vector<std::string>{"smoothquant"});
  // Its input stays float: nothing to smooth for.
  CHECK(plan.find("classifier.fc2")->algorithms(plan).empty());
}

TEST_CASE("the algorithm table: every key the spec reads, with its modes", "[plan][algorithms]") {
  for (const auto& d : tq::algorithm_passes()) {
    CHECK_FALSE(d.help.empty());
    CHECK_FALSE(d.modes.empty());
    CHECK(tq::find_algorithm(d.key) == &d);
  }
  CHECK(tq::find_algorithm("weight_rounding"));
  CHECK(tq::find_algorithm("nope") == nullptr);
  CHECK(tq::rounding_table().parse("gptq") == tq::Rounding::kGptq);
}

TEST_CASE("exact-name patterns: '=' names one layer, wildcard characters and all", "[plan]") {
  const std::vector<LayerInfo> odd = {{"seq.l1", "Linear", LayerKind::kLinear, {64, 784}, true},
                                      {"seq.l[1]", "Linear", LayerKind::kLinear, {64, 64}, true},
                                      {"seq.l*", "Linear", LayerKind::kLinear, {10, 64}, true},
                                      {"Linear", "Linear", LayerKind::kLinear, {10, 10}, true}};
  for (size_t i = 0; i < odd.size(); ++i)
    for (size_t j = 0; j < odd.size(); ++j) {
      INFO("=" << odd[i].name << " on " << odd[j].name);
      CHECK(tq::pattern_selects("=" + odd[i].name, odd[j]) == (i == j));
    }
  CHECK(tq::pattern_selects("seq.l*", odd[0]));  // as a pattern, it selects every layer
  CHECK(tq::pattern_selects("Linear", odd[0]));
  // The plan of exact rules and skip_names: each layer what its rule says.
  auto spec = parse(R"(quantize:
  default_layer_dtype: int8
  layers:
    - {module_name: "=seq.l1", weights: {dtype: int4}}
    - {module_name: "=seq.l[1]", weights: {dtype: uint8}}
  skip_names: ["=seq.l*"]
)");
  const auto plan = tq::build_plan(spec, odd);
  CHECK(plan.layers[0].weights.dtype == DType::kInt4);
  CHECK(plan.layers[1].weights.dtype == DType::kUInt8);
  CHECK(plan.layers[2].skipped);
  CHECK(plan.layers[3].weights.dtype == DType::kInt8);
  CHECK(plan.warnings.empty());
}
