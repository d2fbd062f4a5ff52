// The weight algorithms (GPTQ, bias correction) against independent
// references computed in Python from the papers' definitions
// (tests/data/make_algorithm_refs.py), and end to end on the trained
// Fashion-MNIST CNN, where round-to-nearest int4 loses accuracy.
#include <torch/script.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "taoquant/json.h"

#include "algorithm_test_util.h"
#include "taoquant/data.h"
#include "taoquant/equalization.h"
#include "taoquant/pipeline.h"
#include "taoquant/spec.h"
#include "taoquant/weight_algorithms.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const std::string kModels = TQ_MODELS_DIR;

using tq::test::tensor_of;
const auto& tmpdir = tq::test::alg_tmpdir;
const auto& refs = tq::test::algorithm_refs;
const auto& top1_of = tq::test::fmnist_top1;

tq::wformat::QuantizedWeight nearest_of(const at::Tensor& w, tq::DType d, tq::Granularity g,
                                        int group) {
  tq::wformat::WeightFormat f;
  f.dtype = d;
  f.granularity = g;
  f.group_size = group;
  at::Tensor w32 = w.to(at::kFloat).contiguous();
  return tq::wformat::quantize_weight(w32.data_ptr<float>(), w32.sizes().vec(), f);
}

}  // namespace

TEST_CASE("gptq matches the paper's unblocked algorithm computed in Python", "[algorithms][gptq]") {
  for (const auto& r : refs()["gptq"]) {
    const std::string name = r["name"];
    INFO(name);
    const at::Tensor w = tensor_of(r["w"]), x = tensor_of(r["x"]), q_ref = tensor_of(r["q"]);
    const int group = r["group_size"];
    const auto q0 = nearest_of(w, r["bits"] == 4 ? tq::DType::kInt4 : tq::DType::kInt8,
                               group ? tq::Granularity::kPerGroup : tq::Granularity::kPerChannel,
                               group ? group : 128);
    tq::GptqSettings s;
    s.block_size = 16;  // several lazy blocks
    s.act_order = r["act_order"];
    at::Tensor h = at::matmul(x.t(), x).unsqueeze(0);
    auto values = tq::gptq_round(w, h, tq::wformat::WeightGrid(q0), s);
    at::Tensor q = torch::tensor(values, torch::kFloat).reshape(w.sizes()).to(at::kDouble);
    // Same codes (a tie may round the other way after float64 reassociation).
    const double same = (q - q_ref).abs().lt(1e-6).to(at::kDouble).mean().item<double>();
    CHECK(same >= 0.99);
    const double err = (at::matmul(q - w, x.t())).pow(2).sum().item<double>();
    CHECK(err == Approx(r["output_err_gptq"].get<double>()).epsilon(0.02));
    CHECK(err < 0.8 * r["output_err_nearest"].get<double>());
    // Values stay on the nearest rounding's grid: re-quantized, nothing moves.
    at::Tensor qf = q.to(at::kFloat).contiguous();
    auto requant = tq::wformat::quantize_weight_with(qf.data_ptr<float>(), q0);
    CHECK(std::equal(requant.dequant.begin(), requant.dequant.end(), qf.data_ptr<float>()));
  }
}

TEST_CASE("the conv Hessian matches F.unfold for a grouped, strided, padded conv",
          "[algorithms][gptq]") {
  const auto& r = refs()["hessian"][0];
  const tq::LayerGeometry g = tq::test::conv2d_geometry_of(r);
  const at::Tensor ref = tensor_of(r["h"]);
  at::Tensor h = at::zeros(ref.sizes(), at::kDouble);
  tq::accumulate_hessian(g, tensor_of(r["x"]).to(at::kFloat), h);
  CHECK(at::allclose(h, ref, 1e-4, 1e-3));
}

