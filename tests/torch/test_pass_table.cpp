// The pass table (taoquant/algorithms.h, taoquant/algorithm_stages.h): an
// algorithm added in one file, as a row and the stage that runs it, is read
// by the spec reader, checked against its modes, planned per layer, run by
// the pipeline with the calibration data, and shown in the report and in
// `backends --json`, with nothing else touched.
#include <catch2/catch.hpp>

#include <torch/script.h>

#include "taoquant/algorithm_stages.h"
#include "taoquant/backend.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/pipeline.h"
#include "taoquant/reference.h"
#include "taoquant/spec.h"
#include "test_data_util.h"

using namespace tqtest_data;
using Catch::Matchers::Contains;

namespace {

// The toy: multiplies each quantized layer's weight by `factor` in the float
// model, before the backend quantizes it, after one pass over the data.
tq::StageResult run_toy(tq::QuantizeContext& ctx, tq::CalibrationData* data) {
  REQUIRE(data);
  int64_t samples = 0;
  data->pass([&](const std::vector<at::Tensor>& in, bool) { samples += in.at(0).size(0); });
  const auto& value = ctx.plan.algorithms.other.at("toy_scale").value;
  const double factor = value.is_object() ? value.value("factor", 1.0) : 1.0;
  torch::NoGradGuard no_grad;
  tq::StageResult r;
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& lp : ctx.plan.layers) {
    const auto a = lp.algorithms(ctx.plan);
    if (std::find(a.begin(), a.end(), "toy_scale") == a.end()) continue;
    tq::find_submodule(ctx.model, lp.info.name).attr("weight").toTensor().mul_(factor);
    r.layers[lp.info.name]["toy_scale"] = {{"factor", factor}};
    layers.push_back(lp.info.name);
  }
  r.counts = {{"samples", samples}, {"layers", layers}};
  return r;
}

std::string toy_spec(const std::string& dir, const std::string& toy,
                     const std::string& mode = "weight_only_ptq") {
  return "results_dir: " + dir + "\nquantize:\n  backend: libtorch\n  mode: " + mode +
         "\n  default_layer_dtype: int8\n  model_path: " + models("fmnist/cnn.pt") +
         "\n  toy_scale: " + toy +
         "\ndataset:\n  quant_calibration_dataset:\n    data_file: " + models("fmnist/calib.npz") +
         "\n    batch_size: 32\n    max_batches: 2\n";
}

at::Tensor artifact_output(const std::string& path) {
  auto m = torch::jit::load(path);
  return m.forward({at::ones({2, 1, 28, 28})}).toTensor();
}

}  // namespace

TEST_CASE("the pass table: a toy algorithm is a row and a stage in one file", "[algorithms]") {
  const tq::ScopedAlgorithmPass pass(
      tq::other_pass("toy_scale", "test: scales each quantized layer's weight by factor",
                     {tq::Mode::kWeightOnly}, /*needs_data=*/true));
  const tq::ScopedAlgorithmStage stage({"toy_scale", "the toy stage", nullptr, run_toy});
  const std::string dir = temp_dir("pass_table");

  // The spec reader: its key, its settings and their location.
  const auto spec = tq::parse_spec_text(toy_spec(dir + "/x2", "{factor: 2.0}"), "spec.yaml");
  const auto& toy = spec.quantize.algorithms.other.at("toy_scale");
  CHECK(toy.value["factor"] == 2.0);
  CHECK(toy.loc.line == 7);
  CHECK(spec.quantize.algorithms.needs_data());
  // A misspelling is named with the key there is; another mode is refused at the key.
  std::string typo = toy_spec(dir, "true");
  typo.replace(typo.find("toy_scale"), 9, "toy_scael");
  CHECK_THROWS_WITH(tq::parse_spec_text(typo, "spec.yaml"),
                    Contains("'toy_scael'") && Contains("did you mean 'toy_scale'"));
  CHECK_THROWS_WITH(
      tq::parse_spec_text(toy_spec(dir, "true", "static_ptq"), "spec.yaml"),
      Contains("spec.yaml:7") && Contains("quantize.toy_scale applies to mode weight_only_ptq"));

  // The plan, the pipeline, the report.
  const auto out = tq::run_quantize(spec);
  const auto& r = out.report;
  CHECK(tq::plan_to_json(out.plan)["algorithms"]["toy_scale"] == nlohmann::json{{"factor", 2.0}});
  const auto& facts = r["calibration"]["algorithms"]["toy_scale"];
  CHECK(facts["samples"] == 32);  // the calibrating batch (the second is held out)
  CHECK(facts["layers"].size() == out.plan.num_quantized());
  size_t changed = 0;
  for (const auto& l : r["layers"])
    if (l.contains("algorithms") && l["algorithms"].contains("toy_scale")) ++changed;
  CHECK(changed == out.plan.num_quantized());
  // It ran on the float model before the backend: the artifact differs from
  // the same run with factor 1.
  const auto one =
      tq::run_quantize(tq::parse_spec_text(toy_spec(dir + "/x1", "{factor: 1.0}"), "spec.yaml"));
  CHECK_FALSE(artifact_output(out.artifact_path).allclose(artifact_output(one.artifact_path)));

  // backends --json and the spec reference list it where it applies.
  const auto* lt = tq::BackendRegistry::instance().find("libtorch");
  REQUIRE(lt);
  const auto libtorch = tq::backend_to_json(*lt);
  for (const auto& m : libtorch["per_mode"]) {
    const auto& a = m["algorithms"];
    const bool listed = std::find(a.begin(), a.end(), "toy_scale") != a.end();
    CHECK(listed == (m["mode"] == "weight_only_ptq"));
  }
  const auto reference = tq::spec_reference_json();
  bool in_reference = false;
  for (const auto& a : reference["algorithms"]) in_reference |= a["key"] == "toy_scale";
  CHECK(in_reference);
}

TEST_CASE("the pass table: a pass whose stage is missing is an internal error, not a skip",
          "[algorithms]") {
  const tq::ScopedAlgorithmPass pass(
      tq::other_pass("toy_orphan", "test: no stage runs it", {tq::Mode::kWeightOnly}, false));
  const std::string dir = temp_dir("pass_table_orphan");
  std::string text = toy_spec(dir, "true");
  text.replace(text.find("toy_scale"), 9, "toy_orphan");
  CHECK_THROWS_WITH(tq::run_quantize(tq::parse_spec_text(text, "spec.yaml")),
                    Contains("toy_orphan") && Contains("algorithm_stages()"));
}
