// The never-slower check holds int8 to the float model frozen as the int8
// artifact is (torch.jit.freeze: BatchNorm folded into the convolutions,
// attributes made constants), and publishes that model when int8 loses
// (docs/spec.md, "never-slower"). The decisions come from an edited timing
// cache, so nothing here is timed; the numbers are checked against the
// float model and BatchNorm's definition, not against tao-quant's own. The
// net: the trained Fashion-MNIST ResNet (a BatchNorm after every
// convolution, a residual downsample).
#include <torch/script.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "taoquant/json.h"

#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/pipeline.h"
#include "taoquant/record.h"
#include "test_data_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kModels = TQ_MODELS_DIR;

// The trained Fashion-MNIST ResNet's convolutions and the BatchNorm after
// each (its fc has none).
const std::pair<const char*, const char*> kConvBn[] = {
    {"stem.conv", "stem.bn"},       {"layer1.conv1", "layer1.bn1"},
    {"layer1.conv2", "layer1.bn2"}, {"layer2.conv1", "layer2.bn1"},
    {"layer2.conv2", "layer2.bn2"}, {"layer2.downsample.conv", "layer2.downsample.bn"},
    {"layer3.conv1", "layer3.bn1"}, {"layer3.conv2", "layer3.bn2"}};

// Static int8 of `model`, checked at batch 1, 2 and 4; one calibration
// batch of 32, which is also the held-out batch.
std::string spec_text(const std::string& model, const std::string& dir, const std::string& cache) {
  std::string s = "results_dir: " + dir +
                  "\nquantize:\n  backend: libtorch\n  mode: static_ptq\n"
                  "  default_layer_dtype: int8\n  default_activation_dtype: uint8\n"
                  "  model_path: " +
                  model +
                  "\n  sensitivity: false\n"
                  "  backend_kwargs: {engine: onednn, latency_batch_sizes: [1, 4]}\n";
  if (!cache.empty()) s += "  timing_cache: " + cache + "\n";
  return s + "dataset:\n  quant_calibration_dataset:\n    data_file: " + kModels +
         "/fmnist/calib.npz\n    batch_size: 32\n    max_batches: 1\n";
}

// `profile`'s cache, made complete: every layer and the planned model at
// batch 1, 2 and 4, fp32 at 1 ms and int8 at `ratio(key)` ms.
std::string edited_cache(const std::string& model, const std::string& dir,
                         const std::function<double(const std::string&)>& ratio) {
  tq::QuantizeOptions o;
  o.profile = true;
  (void)tq::run_quantize(tq::parse_spec_text(spec_text(model, dir + "/profile", ""), "<profile>"),
                         o);
  std::ifstream in(dir + "/profile/timing_cache.json");
  json c = json::parse(in);
  std::set<std::string> timed;  // "layer/.../x=..." and "model/.../int8=...": each a layer or model
  for (const auto& [k, v] : c["entries"].items()) timed.insert(k.substr(0, k.find("/bs=")));
  for (const auto& key : timed)
    for (const char* bs : {"/bs=1", "/bs=2", "/bs=4"}) {
      c["entries"][key + bs + "/fp32"] = 1.0;
      c["entries"][key + bs + "/int8"] = ratio(key);
    }
  const std::string path = dir + "/edited.json";
  std::ofstream(path) << c.dump();
  return path;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

at::Tensor test_batch(int64_t n) {
  return tqtest_data::fmnist_test_batch(n);
}

using tqtest_data::sqnr_db;

// A tensor attribute; a None one (a convolution without bias) is `none`.
at::Tensor attr(const torch::jit::Module& m, const std::string& dotted,
                const at::Tensor& none = {}) {
  const auto dot = dotted.rfind('.');
  const c10::IValue v = tq::find_submodule(m, dotted.substr(0, dot)).attr(dotted.substr(dot + 1));
  return v.isNone() ? none : v.toTensor();
}

// A convolution's bias with the BatchNorm after it folded in, from
// BatchNorm's definition: (b - mean) * gamma / sqrt(var + eps) + beta.
at::Tensor folded_bias(const torch::jit::Module& f, const std::string& conv,
                       const std::string& bn) {
  const auto d = [&](const std::string& a) { return attr(f, a).to(torch::kDouble); };
  const double eps = tq::find_submodule(f, bn).attr("eps").toDouble();
  const at::Tensor mean = d(bn + ".running_mean");
  const at::Tensor b = attr(f, conv + ".bias", torch::zeros_like(mean)).to(torch::kDouble);
  return (b - mean) * d(bn + ".weight") / (d(bn + ".running_var") + eps).sqrt() + d(bn + ".bias");
}

// A run whose every timing comes from a cache in which int8 takes `ratio`
// of fp32's time everywhere: what it published and its report.
std::pair<std::string, json> run_cached(const std::string& model, const std::string& dir,
                                        double ratio) {
  const std::string cache = edited_cache(model, dir, [ratio](const std::string&) { return ratio; });
  const auto out =
      tq::run_quantize(tq::parse_spec_text(spec_text(model, dir + "/q", cache), "<cached>"));
  json report = read_json(out.report_path);
  CHECK(report["timing_cache"]["entries_measured"] == 0);
  return {out.artifact_path, report};
}

}  // namespace