TEST_CASE("bias correction matches the whole-batch definition", "[algorithms][bias]") {
  for (const auto& r : refs()["bias_correction"]) {
    const std::string name = r["name"];
    INFO(name);
    const at::Tensor w = tensor_of(r["w"]), wq = tensor_of(r["wq"]), x = tensor_of(r["x"]);
    tq::LayerGeometry g;
    if (w.dim() == 4) {
      g.conv = true;
      g.spatial_dims = 2;
      g.kernel = {w.size(2), w.size(3)};
      const int64_t s = r["stride"], p = r["padding"];
      g.stride = {s, s};
      g.padding = {p, p};
      g.dilation = {1, 1};
      g.groups = r["groups"];
    }
    at::Tensor shift = tq::bias_correction_shift(g, x.mean(0), wq - w);
    at::Tensor corrected = tensor_of(r["b"]) + shift;
    CHECK(at::allclose(corrected, tensor_of(r["corrected"]), 1e-6, 1e-9));
    // Static mode: the input through its uint8 qparams as well.
    const at::Tensor xq =
        at::fake_quantize_per_tensor_affine(x.to(at::kFloat), r["input_scale"].get<double>(),
                                            r["input_zero_point"].get<int64_t>(), 0, 255);
    const at::Tensor st =
        tensor_of(r["b"]) + tq::static_bias_shift(g, x.mean(0), xq.to(at::kDouble).mean(0), w, wq);
    CHECK(at::allclose(st, tensor_of(r["corrected_static"]), 1e-5, 1e-6));
  }
}

TEST_CASE("layer geometry is read from the ops of the trained CNN", "[algorithms]") {
  auto m = torch::jit::load(kModels + "/fmnist/cnn.pt");
  m.eval();
  auto g = tq::layer_geometries(m);
  REQUIRE(g.count("features.conv1"));
  const auto& c = g["features.conv1"];
  CHECK(c.why.empty());
  CHECK(c.conv);
  CHECK(c.spatial_dims == 2);
  CHECK(c.kernel == std::vector<int64_t>{3, 3});
  CHECK(c.padding == std::vector<int64_t>{1, 1});
  CHECK(c.stride == std::vector<int64_t>{1, 1});
  CHECK(c.groups == 1);
  CHECK_FALSE(g["classifier.fc1"].conv);
}

namespace {

tq::QuantizeOutcome quantize_cnn(const std::string& dir, const std::string& extra) {
  return tq::test::fmnist_int4(kModels + "/fmnist/cnn.pt", dir, extra);
}

}  // namespace

