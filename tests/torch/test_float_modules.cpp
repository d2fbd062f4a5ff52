// A module whose layers are all float runs float whole: the activations and
// residual adds between its float layers are not quantized on their own
// (static_ptq.cpp, float_only_modules). Quantized alone, each such op is a
// quantize, an int8 op and a dequantize between two float layers: slower
// than float (MobileNetV3-small with its convolutions float ran 2.7x slower
// than the float model), and no closer to it. And any one layer of a
// repeated block can be float or have its own settings (the qconfigs above
// it, static_ptq.cpp). The nets: MobileNetV3-small from the zoo (its
// Hardswish modules), the trained Fashion-MNIST ViT (vit_qkv, timm-style
// blocks) and the random-weight nn.TransformerEncoder of tiny/ (whose
// encoder layers LibTorch's pass refused with one Linear or one layer float).
#include <torch/script.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "taoquant/json.h"

#include "taoquant/jit.h"
#include "taoquant/pipeline.h"
#include "test_data_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kModels = TQ_MODELS_DIR;

std::string spec_text(const std::string& dir, const std::string& model, const std::string& data,
                      const std::string& skip) {
  return "results_dir: " + dir +
         "\nquantize:\n  backend: libtorch\n  mode: static_ptq\n"
         "  default_layer_dtype: int8\n  default_activation_dtype: uint8\n"
         "  model_path: " +
         model + "\n  skip_names: " + skip +
         "\n  sensitivity: false\n"
         "  backend_kwargs: {engine: onednn, latency_check: false}\n"
         "dataset:\n  quant_calibration_dataset:\n    data_file: " +
         data + "\n    batch_size: 8\n    max_batches: 1\n";
}

bool is_layer_op(const std::string& kind) {
  return kind.rfind("quantized::conv", 0) == 0 || kind.rfind("quantized::linear", 0) == 0;
}

// The quantized ops of `g` that are not a layer and that float values enter
// and leave: every tensor input straight from aten::quantize_per_tensor,
// every use of the output an aten::dequantize.
std::vector<std::string> islands(const std::shared_ptr<torch::jit::Graph>& g) {
  std::vector<std::string> out;
  auto kind_of = [](const torch::jit::Node* n) { return std::string(n->kind().toQualString()); };
  for (torch::jit::Node* n : g->nodes()) {
    const std::string kind = kind_of(n);
    if (kind.rfind("quantized::", 0) != 0 || is_layer_op(kind)) continue;
    bool from_float = true, to_float = !n->outputs().empty();
    for (torch::jit::Value* v : n->inputs())
      if (v->type()->kind() == c10::TypeKind::TensorType)
        from_float = from_float && kind_of(v->node()) == "aten::quantize_per_tensor";
    for (torch::jit::Value* o : n->outputs())
      for (const auto& u : o->uses()) to_float = to_float && kind_of(u.user) == "aten::dequantize";
    if (from_float && to_float) out.push_back(kind);
  }
  return out;
}

size_t count_kind(const std::shared_ptr<torch::jit::Graph>& g, const std::string& kind) {
  size_t k = 0;
  for (torch::jit::Node* n : g->nodes()) k += n->kind().toQualString() == kind ? 1 : 0;
  return k;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A Fashion-MNIST artifact with no int8 op alone that runs at batch 1, 8
// and 1 in one process, its output SQNR against the float model (from its
// definition) above 15 dB.
void check_runs_near_float(const std::string& artifact, const std::string& model) {
  torch::jit::Module a = torch::jit::load(artifact), f = torch::jit::load(model);
  a.eval();
  f.eval();
  const auto g = tq::jit::inlined_graph(a);
  INFO(g->toString());
  CHECK(islands(g).empty());
  torch::NoGradGuard ng;
  for (int64_t n : {1, 8, 1}) {
    const at::Tensor x = tqtest_data::fmnist_test_batch(n);
    CHECK(tqtest_data::sqnr_db(f.forward({x}).toTensor(), a.forward({x}).toTensor()) > 15);
  }
}

}  // namespace

TEST_CASE("static int8: MobileNetV3-small with its features float runs no Hardswish in int8 alone",
          "[e2e][static][zoo]") {
  const char kZooNet[] = "mobilenet_v3_small";  // random weights (scripts/zoo/build.sh)
  const std::string model = kModels + "/tv/" + kZooNet + ".pt";
  const std::string dir = tqtest_data::temp_dir("float-modules-zoo");
  const auto out = tq::run_quantize(tq::parse_spec_text(
      spec_text(dir, model, kModels + "/tv/imagenet_rand_n8_224.npz", "[\"features.*\"]"), "<t>"));
  const json report = read_json(out.report_path);
  CHECK(report["totals"]["quantized_layers"] == 2);  // classifier.0 and .3
  CHECK(report["backend"]["meta"]["float_modules"] == json::array({"features"}));
  const auto g = tq::jit::inlined_graph(torch::jit::load(out.artifact_path));
  INFO(g->toString());
  CHECK(islands(g).empty());
  // The 18 Hardswish of the features run float; the classifier's, between
  // its two int8 Linears, in int8.
  CHECK(count_kind(g, "quantized::hardswish") == 1);
  fs::remove_all(dir);
}

