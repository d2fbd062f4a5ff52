// SmoothQuant and AWQ: the groups found in the graph, the scales and the
// search against references computed in Python from the papers'
// definitions (tests/data/make_algorithm_refs.py), and end to end on the
// trained timm-style ViT whose LayerNorm outputs have outlier channels
// (scripts/models/make_outliers.py).
#include <torch/script.h>
#include <catch2/catch.hpp>

#include "taoquant/json.h"

#include "algorithm_test_util.h"
#include "taoquant/calibration.h"
#include "taoquant/formats.h"
#include "taoquant/model.h"
#include "taoquant/pipeline.h"
#include "taoquant/smoothing.h"
#include "taoquant/spec.h"
#include "taoquant/weight_algorithms.h"

using Catch::Matchers::Contains;
using tq::test::tensor_of;

namespace {

const std::string kModels = TQ_MODELS_DIR;

torch::jit::Module smooth_model() {
  auto m = torch::jit::load(tq::test::algorithm_refs_dir() + "/smooth.pt");
  m.eval();
  return m;
}

at::Tensor param(const torch::jit::Module& m, const std::string& path) {
  const auto dot = path.rfind('.');
  return tq::find_submodule(m, path.substr(0, dot))
      .attr(path.substr(dot + 1))
      .toTensor()
      .to(at::kDouble);
}

}  // namespace

TEST_CASE("smoothing groups: a LayerNorm read by two Linears, and a Linear -> ReLU -> Linear",
          "[algorithms][smoothquant]") {
  auto m = smooth_model();
  const auto groups = tq::smoothing_groups(m);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].producer == "norm");
  CHECK(groups[0].layer_norm);
  CHECK(groups[0].consumers == std::vector<std::string>{"q", "k"});
  CHECK(groups[1].producer == "a");
  CHECK_FALSE(groups[1].layer_norm);
  CHECK(groups[1].consumers == std::vector<std::string>{"b"});
}

TEST_CASE("SmoothQuant scales and folding match the paper's definition computed in Python",
          "[algorithms][smoothquant]") {
  const auto& r = tq::test::algorithm_refs()["smoothing"];
  auto m = smooth_model();
  torch::NoGradGuard ng;
  const at::Tensor x = tensor_of(r["x"]).to(at::kFloat);
  const at::Tensor before = m.forward({x}).toTensor();
  const auto inputs = tq::capture_layer_inputs(m, {x});
  for (const auto& g : tq::smoothing_groups(m)) {
    const at::Tensor in = inputs.at(g.consumers[0]);
    const at::Tensor absmax = in.reshape({-1, in.size(-1)}).abs().amax(0);
    std::vector<at::Tensor> weights;
    for (const auto& c : g.consumers)
      weights.push_back(tq::find_submodule(m, c).attr("weight").toTensor());
    tq::apply_smoothing(m, g, tq::smoothquant_scales(absmax, weights, r["alpha"]));
  }
  for (const auto& [name, want] : r["smoothquant"].items()) {
    INFO(name);
    CHECK(at::allclose(param(m, name), tensor_of(want), 1e-4, 1e-6));
  }
  // The float model computes the same.
  const at::Tensor after = m.forward({x}).toTensor();
  CHECK(((after - before).abs().max() / before.abs().max()).item<double>() < 1e-5);
}