TEST_CASE("int4 per-channel on the trained CNN: GPTQ and bias correction beat nearest",
          "[algorithms][e2e]") {
  const double fp32 = top1_of(kModels + "/fmnist/cnn.pt");
  const std::string d = tmpdir("cnn_int4");
  auto nearest = quantize_cnn(d + "/nearest", "");
  auto gptq = quantize_cnn(d + "/gptq", "  weight_rounding: gptq\n");
  auto both = quantize_cnn(d + "/both", "  weight_rounding: gptq\n  bias_correction: true\n");
  const double t_near = top1_of(nearest.artifact_path), t_gptq = top1_of(gptq.artifact_path),
               t_both = top1_of(both.artifact_path);
  WARN("fp32 " << fp32 << ", int4 nearest " << t_near << ", gptq " << t_gptq
               << ", gptq+bias_correction " << t_both);
  CHECK(fp32 - t_gptq <= 1.0);
  // On this net int4 nearest loses nothing (within the test set's noise; one
  // training measured nearest 90.41 above float 90.32): GPTQ can only match
  // it. Which of the two gets a few more images right changes with each
  // training run, so "not worse" is a sign test on the paired flips, not a
  // fixed slack (measured: 61 images only nearest gets right, 49 only GPTQ).
  const auto flips = tq::test::fmnist_paired_flips(nearest.artifact_path, gptq.artifact_path);
  WARN("paired flips: only nearest right " << flips.only_a << ", only gptq right " << flips.only_b);
  CHECK_FALSE(flips.b_worse());
  if (fp32 - t_near > 0.3) CHECK(fp32 - t_gptq <= 0.6 * (fp32 - t_near));
  CHECK_FALSE(tq::test::fmnist_paired_flips(nearest.artifact_path, both.artifact_path).b_worse());
  // Closer to the float model than nearest is (measured 98.76 -> 99.71 %).
  const std::string cnn = kModels + "/fmnist/cnn.pt";
  CHECK(tq::test::fmnist_agreement(cnn, gptq.artifact_path) >
        tq::test::fmnist_agreement(cnn, nearest.artifact_path));
  // The report says what each algorithm did to each layer.
  const auto& layers = gptq.report["layers"];
  bool seen = false;
  for (const auto& l : layers) {
    if (l["name"] != "classifier.fc1") continue;
    seen = true;
    const auto& a = l["algorithms"];
    const auto& sq = a["gptq"]["calibration_output_sqnr_db"];
    CHECK(sq["gptq"].get<double>() > sq["nearest"].get<double>() + 0.5);
    CHECK(a["holdout_output_sqnr_db"]["after"].get<double>() >
          a["holdout_output_sqnr_db"]["nearest"].get<double>());
  }
  CHECK(seen);
  CHECK(both.report["calibration"]["algorithms"]["weights"]["passes"].get<int>() >= 1);
  // The same inputs give the same artifact (timings stay in the report).
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  };
  const std::string first = bytes(both.artifact_path);
  auto again = quantize_cnn(d + "/both", "  weight_rounding: gptq\n  bias_correction: true\n");
  CHECK(bytes(again.artifact_path) == first);
}

TEST_CASE("algorithm errors: modes and missing calibration data", "[algorithms][errors]") {
  const std::string d = tmpdir("errors");
  const std::string yaml = "results_dir: " + d +
                           "\nquantize:\n  backend: libtorch\n  mode: weight_only_ptq\n"
                           "  default_layer_dtype: int4\n  weight_rounding: gptq\n  model_path: " +
                           kModels + "/fmnist/cnn.pt\n";
  try {
    tq::run_quantize(tq::parse_spec_text(yaml, "s.yaml"));
    FAIL("no error");
  } catch (const tq::SpecError& e) {
    CHECK_THAT(e.what(), Contains("quantize.weight_rounding gptq needs calibration data"));
  }
  CHECK_FALSE(fs::exists(d + "/quantized_model_libtorch.pth"));
}

TEST_CASE("equalization pairs of the trained CNN, through ReLU, max-pool and flatten",
          "[algorithms][equalization]") {
  auto m = torch::jit::load(kModels + "/fmnist/cnn.pt");
  m.eval();
  auto pairs = tq::equalization_pairs(m);
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[0].first == "features.conv1");
  CHECK(pairs[0].second == "features.conv2");
  CHECK(pairs[0].through == std::vector<std::string>{"relu", "max_pool2d"});
  CHECK(pairs[1].second == "classifier.fc1");
  CHECK(pairs[1].flattened);
  CHECK(pairs[2].first == "classifier.fc1");
  CHECK(pairs[2].second == "classifier.fc");
}

TEST_CASE("equalization keeps the float function and balances the ranges",
          "[algorithms][equalization]") {
  auto m = torch::jit::load(kModels + "/fmnist/cnn_imbalanced.pt");
  m.eval();
  torch::NoGradGuard ng;
  const at::Tensor x = torch::randn({64, 1, 28, 28}, torch::TensorOptions().dtype(torch::kFloat));
  const at::Tensor before = m.forward({x}).toTensor();
  auto facts = tq::equalize(m, tq::equalization_pairs(m), 20);
  const at::Tensor after = m.forward({x}).toTensor();
  const double rel = ((after - before).abs().max() / before.abs().max()).item<double>();
  CHECK(rel < 1e-5);
  CHECK(facts.to_json()["pairs"].size() == facts.pairs.size());
  for (const auto& p : facts.pairs) {
    INFO(p.first + " -> " + p.second);
    CHECK(p.first_spread_after < p.first_spread_before / 10);
  }
  // Equalizing again changes next to nothing.
  auto again = tq::equalize(m, tq::equalization_pairs(m), 20);
  for (const auto& p : again.pairs)
    CHECK(p.first_spread_after == Approx(p.first_spread_before).epsilon(0.05));
}

