// Capability tables per (backend, mode): the spec check before the model
// loads, the plan after it, and `inspect` agreeing with `quantize`.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "taoquant/backend.h"
#include "taoquant/pipeline.h"

using Catch::Matchers::Contains;
using tq::DType;
using tq::Granularity;
using tq::LayerKind;
using tq::Mode;

namespace {

const std::string kModels = TQ_MODELS_DIR;

std::vector<tq::LayerInfo> layers() {
  return {{"conv", "Conv2d", LayerKind::kConv2d, {8, 1, 3, 3}, true},
          {"up", "ConvTranspose2d", LayerKind::kConvTranspose2d, {8, 4, 2, 2}, false},
          {"fc", "Linear", LayerKind::kLinear, {10, 32}, true},
          {"head", "Linear", LayerKind::kLinear, {10, 10}, true}};
}

// The plan of `yaml` for its backend, as quantize and inspect build it.
tq::Plan plan_of(const std::string& yaml) {
  auto spec = tq::parse_spec_text(yaml, "s.yaml");
  auto b = tq::BackendRegistry::instance().resolve(spec.quantize.backend);
  auto options = tq::check_capabilities(spec, b);
  auto plan = tq::build_plan(spec, layers());
  tq::apply_capabilities(spec, plan, b, options);
  return plan;
}

const tq::LayerPlan& layer(const tq::Plan& p, const std::string& name) {
  const auto* l = p.find(name);
  REQUIRE(l);
  return *l;
}

}  // namespace

TEST_CASE("capabilities: a mode table inherits the backend-wide lists", "[capabilities]") {
  tq::Capabilities c;
  c.modes = {Mode::kWeightOnly, Mode::kStatic};
  c.weight_dtypes = {DType::kInt8, DType::kInt4};
  c.activation_dtypes = {DType::kInt8};
  c.granularities = {Granularity::kPerTensor};
  c.layer_kinds = {LayerKind::kLinear, LayerKind::kConv2d};
  tq::ModeCaps st;
  st.mode = Mode::kStatic;
  st.weight_dtypes = {DType::kInt8};
  st.layer_kinds = {LayerKind::kLinear};
  c.per_mode = {st};
  auto s = c.for_mode(Mode::kStatic);
  using Names = std::vector<std::string>;
  CHECK(tq::names_of(s.weight_dtypes) == Names{"int8"});
  CHECK(tq::names_of(s.activation_dtypes) == Names{"int8"});
  CHECK(tq::names_of(s.layer_kinds) == Names{"Linear"});
  CHECK(tq::names_of(s.granularities) == Names{"per_tensor"});
  auto w = c.for_mode(Mode::kWeightOnly);
  CHECK(w.weight_dtypes.size() == 2);
  CHECK(w.activation_dtypes.empty());  // weight-only quantizes no activation
  CHECK(w.layer_kinds.size() == 2);
}

TEST_CASE("capabilities: libtorch static keeps what its kernels cannot run float",
          "[capabilities]") {
  auto p = plan_of(R"(quantize:
  backend: libtorch
  mode: static_ptq
  default_layer_dtype: int8
  default_activation_dtype: int8
  layers:
    - module_name: head
      activations: {dtype: native}
    - module_name: fc
      weights: {dtype: int8, granularity: per_group, group_size: 16}
)");
  CHECK(layer(p, "conv").quantized());
  CHECK(layer(p, "conv").activations.dtype == DType::kUInt8);  // narrowed, as the kernels run it
  CHECK_FALSE(layer(p, "conv").activations.symmetric);
  const auto& up = layer(p, "up");
  CHECK_FALSE(up.quantized());
  CHECK(up.why_float() == "ConvTranspose2d has no static int8 kernel in LibTorch");
  const auto& head = layer(p, "head");
  CHECK_FALSE(head.quantized());
  CHECK_THAT(head.why_float(), Contains("activations native: static int8 kernel in LibTorch need "
                                        "quantized activations"));
  CHECK(layer(p, "fc").weights.granularity == Granularity::kPerChannel);
  CHECK(p.num_quantized() == 2);
  REQUIRE(p.warnings.size() == 2);
  CHECK_THAT(p.warnings[0], Contains("activations int8 are computed as uint8"));
  CHECK_THAT(p.warnings[0], Contains("2 layers"));
  CHECK_THAT(p.warnings[1], Contains("weights per_group are stored per_channel"));
  CHECK(p.backend_resolved == "libtorch");
  CHECK(p.options.get_bool("latency_check"));
  CHECK(p.options.get_int_list("latency_batch_sizes") == std::vector<int64_t>{1, 32});
}

TEST_CASE("capabilities: libtorch dynamic quantizes Linear layers only", "[capabilities]") {
  auto p =
      plan_of("quantize:\n  backend: libtorch\n  mode: dynamic_ptq\n  default_layer_dtype: int8\n");
  CHECK(layer(p, "conv").why_float() ==
        "Conv2d has no dynamic int8 kernel in LibTorch (quantized::linear_dynamic)");
  CHECK(layer(p, "fc").quantized());
  CHECK(layer(p, "head").quantized());
  CHECK(p.num_quantized() == 2);
}

TEST_CASE("capabilities: fakequant static runs every kind and format", "[capabilities]") {
  auto p = plan_of(
      "quantize:\n  backend: fakequant\n  mode: static_ptq\n  default_layer_dtype: int4\n"
      "  default_activation_dtype: fp8_e4m3fn\n");
  CHECK(p.num_quantized() == 4);
  CHECK(layer(p, "up").activations.dtype == DType::kFp8E4M3);
  CHECK(p.warnings.empty());
}

