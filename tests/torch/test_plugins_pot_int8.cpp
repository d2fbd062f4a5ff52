// The pot_int8 example end to end (tests/plugins/pot_int8_out_of_tree.sh):
// installed package, out-of-tree build with find_package(TaoQuant) only,
// quantize with --plugin, evaluate with a top-1 gate. Then checks the results
// independently: every reported scale is an exact power of two, every weight
// of the artifact lies on its layer's int8 power-of-two grid, and top-1 on
// the Fashion-MNIST test set drops by at most 1 point.
#include <catch2/catch.hpp>

#include <torch/script.h>

#include <cmath>

#include "plugin_test_util.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/qparams.h"
#include "taoquant/spec.h"

using namespace tqtest;

namespace {

// Top-1 (percent) of a TorchScript model over the Fashion-MNIST test set.
double fmnist_top1(const std::string& model_path) {
  auto spec = tq::parse_spec_text(
      "dataset:\n  test_dataset:\n    data_file: " + std::string(TQ_MODELS_DIR) +
          "/fmnist/test.npz\n    batch_size: 500\n",
      "<test>");
  auto loader =
      tq::make_data_loader(spec, *spec.dataset.test_dataset, "dataset.test_dataset", true);
  auto model = torch::jit::load(model_path);
  model.eval();
  torch::NoGradGuard ng;
  tq::Batch b;
  int64_t correct = 0, total = 0;
  while (loader->next(b)) {
    auto out = model.forward({b.inputs.at(0)}).toTensor();
    correct += out.argmax(1).eq(b.labels).sum().item<int64_t>();
    total += b.labels.size(0);
  }
  REQUIRE(total == 10000);
  return 100.0 * static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace

TEST_CASE("pot_int8 example: install, out-of-tree build, quantize, evaluate", "[plugins][oot]") {
  const std::string work = std::string(TQ_BINARY_DIR) + "/pot_int8_oot";
  auto r = run_cmd("bash " +
                   quote(std::string(TQ_SOURCE_DIR) + "/tests/plugins/pot_int8_out_of_tree.sh") +
                   " " + quote(TQ_BINARY_DIR) + " " + quote(work));
  INFO(r.out);
  REQUIRE(r.rc == 0);

  // The installed package is complete.
  CHECK(fs::exists(work + "/prefix/bin/tao-quant"));
  CHECK(fs::exists(work + "/prefix/include/taoquant/backend.h"));
  CHECK((fs::exists(work + "/prefix/lib/cmake/TaoQuant/TaoQuantConfigVersion.cmake") ||
         fs::exists(work +
                    "/prefix/lib/x86_64-linux-gnu/cmake/TaoQuant/TaoQuantConfigVersion.cmake")));

  // backends --json lists the plugin with its constraints and origin.
  const std::string plugin = work + "/build/libpot_int8.so";
  auto lb = run_cmd(quote(work + "/prefix/bin/tao-quant") + " --plugin " + quote(plugin) +
                    " backends --json");
  REQUIRE(lb.rc == 0);
  bool listed = false;
  const nlohmann::json listing = nlohmann::json::parse(lb.out);  // must outlive the loop
  for (const auto& b : listing["backends"]) {
    if (b["name"] != "pot_int8") continue;
    listed = true;
    CHECK(b["origin"] == fs::canonical(plugin).string());
    CHECK(b["constraints"]["power_of_two_scale"] == true);
    CHECK(b["constraints"]["symmetric_only"] == true);
  }
  CHECK(listed);

  // Every scale in the report is an exact power of two.
  auto rep = read_json(work + "/results/quantize_report.json");
  CHECK(rep["backend"]["requested"] == "pot_int8");
  size_t quantized = 0;
  for (const auto& l : rep["layers"]) {
    REQUIRE_FALSE(l["kept_float"].get<bool>());
    ++quantized;
    CHECK(l["weight_format"] == "int8/per_channel");
    CHECK(tq::is_power_of_two(l["scale_min"].get<double>()));
    CHECK(tq::is_power_of_two(l["scale_max"].get<double>()));
  }
  CHECK(quantized == 4);

  // The plugin describes its result in the neutral record (record.h): each
  // weight with its power-of-two scales, which the Q/DQ export reads.
  size_t recorded = 0;
  for (const auto& t : rep["quantization"]["tensors"]) {
    if (t["role"] != "weight") continue;
    ++recorded;
    CHECK(tq::is_power_of_two(t["scales"]["min"].get<double>()));
    CHECK(tq::is_power_of_two(t["scales"]["max"].get<double>()));
  }
  CHECK(recorded == 4);
  // From the source tree, as the script ran quantize: the spec's data paths
  // are relative to it (a weight-only record learns the input shape there).
  auto ex = run_cmd(
      "cd " + quote(TQ_SOURCE_DIR) + " && " + quote(work + "/prefix/bin/tao-quant") + " --plugin " +
      quote(plugin) + " -q export -e " +
      quote(std::string(TQ_SOURCE_DIR) + "/backends/examples/pot_int8/fmnist_cnn_pot_int8.yaml") +
      " --formats onnx_qdq results_dir=" + quote(work + "/results"));
  INFO(ex.out);
  CHECK(ex.rc == 0);
  CHECK(fs::exists(work + "/results/quantized_model_pot_int8.onnx"));

  // The artifact's weights are integers times 2^k within the int8 range:
  // with per-channel powers of two >= scale_min, w / scale_min is an integer.
  const std::string artifact = work + "/results/quantized_model_pot_int8.pth";
  auto model = torch::jit::load(artifact);
  for (const auto& l : rep["layers"]) {
    INFO(l["name"]);
    auto w = tq::find_submodule(model, l["name"].get<std::string>()).attr("weight").toTensor();
    const double smin = l["scale_min"].get<double>(), smax = l["scale_max"].get<double>();
    auto k = w.to(torch::kDouble) / smin;
    CHECK(k.eq(k.round()).all().item<bool>());
    CHECK(w.abs().max().item<double>() <= 128 * smax);
    CHECK(w.abs().max().item<double>() > 0);
  }

  // Accuracy: `tao-quant evaluate --compare` passed its max_top1_drop gate
  // (the script's exit code); its numbers agree with a top-1 computed here,
  // and with the float top-1 the training script measured in PyTorch.
  auto ev = read_json(work + "/results/evaluate_report.json");
  const double f = ev["float"]["top1"].get<double>();
  const double q = fmnist_top1(artifact);
  INFO("float top-1 " << f << "%, pot_int8 top-1 " << q << "%");
  CHECK(q == Approx(ev["quantized"]["top1"].get<double>()).margin(1e-9));
  CHECK(f == Approx(100.0 * read_json(std::string(TQ_MODELS_DIR) + "/fmnist/cnn.json")["fp32_top1"]
                                .get<double>())
                 .margin(1e-9));
  CHECK(f > 85.0);
  CHECK(f - q <= 1.0);
  CHECK(ev["gates"]["passed"] == true);
  WARN("pot_int8: float top-1 " << f << "%, quantized " << q << "%");
}
