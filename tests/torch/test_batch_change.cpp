// Static int8 artifacts that a deployment runs at batch 1, then at larger
// batches and back (issue 31): LibTorch 1.13's onednn int8 kernels fail a
// weight reorder on some layers when the batch size changes. tao-quant runs
// each int8 layer alone at the sequence, keeps the failing ones float, and
// checks the whole artifact before it publishes it.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "taoquant/json.h"

#include "../../backends/libtorch/static_session.h"
#include "taoquant/pipeline.h"
#include "test_data_util.h"

namespace {

namespace fs = std::filesystem;
const std::string kModels = TQ_MODELS_DIR;

// The architectures where the defect was first seen (torchvision
// definitions, random weights: scripts/zoo/build.sh).
const char* const kZooBatchChange[] = {"mobilenet_v2", "squeezenet1_1", "mnasnet1_0"};

struct Threads {
  int n = at::get_num_threads();
  explicit Threads(int t) { at::set_num_threads(t); }
  ~Threads() { at::set_num_threads(n); }
};

// The sequence in plain LibTorch, on a fresh load: "" or the error.
std::string run_batches(const std::string& path, const at::Tensor& x,
                        const std::vector<int64_t>& batches) {
  torch::jit::Module m = torch::jit::load(path);
  m.eval();
  torch::NoGradGuard ng;
  for (int64_t b : batches) {
    try {
      (void)m.forward({x.narrow(0, 0, 1).repeat({b, 1, 1, 1})});
    } catch (const std::exception& e) {
      return "batch " + std::to_string(b) + ": " + e.what();
    }
  }
  return "";
}

// The reference: one quantized conv2d of this geometry, straight from
// LibTorch's operators (a random weight: the defect depends on shapes), at
// batch 1 then `b`. True when it fails.
bool conv_fails_alone(const at::Tensor& w_shape_src, int64_t h, int64_t w, int64_t b) {
  const auto sz = w_shape_src.sizes();
  const at::Tensor wq =
      at::quantize_per_channel(torch::randn(sz), torch::full({sz[0]}, 0.01, torch::kDouble),
                               torch::zeros({sz[0]}, torch::kLong), 0, c10::kQInt8);
  auto prepack = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d_prepack", "");
  auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::conv2d", "new");
  const int64_t pad = sz[2] / 2;
  torch::jit::Stack st{wq,
                       torch::zeros({sz[0]}),
                       std::vector<int64_t>{1, 1},
                       std::vector<int64_t>{pad, pad},
                       std::vector<int64_t>{1, 1},
                       int64_t{1}};
  prepack.callBoxed(&st);
  const c10::IValue packed = st.at(0);
  try {
    for (int64_t n : {int64_t{1}, b}) {
      torch::jit::Stack s2{
          at::quantize_per_tensor(torch::rand({n, sz[1], h, w}), 0.02, 0, c10::kQUInt8), packed,
          0.05, int64_t{0}};
      conv.callBoxed(&s2);
    }
  } catch (const std::exception&) {
    return true;
  }
  return false;
}

// A static int8 run of `model` with no speed check or sensitivity table,
// calibrated on the 8 random images in batches of 4 (the last held out).
std::string static_spec(const std::string& model, const std::string& dir,
                        const std::string& activations, const std::string& engine) {
  return "results_dir: " + dir + "\nquantize:\n  backend: libtorch\n  mode: static_ptq\n" +
         "  default_layer_dtype: int8\n  default_activation_dtype: " + activations +
         "\n  model_path: " + model +
         "\n  sensitivity: false\n  backend_kwargs: {latency_check: false, engine: " + engine +
         "}\ndataset:\n  quant_calibration_dataset:\n    data_file: " + kModels +
         "/tv/imagenet_rand_n8_224.npz\n    batch_size: 4\n";
}

// The model's SQNR in the report is the published artifact's own: its
// output on the held-out batch (the last calibration batch of 4, samples
// 4-7) against the float model's, from the definition (10 log10 of signal
// over noise energy), on fresh loads of both files.
void check_holdout_sqnr(const nlohmann::json& report, const std::string& model,
                        const std::string& artifact) {
  auto data = tqtest_data::loader_of(
      "data_file: " + kModels + "/tv/imagenet_rand_n8_224.npz\nbatch_size: 4",
      /*want_labels=*/false);
  tq::Batch b, last;
  while (data->next(b)) last = b;
  REQUIRE(last.first_index == 4);
  torch::NoGradGuard ng;
  torch::jit::Module f = torch::jit::load(model), q = torch::jit::load(artifact);
  f.eval();
  q.eval();
  const double db = tqtest_data::sqnr_db(f.forward({last.inputs.at(0)}).toTensor(),
                                         q.forward({last.inputs.at(0)}).toTensor());
  CHECK(report["backend"]["meta"]["holdout_output_sqnr_db"].get<double>() ==
        Approx(db).epsilon(1e-6));
}

}  // namespace

