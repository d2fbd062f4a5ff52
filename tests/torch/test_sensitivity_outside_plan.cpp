// The sensitivity table simulates planned layers only. A layer call that no
// planned layer owns (nn.MultiheadAttention's in_proj: a functional linear
// on `in_proj_weight`) runs float in its probes, while libtorch static_ptq
// quantizes it; the report names such calls next to the all-quantized
// figure, and says whether the backend quantizes them (its capability row),
// so that the figure does not pass for the artifact's. The expected names
// come from the model's parameters, not from a graph walk.
#include <torch/script.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "plugin_test_util.h"
#include "taoquant/jit.h"
#include "taoquant/json.h"
#include "taoquant/pipeline.h"
#include "test_data_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kModels = TQ_MODELS_DIR;

const std::string kLibTorch =
    "backend: libtorch\n  default_activation_dtype: uint8\n"
    "  backend_kwargs: {engine: onednn, latency_check: false}";

std::string spec_text(const std::string& dir, const std::string& model, const std::string& data,
                      const std::string& backend = kLibTorch) {
  return "results_dir: " + dir + "\nquantize:\n  " + backend +
         "\n  mode: static_ptq\n  default_layer_dtype: int8\n  model_path: " + model +
         "\n  sensitivity: true\n"
         "dataset:\n  quant_calibration_dataset:\n    data_file: " +
         data + "\n    batch_size: 8\n    max_batches: 2\n";
}

// The parameters of `model` whose name ends in `suffix`, in module order.
std::vector<std::string> parameters_ending(const std::string& model, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& p : torch::jit::load(model).named_parameters(/*recurse=*/true))
    if (p.name.size() >= suffix.size() &&
        p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(p.name);
  return out;
}

size_t count_kind(const torch::jit::Module& m, const std::string& prefix) {
  return tq::jit::find_nodes(
             tq::jit::inlined_graph(m)->block(),
             [&](auto* n) { return std::string(n->kind().toQualString()).rfind(prefix, 0) == 0; })
      .size();
}

}  // namespace

TEST_CASE("sensitivity: the layer calls outside the plan are named next to 'all quantized'",
          "[e2e][static][sensitivity]") {
  const std::string enc = kModels + "/tiny/encoder.pt";
  const auto in_proj = parameters_ending(enc, "in_proj_weight");
  REQUIRE(in_proj.size() == 2);  // nn.TransformerEncoder of 2 layers
  const std::string dir = tqtest_data::temp_dir("sens-outside");
  const auto out = tq::run_quantize(
      tq::parse_spec_text(spec_text(dir, enc, kModels + "/tiny/encoder_x.npz"), "<t>"));
  const json report = tqtest::read_json(out.report_path);
  const json& all = report.at("sensitivity").at("all_quantized");
  INFO(all.dump());
  CHECK(all.at("float_outside_plan") == json(in_proj));
  CHECK(all.at("backend_quantizes_outside_plan") == true);
  CHECK_THAT(all.at("note").get<std::string>(),
             Catch::Matchers::StartsWith("2 layer calls outside the plan ran float") &&
                 Catch::Matchers::Contains(in_proj[0]) && Catch::Matchers::Contains(in_proj[1]) &&
                 Catch::Matchers::EndsWith("; backend 'libtorch' quantizes them, so the artifact "
                                           "has error that the all-quantized figure leaves out"));
  // The artifact quantizes them: one int8 linear more than the planned
  // int8 layers per in_proj, each with its bias on the accumulator grid.
  const json& meta = report.at("backend").at("meta");
  CHECK(meta.at("biases_on_accumulator_grid").at("unplanned_linears") == in_proj.size());
  CHECK(count_kind(torch::jit::load(out.artifact_path), "quantized::linear") ==
        report.at("totals").at("quantized_layers").get<size_t>() + in_proj.size());
  fs::remove_all(dir);

  // fakequant's artifact runs them float, as the probes did: the note says so.
  const std::string fq_dir = tqtest_data::temp_dir("sens-outside-fq");
  const auto fq = tq::run_quantize(
      tq::parse_spec_text(spec_text(fq_dir, enc, kModels + "/tiny/encoder_x.npz",
                                    "backend: fakequant\n  default_activation_dtype: int8"),
                          "<t>"));
  const json fq_all = tqtest::read_json(fq.report_path).at("sensitivity").at("all_quantized");
  INFO(fq_all.dump());
  CHECK(fq_all.at("float_outside_plan") == json(in_proj));
  CHECK(fq_all.at("backend_quantizes_outside_plan") == false);
  CHECK_THAT(fq_all.at("note").get<std::string>(),
             Catch::Matchers::EndsWith("), as backend 'fakequant' runs them"));
  fs::remove_all(fq_dir);

  // A model with no such call: nothing named, no note.
  const std::string cnn_dir = tqtest_data::temp_dir("sens-outside-cnn");
  const auto cnn = tq::run_quantize(tq::parse_spec_text(
      spec_text(cnn_dir, kModels + "/fmnist/cnn.pt", kModels + "/fmnist/calib.npz"), "<t>"));
  const json c = tqtest::read_json(cnn.report_path).at("sensitivity").at("all_quantized");
  CHECK_FALSE(c.contains("float_outside_plan"));
  CHECK_FALSE(c.contains("note"));
  fs::remove_all(cnn_dir);
}