namespace {

// Static int8 (latency check off: the result must not depend on timings);
// `extra`: more `quantize` lines (algorithms).
tq::QuantizeOutcome static_cnn(const std::string& model, const std::string& dir,
                               const std::string& granularity, bool equalize,
                               const std::string& extra = "") {
  const std::string yaml =
      "results_dir: " + dir +
      "\nquantize:\n  backend: libtorch\n  mode: static_ptq\n  default_layer_dtype: int8\n"
      "  default_activation_dtype: int8\n  backend_kwargs: {latency_check: false}\n"
      "  model_path: " +
      model + "\n  equalization: " + (equalize ? "true" : "false") + "\n" + extra +
      "  layers:\n    - module_name: '*'\n      weights: {dtype: int8, granularity: " +
      granularity + "}\ndataset:\n  quant_calibration_dataset:\n    data_file: " + kModels +
      "/fmnist/calib.npz\n    batch_size: 64\n";
  return tq::run_quantize(tq::parse_spec_text(yaml, "<test>"));
}

}  // namespace

TEST_CASE("static int8 on the imbalanced CNN: equalization undoes the collapse",
          "[algorithms][equalization][e2e]") {
  const std::string model = kModels + "/fmnist/cnn_imbalanced.pt";
  const double fp32 = top1_of(model);
  const std::string d = tmpdir("imbalanced");
  for (const std::string g : {"per_tensor", "per_channel"}) {
    const double plain = top1_of(static_cnn(model, d + "/plain_" + g, g, false).artifact_path);
    auto eq = static_cnn(model, d + "/eq_" + g, g, true);
    const double equalized = top1_of(eq.artifact_path);
    auto both = static_cnn(model, d + "/eqbc_" + g, g, true, "  bias_correction: true\n");
    const double corrected = top1_of(both.artifact_path);
    WARN("imbalanced CNN static int8 " << g << ": fp32 " << fp32 << ", minmax " << plain
                                       << ", equalization " << equalized
                                       << ", equalization + bias correction " << corrected);
    CHECK(fp32 - equalized <= 1.0);
    CHECK(fp32 - corrected <= 1.0);
    CHECK(equalized > plain);
    if (g == "per_tensor") CHECK(fp32 - plain > 10.0);  // the pathology is real
    CHECK(eq.report["calibration"]["algorithms"]["equalization"]["pairs"] == 3);
    // Every quantized layer's bias moved, measured on the calibration data,
    // unless the held-out batch said the shift made the layer worse.
    for (const auto& l : both.report["layers"]) {
      INFO(l["name"].get<std::string>() << ": " << l["algorithms"].dump());
      const auto& bc = l["algorithms"]["bias_correction"];
      if (!bc.contains("rejected"))
        CHECK(bc["applied_to"] == l["name"].get<std::string>() + ".bias");
      CHECK(bc["input_quantized"] == true);
      CHECK(bc["samples"].get<int>() > 0);
    }
  }
}