TEST_CASE("static int8: one ViT block kept float runs float whole, at any batch size",
          "[e2e][static][vit]") {
  // The trained Fashion-MNIST ViT (vit_qkv): 3 blocks (attn.qkv, attn.proj,
  // fc1, fc2 each), its patch embedding and head.
  const std::string model = kModels + "/fmnist/vit_qkv.pt", data = kModels + "/fmnist/calib.npz";
  const std::string dir = tqtest_data::temp_dir("float-modules-vit");
  const auto out =
      tq::run_quantize(tq::parse_spec_text(spec_text(dir, model, data, "[\"blocks.1.*\"]"), "<t>"));
  const json report = read_json(out.report_path);
  CHECK(report["totals"]["quantized_layers"] == report["totals"]["layers"].get<int>() - 4);
  CHECK(report["backend"]["meta"]["float_modules"] == json::array({"blocks.1"}));
  check_runs_near_float(out.artifact_path, model);
  // With no layer float, no module is.
  const auto all =
      tq::run_quantize(tq::parse_spec_text(spec_text(dir + "/all", model, data, "[]"), "<t>"));
  CHECK(read_json(all.report_path)["backend"]["meta"]["float_modules"] == json::array());
  fs::remove_all(dir);
}

TEST_CASE("static int8: any one Linear of a transformer block kept float is quantized around it",
          "[e2e][static][vit]") {
  // The trained ViT (vit_qkv): each of these alone, in one block.
  const std::string model = kModels + "/fmnist/vit_qkv.pt", data = kModels + "/fmnist/calib.npz";
  for (const char* layer : {"blocks.0.attn.proj", "blocks.1.fc1", "blocks.2.fc2"}) {
    INFO(layer);
    const std::string dir = tqtest_data::temp_dir("float-layer-vit");
    const auto out = tq::run_quantize(tq::parse_spec_text(
        spec_text(dir, model, data, "[\"=" + std::string(layer) + "\"]"), "<t>"));
    const json report = read_json(out.report_path);
    CHECK(report["totals"]["quantized_layers"] == report["totals"]["layers"].get<int>() - 1);
    check_runs_near_float(out.artifact_path, model);
    fs::remove_all(dir);
  }
  // nn.TransformerEncoder (random weights; its encoder layers share one
  // TorchScript type): one Linear of one layer, and one whole layer, float.
  const std::string enc = kModels + "/tiny/encoder.pt", x = kModels + "/tiny/encoder_x.npz";
  for (const char* skip : {"[\"=encoder.layers.1.linear1\"]", "[\"encoder.layers.1.*\"]"}) {
    INFO(skip);
    const std::string dir = tqtest_data::temp_dir("float-layer-encoder");
    const auto out = tq::run_quantize(tq::parse_spec_text(spec_text(dir, enc, x, skip), "<t>"));
    const json report = read_json(out.report_path);
    CHECK(report["totals"]["quantized_layers"].get<int>() > 0);
    CHECK(report["totals"]["quantized_layers"] < report["totals"]["layers"]);
    CHECK(islands(tq::jit::inlined_graph(torch::jit::load(out.artifact_path))).empty());
    fs::remove_all(dir);
  }
}

TEST_CASE("static int8: a ViT Linear with its own weight granularity is quantized so",
          "[e2e][static][vit]") {
  // The trained ViT (vit_qkv): one Linear's per-tensor weights in one block
  // (a `layers` rule) were refused the same way.
  const std::string model = kModels + "/fmnist/vit_qkv.pt", data = kModels + "/fmnist/calib.npz";
  const std::string dir = tqtest_data::temp_dir("own-settings-vit");
  const std::string rule =
      "[]\n  layers:\n    - module_name: \"=blocks.1.fc1\"\n"
      "      weights: {granularity: per_tensor}";
  const auto out = tq::run_quantize(tq::parse_spec_text(spec_text(dir, model, data, rule), "<t>"));
  const json report = read_json(out.report_path);
  CHECK(report["totals"]["quantized_layers"] == report["totals"]["layers"]);
  size_t seen = 0;
  for (const auto& l : report["layers"]) {
    const std::string name = l["name"];
    if (name == "blocks.1.fc1") CHECK(l["weight_format"] == "int8/per_tensor");
    if (name == "blocks.0.fc1") CHECK(l["weight_format"] == "int8/per_channel");
    seen += name == "blocks.1.fc1" || name == "blocks.0.fc1" ? 1 : 0;
  }
  CHECK(seen == 2);
  check_runs_near_float(out.artifact_path, model);
  fs::remove_all(dir);
}