TEST_CASE(
    "static int8 zoo nets run at batch 1, 8, 1, 32 and 1 in one process: the layers onednn "
    "fails are kept float and named",
    "[artifact][zoo]") {
  Threads two(2);
  const at::Tensor x = torch::randn({1, 3, 224, 224});
  for (const char* arch : kZooBatchChange) {
    DYNAMIC_SECTION(arch) {
      const std::string model = kModels + "/tv/" + arch + ".pt";
      REQUIRE(fs::exists(model));
      const std::string dir = tqtest_data::temp_dir(std::string("batch-change-") + arch);
      const auto out = tq::run_quantize(
          tq::parse_spec_text(static_spec(model, dir, "int8", "onednn"), "<batch-change>"));
      CHECK(run_batches(out.artifact_path, x, {1, 8, 1, 32, 1}).empty());

      std::ifstream in(out.report_path);
      const auto report = nlohmann::json::parse(in);
      const auto& probed = report["backend"]["meta"]["batch_change"];
      REQUIRE(probed.is_object());
      CHECK(probed["engine"] == "onednn");
      if (probed.contains("skipped")) {
        // A oneDNN whose weight layouts do not change with the batch size
        // (AVX2 and below): nothing probed, nothing kept float, and the
        // artifact ran the sequence above all int8.
        CHECK(probed["skipped"].get<std::string>().find("same at every batch size") !=
              std::string::npos);
        CHECK(probed["kernel_runs"] == 0);
        CHECK(probed["kept_float"].empty());
      } else {
        CHECK(probed["batch_sizes"] == nlohmann::json({4, 32}));
      }
      // Each layer kept float for it says why, and the same conv alone in
      // plain LibTorch fails the same change; the rest of the net is int8.
      size_t int8_layers = 0;
      for (const auto& l : report["layers"]) {
        int8_layers += l["weight_format"] != "float";
        const std::string reason = l.value("reason", "");
        if (reason.find("fails when the batch size changes") == std::string::npos) continue;
        INFO(arch << ": " << l["name"] << ": " << reason);
        CHECK(l["kept_float"] == true);
        CHECK(reason.find("could not create a primitive descriptor for a reorder") !=
              std::string::npos);
        int64_t c = 0, h = 0, w = 0;  // "on its CxHxW input"
        const auto at = reason.find("on its ");
        REQUIRE(at != std::string::npos);
        REQUIRE(std::sscanf(reason.c_str() + at, "on its %ldx%ldx%ld", &c, &h, &w) == 3);
        const std::vector<int64_t> shape = l["shape"];
        CHECK(c == shape.at(1));
        CHECK(conv_fails_alone(torch::empty(shape), h, w, 4));
      }
      CHECK(int8_layers >= report["layers"].size() - 4);
      check_holdout_sqnr(report, model, out.artifact_path);
      fs::remove_all(dir);
    }
  }
}

// Without the probe (another engine) and without bias correction, nothing
// asks for the float reference before the biases are snapped to the
// accumulator grid: the reference must still be the float model's.
TEST_CASE("static int8 with qnnpack: the held-out SQNR is against the float model",
          "[artifact][zoo]") {
  const std::string arch = kZooBatchChange[0];  // MobileNetV2: folded BatchNorm, biases to snap
  REQUIRE(arch == "mobilenet_v2");
  const std::string model = kModels + "/tv/" + arch + ".pt";
  REQUIRE(fs::exists(model));
  const std::string dir = tqtest_data::temp_dir("sqnr-qnnpack");
  const auto out = tq::run_quantize(
      tq::parse_spec_text(static_spec(model, dir, "uint8", "qnnpack"), "<sqnr-qnnpack>"));
  std::ifstream in(out.report_path);
  const auto report = nlohmann::json::parse(in);
  CHECK(report["backend"]["meta"]["batch_change"].is_null());  // not probed
  CHECK(report["backend"]["meta"]["biases_on_accumulator_grid"]["largest_move_in_steps"] > 0.1);
  const at::QEngine before = at::globalContext().qEngine();
  at::globalContext().setQEngine(at::QEngine::QNNPACK);  // the engine it was made for
  check_holdout_sqnr(report, model, out.artifact_path);
  at::globalContext().setQEngine(before);
  fs::remove_all(dir);
}

// The probe's gate: only oneDNN 2.6 below AVX-512 (dnnl_cpu_isa_t values
// of its dnnl_types.h) is known to keep a weight's layout at every batch
// size; anything else, or nothing known, is probed.
TEST_CASE("batch-change probe: skipped only where oneDNN's weight layouts are fixed",
          "[artifact]") {
  using tq::libtorch::batch_change_impossible;
  for (int isa : {0x1, 0x3, 0x7, 0x407}) {
    INFO(isa);
    CHECK(batch_change_impossible({{2, 6, 3}, isa}).find("same at every batch size") !=
          std::string::npos);
  }
  CHECK(batch_change_impossible({{2, 6, 3}, 0x7}).find("avx2 int8 kernels") != std::string::npos);
  for (int isa : {0x27, 0x67, 0xe7, 0x3e7, 0xf, 0x1f, 0x0, -1}) {
    INFO(isa);
    CHECK(batch_change_impossible({{2, 6, 3}, isa}).empty());  // AVX-512: brgemm kernels
  }
  CHECK(batch_change_impossible({{3, 0, 0}, 0x7}).empty());  // another oneDNN: not read
  CHECK(batch_change_impossible({{2, 7, 0}, 0x7}).empty());
  CHECK(batch_change_impossible({}).empty());  // symbols not visible
}

// The batch sizes the never-slower promise covers: the listed ones and
// every power of two between two of them.
TEST_CASE("never-slower check: the covered batch sizes", "[latency]") {
  using tq::libtorch::covered_batch_sizes;
  using V = std::vector<int64_t>;
  CHECK(covered_batch_sizes({1, 32}) == V{1, 2, 4, 8, 16, 32});
  CHECK(covered_batch_sizes({32, 1, 32}) == V{1, 2, 4, 8, 16, 32});
  CHECK(covered_batch_sizes({8, 32}) == V{8, 16, 32});
  CHECK(covered_batch_sizes({3, 5, 24}) == V{3, 4, 5, 8, 16, 24});
  CHECK(covered_batch_sizes({1}) == V{1});
  CHECK(covered_batch_sizes({4096, 1}).size() == 13);
}