TEST_CASE("AWQ's grid search matches the paper's definition computed in Python",
          "[algorithms][awq]") {
  const auto& r = tq::test::algorithm_refs()["smoothing"];
  auto m = smooth_model();
  torch::NoGradGuard ng;
  const at::Tensor x = tensor_of(r["x"]).to(at::kFloat);
  const at::Tensor in = tq::capture_layer_inputs(m, {x}).at("q");
  const at::Tensor x2 = in.reshape({-1, 16}).to(at::kDouble);
  std::vector<at::Tensor> weights{param(m, "q.weight"), param(m, "k.weight")};
  auto int4 = [](size_t, const at::Tensor& w) {
    tq::wformat::WeightFormat f;
    f.dtype = tq::DType::kInt4;
    f.granularity = tq::Granularity::kPerChannel;
    at::Tensor w32 = w.to(at::kFloat).contiguous();
    auto q = tq::wformat::quantize_weight(w32.data_ptr<float>(), w32.sizes().vec(), f);
    return at::from_blob(q.dequant.data(), w32.sizes(), at::kFloat).clone();
  };
  const auto res = tq::awq_search(weights, x2.abs().mean(0), at::matmul(x2.t(), x2), 20, int4);
  CHECK(res.alpha == Approx(r["awq"]["alpha"].get<double>()));
  REQUIRE(res.loss.size() == 20);
  for (size_t i = 0; i < res.loss.size(); ++i)
    CHECK(res.loss[i] == Approx(r["awq"]["losses"][i].get<double>()).epsilon(1e-3));
  CHECK(res.loss.front() > 2 * *std::min_element(res.loss.begin(), res.loss.end()));
}

namespace {

tq::QuantizeOutcome quantize_vit(const std::string& model, const std::string& dir,
                                 const std::string& mode_and_dtypes, const std::string& extra) {
  const std::string yaml = "results_dir: " + dir + "\nquantize:\n  backend: libtorch\n" +
                           mode_and_dtypes + "  model_path: " + model + "\n" + extra +
                           "dataset:\n  quant_calibration_dataset:\n    data_file: " + kModels +
                           "/fmnist/calib.npz\n    batch_size: 64\n";
  return tq::run_quantize(tq::parse_spec_text(yaml, "<test>"));
}

const char* kStatic =
    "  mode: static_ptq\n  default_layer_dtype: int8\n  default_activation_dtype: int8\n"
    "  backend_kwargs: {latency_check: false}\n";
const char* kInt4 =
    "  mode: weight_only_ptq\n  default_layer_dtype: int4\n  layers:\n"
    "    - module_name: '*'\n      weights: {dtype: int4, granularity: per_channel}\n";

}  // namespace

TEST_CASE("static int8 on the ViT with outlier channels: SmoothQuant recovers, never hurts",
          "[algorithms][smoothquant][e2e][vit]") {
  const std::string d = tq::test::alg_tmpdir("vit_sq");
  for (const std::string name : {"vit_qkv", "vit_qkv_outliers"}) {
    const std::string model = kModels + "/fmnist/" + name + ".pt";
    const double fp32 = tq::test::fmnist_top1(model);
    auto plain = quantize_vit(model, d + "/" + name + "_plain", kStatic, "");
    auto sq = quantize_vit(model, d + "/" + name + "_sq", kStatic, "  smoothquant: true\n");
    const double p = tq::test::fmnist_top1(plain.artifact_path);
    const double s = tq::test::fmnist_top1(sq.artifact_path);
    WARN(name << " static int8: fp32 " << fp32 << ", minmax " << p << ", smoothquant " << s);
    // Without outliers it costs at most a few images (measured -0.05 and
    // -0.11 pt on two runs' calibrations): never worse beyond the noise of
    // paired flips (a sign test); with them it must recover.
    CHECK_FALSE(tq::test::fmnist_paired_flips(plain.artifact_path, sq.artifact_path).b_worse());
    // 4 blocks: norm1 -> qkv, norm2 -> fc1; norm -> head.
    CHECK(sq.report["calibration"]["algorithms"]["smoothing"]["groups"] == 9);
    if (name == "vit_qkv_outliers") {
      CHECK(fp32 - p > 1.0);  // the outliers hurt per-tensor activations
      CHECK(s - p >= 0.5 * (fp32 - p));
      bool seen = false;
      for (const auto& l : sq.layers) {
        if (l.name != "blocks.0.attn.qkv") continue;
        const auto& sf = l.extra.at("algorithms").at("smoothquant");
        CHECK(sf["producer"] == "blocks.0.norm1");
        CHECK(sf["input_outlier_ratio"]["after"].get<double>() <
              sf["input_outlier_ratio"]["before"].get<double>() / 3);
        seen = true;
      }
      CHECK(seen);
    }
  }
}