TEST_CASE("static int8 on the EfficientNet-style net: bias correction, drop at most 0.5 pt",
          "[algorithms][bias][effnet][e2e]") {
  const std::string model = kModels + "/fmnist/effnet.pt", d = tmpdir("effnet_static");
  const double fp32 = top1_of(model);
  auto plain = static_cnn(model, d + "/plain", "per_channel", false);
  auto bc = static_cnn(model, d + "/bc", "per_channel", false, "  bias_correction: true\n");
  const double t_plain = top1_of(plain.artifact_path), t_bc = top1_of(bc.artifact_path);
  std::string kept;
  for (const auto& l : bc.report["layers"])
    if (l["kept_float"].get<bool>())
      kept += "\n  " + l["name"].get<std::string>() + ": " + l.value("reason", std::string());
  WARN("effnet static int8: fp32 " << fp32 << ", minmax " << t_plain << ", bias correction " << t_bc
                                   << "; layers kept float:" << (kept.empty() ? " none" : kept));
  CHECK(fp32 - t_bc <= 0.5);
  // Not worse than min-max alone beyond the noise of paired flips.
  CHECK_FALSE(tq::test::fmnist_paired_flips(plain.artifact_path, bc.artifact_path).b_worse());
  // The report says what moved and what it did to each layer's output error.
  size_t corrected = 0, better = 0;
  for (const auto& l : bc.report["layers"]) {
    const auto& a = l["algorithms"]["bias_correction"];
    if (!a.contains("applied_to")) continue;
    ++corrected;
    const auto& sq = a["holdout_output_sqnr_db"];
    better += sq["after"].get<double>() >= sq["before"].get<double>() - 0.01;
  }
  CHECK(corrected >= 10);
  CHECK(better * 10 >= corrected * 7);  // most layers' held-out output error went down
}

TEST_CASE("equalization through ReLU6 on the MobileNetV2-style net keeps the function exact",
          "[algorithms][equalization][mbv2]") {
  auto m = torch::jit::load(kModels + "/fmnist/mbv2.pt");
  m.eval();
  auto pairs = tq::equalization_pairs(m);
  size_t clips = 0, depthwise = 0;
  for (const auto& p : pairs) {
    clips += p.clip == 6.0;
    depthwise += p.second.find(".dw") != std::string::npos;
  }
  CHECK(clips >= 6);      // expand -> ReLU6 -> dw, dw -> ReLU6 -> project
  CHECK(depthwise >= 5);  // into the depthwise convs
  torch::NoGradGuard ng;
  const at::Tensor x = torch::randn({32, 1, 28, 28});
  const at::Tensor before = m.forward({x}).toTensor();
  auto facts = tq::equalize(m, pairs, 20);
  const at::Tensor after = m.forward({x}).toTensor();
  CHECK(((after - before).abs().max() / before.abs().max()).item<double>() < 1e-5);
  // The rewritten clips are buffers of the model: a saved copy runs alone.
  const std::string path = tmpdir("mbv2_eq") + "/m.pt";
  m.save(path);
  auto reloaded = torch::jit::load(path);
  CHECK(at::allclose(reloaded.forward({x}).toTensor(), after));
}

TEST_CASE("imbalanced MobileNetV2-style net: equalization through per-channel clips is exact",
          "[algorithms][equalization][mbv2]") {
  // make_imbalanced.py turned each ReLU6 between an imbalanced pair into a
  // per-channel clip (minimum with a `_tq_clip` buffer); equalization must
  // see through it and rescale the clip with the channels.
  auto m = torch::jit::load(kModels + "/fmnist/mbv2_imbalanced.pt");
  m.eval();
  auto pairs = tq::equalization_pairs(m);
  size_t channel_clips = 0;
  for (const auto& p : pairs) channel_clips += p.clip < 0;
  CHECK(channel_clips >= 12);  // expand -> dw, dw -> project in each block
  torch::NoGradGuard ng;
  const at::Tensor x = torch::randn({32, 1, 28, 28});
  const at::Tensor before = m.forward({x}).toTensor();
  auto facts = tq::equalize(m, pairs, 20);
  const at::Tensor after = m.forward({x}).toTensor();
  CHECK(((after - before).abs().max() / before.abs().max()).item<double>() < 1e-5);
  for (const auto& p : facts.pairs) {
    INFO(p.first + " -> " + p.second);
    CHECK(p.first_spread_after < p.first_spread_before + 1e-6);
  }
}