TEST_CASE("never-slower: int8 that loses to the frozen float model publishes that model",
          "[e2e][static][latency][resnet]") {
  const std::string model = kModels + "/fmnist/resnet.pt";
  const std::string dir = tqtest_data::temp_dir("float-baseline");
  const auto [artifact, report] = run_cached(model, dir, 3.0);
  CHECK(report["totals"]["quantized_layers"] == 0);
  CHECK(report["backend"]["meta"]["float_baseline"] == "frozen");
  // The biases were on their accumulator grid before int8 lost: every
  // layer's (8 convolutions and the fc).
  CHECK(report["backend"]["meta"]["biases_on_accumulator_grid"]["layers"] == 9);

  torch::jit::Module f = torch::jit::load(model), a = torch::jit::load(artifact);
  f.eval();
  a.eval();
  // The float model has its BatchNorms; the artifact is the model frozen:
  // no submodule, no BatchNorm.
  REQUIRE(tq::jit::inlined_graph(f)->toString().find("aten::batch_norm") != std::string::npos);
  CHECK(tq::jit::inlined_graph(a)->toString().find("aten::batch_norm") == std::string::npos);
  CHECK(a.named_children().size() == 0);
  // It computes the float model's numbers, at several batch sizes in one
  // process (folding rounds differently in the last bits).
  torch::NoGradGuard ng;
  for (int64_t n : {64, 1, 8, 64}) {
    const at::Tensor x = test_batch(n);
    const at::Tensor y0 = f.forward({x}).toTensor(), y1 = a.forward({x}).toTensor();
    CHECK(sqnr_db(y0, y1) > 100);
  }
  // The held-out figure (the only calibration batch, calib.npz's first 32):
  // null, the same numbers as the folded float reference, or within how
  // folding rounds of the float model's.
  auto calib = tqtest_data::loader_of("data_file: " + kModels + "/fmnist/calib.npz\nbatch_size: 32",
                                      /*want_labels=*/false);
  tq::Batch held;
  REQUIRE(calib->next(held));
  const at::Tensor xh = held.inputs.at(0);
  const double db = sqnr_db(f.forward({xh}).toTensor(), a.forward({xh}).toTensor());
  const auto& held_out = report["backend"]["meta"]["holdout_output_sqnr_db"];
  CHECK((held_out.is_null() || held_out.get<double>() >= db - 6));

  // The record, what exporters read: the folded model with every bias the
  // float model's (BatchNorm folded in by its definition), not the grid's.
  const tq::QuantRecord r = tq::load_record(dir + "/q/quantization_record.pt");
  CHECK(r.quantized_layers() == 0);
  auto bias_of = [&](const std::string& path) {
    auto fv = r.float_values.find(path);
    if (fv == r.float_values.end()) return attr(*r.model, path).to(torch::kDouble);
    return torch::tensor(std::vector<double>(fv->second.begin(), fv->second.end()));
  };
  std::vector<std::pair<std::string, at::Tensor>> expected{
      {"fc.bias", attr(f, "fc.bias").to(torch::kDouble)}};
  for (const auto& [conv, bn] : kConvBn)
    expected.emplace_back(std::string(conv) + ".bias", folded_bias(f, conv, bn));
  for (const auto& [path, want] : expected) {
    INFO(path);
    const at::Tensor got = bias_of(path);
    REQUIRE(got.sizes() == want.sizes());
    CHECK((got - want).abs().max().item<double>() <= 1e-6 * (1 + want.abs().max().item<double>()));
  }
  fs::remove_all(dir);
}

