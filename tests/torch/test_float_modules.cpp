// A module whose layers are all float runs float whole: the activations and
// residual adds between its float layers are not quantized on their own
// (static_ptq.cpp, float_only_modules). Quantized alone, each such op is a
// quantize, an int8 op and a dequantize between two float layers: slower
// than float (MobileNetV3-small with its convolutions float ran 2.7x slower
// than the float model), and no closer to it. The nets: MobileNetV3-small
// from the zoo (its Hardswish modules) and the trained Fashion-MNIST ViT
// (one encoder layer kept float, which LibTorch's pass refused before).
#include <torch/script.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

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

TEST_CASE("static int8: one ViT encoder layer kept float runs float whole, at any batch size",
          "[e2e][static]") {
  // The trained Fashion-MNIST ViT: 3 encoder layers (attention out_proj,
  // linear1, linear2 each), its head.
  const std::string model = kModels + "/fmnist/vit.pt", data = kModels + "/fmnist/calib.npz";
  const std::string dir = tqtest_data::temp_dir("float-modules-vit");
  const auto out = tq::run_quantize(
      tq::parse_spec_text(spec_text(dir, model, data, "[\"encoder.layers.1.*\"]"), "<t>"));
  const json report = read_json(out.report_path);
  CHECK(report["totals"]["quantized_layers"] == report["totals"]["layers"].get<int>() - 3);
  CHECK(report["backend"]["meta"]["float_modules"] == json::array({"encoder.layers.1"}));
  check_runs_near_float(out.artifact_path, model);
  // With no layer float, no module is. (On the trained CNN: a second static
  // ViT run in this process was refused by LibTorch's InsertQuantDeQuant,
  // its LayerNorms left without quantization parameters, depending on what
  // the process had loaded and still held; the same spec alone passes.)
  const auto all = tq::run_quantize(
      tq::parse_spec_text(spec_text(dir + "/all", kModels + "/fmnist/cnn.pt", data, "[]"), "<t>"));
  CHECK(read_json(all.report_path)["backend"]["meta"]["float_modules"] == json::array());
  fs::remove_all(dir);
}

TEST_CASE("static int8: any one Linear of a ViT encoder layer kept float is quantized around it",
          "[e2e][static]") {
  // The trained Fashion-MNIST ViT (nn.TransformerEncoder: its 3 encoder
  // layers share one TorchScript type). Each of these alone was refused
  // (exit 1: LibTorch's pass gave the encoder layer the type made for a
  // sibling whose Linear is int8).
  const std::string model = kModels + "/fmnist/vit.pt", data = kModels + "/fmnist/calib.npz";
  torch::jit::Module f = torch::jit::load(model);
  f.eval();
  for (const char* layer : {"encoder.layers.0.self_attn.out_proj", "encoder.layers.1.linear1",
                            "encoder.layers.2.linear2"}) {
    INFO(layer);
    const std::string dir = tqtest_data::temp_dir("float-layer-vit");
    const auto out = tq::run_quantize(tq::parse_spec_text(
        spec_text(dir, model, data, "[\"=" + std::string(layer) + "\"]"), "<t>"));
    const json report = read_json(out.report_path);
    CHECK(report["totals"]["quantized_layers"] == report["totals"]["layers"].get<int>() - 1);
    check_runs_near_float(out.artifact_path, model);
    fs::remove_all(dir);
  }
}

TEST_CASE("static int8: a ViT encoder Linear with its own weight granularity is quantized so",
          "[e2e][static]") {
  // The same trained Fashion-MNIST ViT: one Linear's per-tensor weights in
  // one encoder layer (a `layers` rule) were refused the same way.
  const std::string model = kModels + "/fmnist/vit.pt", data = kModels + "/fmnist/calib.npz";
  const std::string dir = tqtest_data::temp_dir("own-settings-vit");
  const std::string rule =
      "[]\n  layers:\n    - module_name: \"=encoder.layers.1.linear1\"\n"
      "      weights: {granularity: per_tensor}";
  const auto out = tq::run_quantize(tq::parse_spec_text(spec_text(dir, model, data, rule), "<t>"));
  const json report = read_json(out.report_path);
  CHECK(report["totals"]["quantized_layers"] == report["totals"]["layers"]);
  for (const auto& l : report["layers"]) {
    const std::string name = l["name"];
    if (name == "encoder.layers.1.linear1") CHECK(l["weight_format"] == "int8/per_tensor");
    if (name == "encoder.layers.0.linear1") CHECK(l["weight_format"] == "int8/per_channel");
  }
  check_runs_near_float(out.artifact_path, model);
  fs::remove_all(dir);
}