TEST_CASE("static int8 on the imbalanced MobileNetV2-style net: equalization through ReLU6",
          "[algorithms][equalization][mbv2][e2e]") {
  const std::string model = kModels + "/fmnist/mbv2_imbalanced.pt";
  const double fp32 = top1_of(model);
  const std::string d = tmpdir("mbv2_imbalanced");
  for (const std::string g : {"per_tensor", "per_channel"}) {
    const double plain = top1_of(static_cnn(model, d + "/plain_" + g, g, false).artifact_path);
    auto both = static_cnn(model, d + "/eqbc_" + g, g, true, "  bias_correction: true\n");
    const double corrected = top1_of(both.artifact_path);
    WARN("imbalanced MobileNetV2 static int8 " << g << ": fp32 " << fp32 << ", minmax " << plain
                                               << ", equalization + bias correction " << corrected);
    CHECK(fp32 - plain > 10.0);  // the pathology is real, per-channel weights too
    CHECK(fp32 - corrected <= 1.0);
    CHECK(both.report["calibration"]["algorithms"]["equalization"]["pairs"].get<int>() >= 12);
    size_t quantized = 0;
    for (const auto& l : both.report["layers"]) quantized += l["kept_float"] == false;
    CHECK(quantized == both.report["layers"].size());
  }
}

namespace {

// GPTQ against nearest rounding, weight-only int4 per-channel, on a trained net.
void gptq_beats_nearest_int4(const std::string& net) {
  const std::string model = kModels + "/fmnist/" + net + ".pt", d = tmpdir(net + "_int4");
  const double fp32 = top1_of(model);
  auto run = [&](const std::string& name, const std::string& extra) {
    return tq::test::fmnist_int4(model, d + "/" + name, extra).artifact_path;
  };
  const std::string n_path = run("nearest", ""), g_path = run("gptq", "  weight_rounding: gptq\n");
  const double nearest = top1_of(n_path), gptq = top1_of(g_path);
  const double n_agree = tq::test::fmnist_agreement(model, n_path),
               g_agree = tq::test::fmnist_agreement(model, g_path);
  WARN(net << " int4 per-channel: fp32 " << fp32 << ", nearest " << nearest << ", gptq " << gptq
           << "; agreement with fp32: nearest " << n_agree << ", gptq " << g_agree);
  CHECK(gptq >= nearest - 0.05);
  CHECK(g_agree > n_agree);
  CHECK(fp32 - gptq <= 1.0);
  if (fp32 - nearest > 0.3) CHECK(fp32 - gptq <= 0.6 * (fp32 - nearest));
}

}  // namespace

TEST_CASE("int4 per-channel on the MobileNetV2-style net: GPTQ beats nearest",
          "[algorithms][gptq][mbv2][e2e]") {
  gptq_beats_nearest_int4("mbv2");
}

TEST_CASE("int4 per-channel on the ResNet: GPTQ beats nearest", "[algorithms][gptq][resnet][e2e]") {
  gptq_beats_nearest_int4("resnet");
}

TEST_CASE("equalization scales match the DFQ definition computed in Python",
          "[algorithms][equalization]") {
  const auto& r = refs()["equalization"];
  auto m = torch::jit::load(tq::test::algorithm_refs_dir() + "/cle.pt");
  m.eval();
  auto pairs = tq::equalization_pairs(m);
  REQUIRE(pairs.size() == 2);
  tq::equalize(m, pairs, 1);  // one sweep, as the reference
  for (const char* name : {"conv1.weight", "conv1.bias", "dw.weight", "dw.bias", "conv3.weight"}) {
    INFO(name);
    const std::string s(name);
    const auto dot = s.find('.');
    auto t = m.attr(s.substr(0, dot)).toModule().attr(s.substr(dot + 1)).toTensor();
    CHECK(at::allclose(t.to(at::kDouble), tensor_of(r[name]), 1e-5, 1e-6));
  }
}