// The layers int8 loses on alone (the convolutions) stay float and the
// model is quantized again without them: those layers get their float
// biases back, not the accumulator grid's of the first pass, and with one
// calibration batch the held-out reference stays the float model's. Run A
// measures that second model (int8 Linears): it wins or loses; run B reads
// it from A's cache, made to lose, and publishes the frozen float model.
TEST_CASE("never-slower: layers kept float after the first pass keep the float model's numbers",
          "[e2e][static][latency][resnet]") {
  const std::string model = kModels + "/fmnist/resnet.pt";
  const std::string dir = tqtest_data::temp_dir("float-baseline-again");
  const std::string cache = edited_cache(model, dir, [](const std::string& k) {
    return k.rfind("layer/Linear/", 0) == 0 ? 0.3 : 3.0;
  });
  torch::jit::Module f = torch::jit::load(model);
  f.eval();
  // The held-out batch: the only calibration batch, calib.npz's first 32.
  auto calib = tqtest_data::loader_of("data_file: " + kModels + "/fmnist/calib.npz\nbatch_size: 32",
                                      /*want_labels=*/false);
  tq::Batch held;
  REQUIRE(calib->next(held));
  auto check_run = [&](const std::string& out_dir, const std::string& cache_path) {
    const auto out = tq::run_quantize(
        tq::parse_spec_text(spec_text(model, out_dir, cache_path), "<float-again>"));
    const json report = read_json(out.report_path);
    const json& stages = report["backend"]["meta"]["latency_check"];
    CHECK(std::any_of(stages.begin(), stages.end(),
                      [](const json& c) { return c["stage"] == "without slower layers"; }));
    for (const auto& l : report["layers"])
      if (l.at("class") == "Conv2d") CHECK(l.at("kept_float") == true);
    torch::jit::Module a = torch::jit::load(out.artifact_path);
    a.eval();
    torch::NoGradGuard ng;
    const at::Tensor x = held.inputs.at(0);
    const double db = sqnr_db(f.forward({x}).toTensor(), a.forward({x}).toTensor());
    const auto& reported = report["backend"]["meta"]["holdout_output_sqnr_db"];
    // A float artifact: the float model's numbers up to how folding rounds
    // (null: the same numbers as the folded float reference).
    if (report["totals"]["quantized_layers"] == 0)
      CHECK((reported.is_null() || reported.get<double>() >= db - 6));
    else
      CHECK(reported.get<double>() == Approx(db).epsilon(1e-5));
    // What the artifact was converted from (the record's model): the float
    // convolutions' biases are the float model's, with nothing to restore.
    const tq::QuantRecord r = tq::load_record(out_dir + "/quantization_record.pt");
    for (const auto& [conv, bn] : kConvBn) {
      INFO(conv);
      CHECK(r.float_values.count(std::string(conv) + ".bias") == 0);
      const at::Tensor want = folded_bias(f, conv, bn);
      const at::Tensor got = attr(*r.model, std::string(conv) + ".bias").to(torch::kDouble);
      CHECK((got - want).abs().max().item<double>() <=
            1e-6 * (1 + want.abs().max().item<double>()));
    }
    return report;
  };
  (void)check_run(dir + "/a", cache);
  json c = read_json(dir + "/a/timing_cache.json");  // A's: the second model's times too
  for (auto& [k, v] : c["entries"].items())
    if (k.rfind("model/", 0) == 0) v = k.compare(k.size() - 5, 5, "/fp32") == 0 ? 1.0 : 3.0;
  std::ofstream(dir + "/lost.json") << c.dump();
  const json b = check_run(dir + "/b", dir + "/lost.json");
  CHECK(b["timing_cache"]["entries_measured"] == 0);
  CHECK(b["backend"]["meta"]["float_baseline"] == "frozen");  // made to be published
  CHECK(b["totals"]["quantized_layers"] == 0);
  fs::remove_all(dir);
}