TEST_CASE("weight-only int4 on the ViTs: AWQ and GPTQ never lose to nearest",
          "[algorithms][awq][gptq][e2e][vit]") {
  const std::string d = tq::test::alg_tmpdir("vit_awq");
  for (const std::string name : {"vit_qkv", "vit_qkv_outliers"}) {
    const std::string model = kModels + "/fmnist/" + name + ".pt";
    const double fp32 = tq::test::fmnist_top1(model);
    auto run = [&](const std::string& tag, const std::string& extra) {
      return quantize_vit(model, d + "/" + name + "_" + tag, kInt4, extra);
    };
    auto awq = run("awq", "  awq: true\n");
    const std::string near_path = run("nearest", "").artifact_path;
    const double n = tq::test::fmnist_top1(near_path);
    const double a = tq::test::fmnist_top1(awq.artifact_path);
    const std::string gptq_path = run("gptq", "  weight_rounding: gptq\n").artifact_path;
    const double g = tq::test::fmnist_top1(gptq_path);
    // Closer to the float model than nearest (measured 97.48 -> 98.88 %).
    CHECK(tq::test::fmnist_agreement(model, gptq_path) >
          tq::test::fmnist_agreement(model, near_path));
    const double ag = tq::test::fmnist_top1(
        run("awq_gptq", "  awq: true\n  weight_rounding: gptq\n").artifact_path);
    WARN(name << " int4 per-channel: fp32 " << fp32 << ", nearest " << n << ", awq " << a
              << ", gptq " << g << ", awq+gptq " << ag);
    // AWQ lowers each layer's error on calibration and held-out inputs; the
    // net's top-1 is not its objective: measured -0.19 pt on the ViT without
    // outliers (docs/benchmarks.md), +1.6 pt with them.
    CHECK(a >= n - 0.5);
    // Not worse than nearest beyond the noise of paired flips (a sign test).
    CHECK_FALSE(tq::test::fmnist_paired_flips(near_path, gptq_path).b_worse());
    CHECK(fp32 - g <= 1.0);
    if (fp32 - n > 0.3) CHECK(fp32 - g <= 0.6 * (fp32 - n));
    if (name == "vit_qkv_outliers") CHECK(a - n >= 0.5 * (fp32 - n));
    for (const auto& l : awq.layers) {
      if (l.name != "blocks.0.fc1") continue;
      const auto& f = l.extra.at("algorithms").at("awq");
      CHECK(f["producer"] == "blocks.0.norm2");
      CHECK(f["calibration_output_sqnr_db"]["awq"].get<double>() >=
            f["calibration_output_sqnr_db"]["nearest"].get<double>());
      if (f.contains("holdout_output_error_ratio"))
        CHECK(f["holdout_output_error_ratio"].get<double>() < 1.0);
    }
  }
}

TEST_CASE("smoothquant and awq: modes, values and where nothing can fold",
          "[algorithms][smoothquant][errors]") {
  const std::string d = tq::test::alg_tmpdir("sq_err");
  auto parse = [&](const std::string& mode, const std::string& key) {
    return tq::parse_spec_text("quantize:\n  mode: " + mode + "\n  model_path: m.pt\n" + key,
                               "spec.yaml");
  };
  CHECK_THROWS_WITH(parse("weight_only_ptq", "  smoothquant: true\n"),
                    Contains("spec.yaml:4") && Contains("quantize.smoothquant applies to mode"));
  CHECK_THROWS_WITH(parse("static_ptq", "  awq: true\n"), Contains("quantize.awq applies to mode"));
  CHECK_THROWS_WITH(parse("static_ptq", "  smoothquant: {alpha: 1.5}\n"),
                    Contains("a number in [0.0, 1.0]"));
  CHECK_THROWS_WITH(parse("static_ptq", "  smoothquant: {alpah: 0.5}\n"), Contains("alpha"));
  // The CNN has no LayerNorm; its fc1 -> ReLU -> fc pair is a group.
  auto out = quantize_vit(kModels + "/fmnist/cnn.pt", d + "/cnn", kStatic,
                          "  smoothquant: {alpha: 0.5}\n");
  CHECK(out.report["calibration"]["algorithms"]["smoothing"]["groups"] == 1);
}