TEST_CASE("capabilities: spec errors name the key before the model loads", "[capabilities]") {
  auto expect = [](const std::string& yaml, const std::string& part, int line) {
    auto spec = tq::parse_spec_text(yaml, "s.yaml");
    auto b = tq::BackendRegistry::instance().resolve(spec.quantize.backend);
    try {
      tq::check_capabilities(spec, b);
      FAIL("no error");
    } catch (const tq::SpecError& e) {
      CHECK_THAT(e.what(), Contains(part));
      CHECK(e.loc().line == line);
    }
  };
  expect("quantize:\n  backend: libtorch\n  mode: static_ptq\n  backend_kwargs: {engin: onednn}\n",
         "unknown key for backend 'libtorch' (accepted: engine, latency_check, "
         "latency_batch_sizes, activation_range) "
         "(did you mean 'engine'?)",
         4);
  expect("quantize:\n  backend: libtorch\n  backend_kwargs:\n    engine: onedn\n",
         "'onedn' is not one of: onednn, qnnpack, fbgemm (did you mean 'onednn'?)", 4);
  expect("quantize:\n  backend: libtorch\n  backend_kwargs: {latency_check: false}\n",
         "reads this option in mode static_ptq only, not in weight_only_ptq", 3);
  expect("quantize:\n  backend: fakequant\n  backend_kwargs: {engine: onednn}\n",
         "unknown key for backend 'fakequant' (accepted: none)", 3);
  expect("quantize:\n  backend: libtorch\n  mode: static_ptq\n  default_layer_dtype: int4\n",
         "does not support weight dtype 'int4' in mode static_ptq (supported: int8)", 4);
  expect("quantize:\n  backend: torchao\n  mode: static_ptq\n",
         "use backend 'libtorch' for static_ptq", 3);
  // Observer names come from the observer registry (plugins extend it).
  expect("quantize:\n  backend: libtorch\n  algorithm: entropi\n",
         "quantize.algorithm: 'entropi' is not a registered observer (registered: ", 3);
  expect("quantize:\n  backend: libtorch\n  algorithm: entropi\n", "(did you mean 'entropy'?)", 3);
  expect(
      "quantize:\n  backend: libtorch\n  layers:\n    - module_name: fc\n      weights: "
      "{dtype: int8, observer_or_fake_quant: histogrm}\n",
      "quantize.layers.0.weights.observer_or_fake_quant: 'histogrm' is not a registered observer",
      5);
}

TEST_CASE("capabilities: a kind the backend does not know is a spec error", "[capabilities]") {
  tq::BackendInfo info;
  info.name = "kinds_test";
  info.caps.modes = {Mode::kWeightOnly};
  info.caps.weight_dtypes = {DType::kInt8};
  info.caps.granularities = {Granularity::kPerTensor, Granularity::kPerChannel};
  info.caps.layer_kinds = {LayerKind::kLinear, LayerKind::kConv2d};
  tq::BackendRegistry::Resolved b{&info, "kinds_test", nullptr, info.caps.modes};
  auto spec = tq::parse_spec_text(
      "quantize:\n  layers:\n    - module_name: '*'\n      weights: {dtype: int8}\n", "s.yaml");
  auto plan = tq::build_plan(spec, layers());
  try {
    tq::apply_capabilities(spec, plan, b, tq::check_capabilities(spec, b));
    FAIL("no error");
  } catch (const tq::SpecError& e) {
    CHECK_THAT(e.what(), Contains("layer 'up' (ConvTranspose2d, decided by layers[0] '*')"));
    CHECK_THAT(e.what(), Contains("add it to skip_names"));
    CHECK(e.loc().line == 3);
  }
}

TEST_CASE("capabilities: inspect and quantize agree on which layers stay float",
          "[capabilities][e2e]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("tq_caps_" + std::to_string(::getpid()));
  struct Case {
    const char* what;
    std::string yaml;
  };
  const std::string results = "results_dir: " + dir.string() + "\n";
  const std::vector<Case> cases = {
      {"static CNN",
       results +
           "quantize:\n  backend: libtorch\n  mode: static_ptq\n  default_layer_dtype: int8\n"
           "  default_activation_dtype: int8\n  model_path: " +
           kModels +
           "/fmnist/cnn.pt\n  layers:\n    - module_name: classifier.fc\n"
           "      activations: {dtype: native}\n  skip_names: ['features.conv1']\n"
           "  backend_kwargs: {latency_check: false}\ndataset:\n  quant_calibration_dataset:\n"
           "    data_file: " +
           kModels + "/fmnist/calib.npz\n    batch_size: 64\n    max_batches: 2\n"},
      {"dynamic ResNet-18",
       results +
           "quantize:\n  backend: libtorch\n  mode: dynamic_ptq\n  default_layer_dtype: int8\n"
           "  model_path: " +
           kModels + "/tv/resnet18.pt\n"}};
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.what) {
      auto spec = tq::parse_spec_text(c.yaml, "s.yaml");
      auto inspected = tq::run_inspect(spec).plan;
      auto out = tq::run_quantize(spec);
      REQUIRE(out.layers.size() == inspected.layers.size());
      size_t kept = 0;
      for (size_t i = 0; i < out.layers.size(); ++i) {
        const auto& lp = inspected.layers[i];
        const auto& r = out.layers[i];
        INFO(r.name);
        CHECK(r.name == lp.info.name);
        CHECK(r.kept_float == !lp.quantized());
        if (r.kept_float) CHECK(r.reason == lp.why_float());
        kept += r.kept_float ? 1 : 0;
      }
      CHECK(kept > 0);
      CHECK(kept < out.layers.size());
    }
  }
  fs::remove_all(dir);
}