// A timing cache that holds every timing and says int8 wins: nothing to
// time, nothing to publish float, so no float model is frozen, and the
// report says so.
TEST_CASE("never-slower: no frozen float model where the timing cache answers everything",
          "[e2e][static][latency][resnet]") {
  const std::string dir = tqtest_data::temp_dir("float-baseline-cached");
  const json report = run_cached(kModels + "/fmnist/resnet.pt", dir, 0.3).second;
  CHECK(report["totals"]["quantized_layers"] == report["layers"].size());
  CHECK(report["backend"]["meta"]["float_baseline"] ==
        "not made: the timing cache held every timing");
  fs::remove_all(dir);
}

// After the layers slower alone go float, the model without them is built
// and timed only when the layers left int8 save, timed alone, at least 5%
// of the float model's time at each size the planned model was measured at
// (kMeasurableShare): the ResNet's one Linear at 0.97 ms against 1 ms saves
// 3% of the float model's 1 ms, at 0.9 ms 10%.
TEST_CASE("never-slower: no second model where the layers left int8 save too little to measure",
          "[e2e][static][latency][resnet]") {
  const std::string model = kModels + "/fmnist/resnet.pt";
  const std::string dir = tqtest_data::temp_dir("float-baseline-too-little");
  auto run = [&](const std::string& name, double linear) {
    const std::string cache = edited_cache(model, dir + "/" + name, [linear](const std::string& k) {
      return k.rfind("layer/Linear/", 0) == 0 ? linear : k.rfind("layer/", 0) == 0 ? 3.0 : 1.2;
    });
    const auto out = tq::run_quantize(
        tq::parse_spec_text(spec_text(model, dir + "/" + name + "/q", cache), "<too-little>"));
    return read_json(out.report_path);
  };
  auto second_model = [](const json& report) {
    const json& stages = report["backend"]["meta"]["latency_check"];
    return std::any_of(stages.begin(), stages.end(),
                       [](const json& c) { return c["stage"] == "without slower layers"; });
  };
  const json little = run("little", 0.97);
  CHECK_FALSE(second_model(little));
  CHECK(little["timing_cache"]["entries_measured"] == 0);  // nothing timed
  const std::string why =
      little["backend"]["meta"].value("latency_check_without_slower_layers", std::string());
  CHECK(why.rfind("not built: ", 0) == 0);
  CHECK(why.find("0.030 ms of the float model's 1.00 ms at batch 1 (3.0%") != std::string::npos);
  CHECK(little["totals"]["quantized_layers"] == 0);
  for (const auto& l : little["layers"])
    if (l.at("class") == "Linear")
      CHECK(l.at("reason").get<std::string>().find("int8 model slower than fp32") !=
            std::string::npos);
  const json enough = run("enough", 0.9);
  CHECK(second_model(enough));
  CHECK_FALSE(enough["backend"]["meta"].contains("latency_check_without_slower_layers"));
  fs::remove_all(dir);
}
