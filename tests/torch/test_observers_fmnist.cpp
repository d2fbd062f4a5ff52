// Observers on real data: activations and weights of the trained
// Fashion-MNIST CNN on its calibration images.
#include <filesystem>

#include <torch/script.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "taoquant/data.h"
#include "taoquant/observer.h"

namespace {

struct Activations {
  std::vector<at::Tensor> input, conv1_relu, fc1_in, fc1_relu;
};

// 256 calibration images through the CNN, keeping a few layer inputs.
Activations cnn_activations(torch::jit::Module& model) {
  tq::Spec spec;
  tq::DataSourceSpec src;
  src.data_files = {std::string(TQ_MODELS_DIR) + "/fmnist/calib.npz"};
  src.batch_size = 64;
  src.max_batches = 4;
  auto loader = tq::make_data_loader(spec, src, "dataset.quant_calibration_dataset", false);
  auto features = model.attr("features").toModule();
  auto classifier = model.attr("classifier").toModule();
  auto call = [](torch::jit::Module m, const at::Tensor& x) { return m.forward({x}).toTensor(); };
  Activations a;
  tq::Batch b;
  torch::NoGradGuard no_grad;
  while (loader->next(b)) {
    at::Tensor x = b.inputs.at(0);
    a.input.push_back(x);
    at::Tensor h =
        call(features.attr("relu1").toModule(), call(features.attr("conv1").toModule(), x));
    a.conv1_relu.push_back(h);
    h = call(features.attr("pool1").toModule(), h);
    h = call(features.attr("relu2").toModule(), call(features.attr("conv2").toModule(), h));
    h = call(classifier.attr("flatten").toModule(), call(features.attr("pool2").toModule(), h));
    a.fc1_in.push_back(h);
    a.fc1_relu.push_back(
        call(classifier.attr("relu").toModule(), call(classifier.attr("fc1").toModule(), h)));
  }
  return a;
}

tq::QParams observe_all(const std::string& name, const tq::ObserverConfig& cfg,
                        const std::vector<at::Tensor>& batches) {
  auto o = tq::ObserverRegistry::instance().create(name, cfg);
  for (const auto& b : batches) o->observe(b);
  return o->finalize();
}

double sqnr_db(const at::Tensor& ref, const at::Tensor& x) {
  double s = ref.pow(2).sum().item<double>(), n = (ref - x).pow(2).sum().item<double>();
  return 10 * std::log10(s / n);
}

at::Tensor fake_quant(const at::Tensor& x, const tq::QParams& q) {
  return at::fake_quantize_per_tensor_affine(x, q.scale[0], q.zero_point[0], q.quant_min,
                                             q.quant_max);
}

}  // namespace

TEST_CASE("observers: Fashion-MNIST CNN activations", "[observers][fmnist]") {
  std::string path = std::string(TQ_MODELS_DIR) + "/fmnist/cnn.pt";
  REQUIRE(std::filesystem::exists(path));
  torch::jit::Module model = torch::jit::load(path);
  model.eval();
  Activations a = cnn_activations(model);
  REQUIRE(a.input.size() == 4);

  tq::ObserverConfig cfg;  // activations: uint8 affine per tensor, as static PTQ uses
  cfg.dtype = tq::DType::kUInt8;
  for (const auto* layer : {&a.input, &a.conv1_relu, &a.fc1_in, &a.fc1_relu}) {
    at::Tensor all = torch::cat(*layer).reshape({-1});
    auto [mn, mx] = at::aminmax(all);
    float amax = all.abs().max().item<float>();
    auto qm = observe_all("minmax", cfg, *layer);
    CHECK(qm.min_val == mn.item<float>());
    CHECK(qm.max_val == mx.item<float>());
    CHECK(qm.zero_point[0] >= 0);
    CHECK(qm.zero_point[0] <= 255);

    auto qp = observe_all("percentile", cfg, *layer);
    at::Tensor sorted = std::get<0>(all.abs().sort());
    double exact = sorted[int64_t(std::ceil(0.9999 * all.numel())) - 1].item<double>();
    CHECK(qp.clip_max <= amax);
    CHECK(std::max(-qp.clip_min, qp.clip_max) == Approx(exact).margin(2.0 * amax / 2048));

    auto qe = observe_all("entropy", cfg, *layer);
    auto qs = observe_all("mse", cfg, *layer);
    CHECK(qe.clip_max <= amax);
    CHECK(qs.clip_max <= amax);
    // Clipping observers quantize the real activations at least about as well as minmax.
    double s_minmax = sqnr_db(all, fake_quant(all, qm));
    double s_mse = sqnr_db(all, fake_quant(all, qs));
    double s_entropy = sqnr_db(all, fake_quant(all, qe));
    double s_percentile = sqnr_db(all, fake_quant(all, qp));
    INFO("SQNR dB: minmax " << s_minmax << ", mse " << s_mse << ", entropy " << s_entropy
                            << ", percentile " << s_percentile);
    CHECK(s_mse >= s_minmax - 0.2);  // mse minimises exactly this error
    CHECK(s_minmax > 35);
    CHECK(s_entropy > 30);
    CHECK(s_percentile > 30);
    // ReLU outputs are one-signed: affine clips start at 0.
    if (mn.item<float>() >= 0) {
      for (const auto& q : {qm, qp, qe, qs}) {
        CHECK(q.clip_min == 0.0);
        CHECK(q.zero_point[0] == 0);
      }
    }
  }
}

TEST_CASE("observers: Fashion-MNIST CNN weights per channel", "[observers][fmnist]") {
  std::string path = std::string(TQ_MODELS_DIR) + "/fmnist/cnn.pt";
  REQUIRE(std::filesystem::exists(path));
  torch::jit::Module model = torch::jit::load(path);
  for (const auto& [parent, child] : {std::pair{"features", "conv1"},
                                      {"features", "conv2"},
                                      {"classifier", "fc1"},
                                      {"classifier", "fc"}}) {
    at::Tensor w =
        model.attr(parent).toModule().attr(child).toModule().attr("weight").toTensor().detach();
    tq::ObserverConfig cfg;
    cfg.dtype = tq::DType::kInt8;
    cfg.symmetric = true;
    cfg.per_channel = true;
    cfg.axis = 0;
    auto q = observe_all("minmax", cfg, {w});
    REQUIRE(q.scale.size() == size_t(w.size(0)));
    at::Tensor amax = w.reshape({w.size(0), -1}).abs().amax(1);
    for (int64_t c = 0; c < w.size(0); ++c) {
      CHECK(q.scale[c] ==
            std::max(amax[c].item<float>() / 127.5f, std::numeric_limits<float>::epsilon()));
      CHECK(q.zero_point[c] == 0);
    }
    // The qparams quantize the weights with LibTorch's own kernels.
    at::Tensor scales = torch::tensor(q.scale, torch::kDouble);
    at::Tensor zps = torch::tensor(std::vector<int64_t>(q.zero_point.begin(), q.zero_point.end()));
    at::Tensor wq = at::quantize_per_channel(w, scales, zps, 0, at::kQInt8).dequantize();
    CHECK(sqnr_db(w, wq) > 35);
    // mse per channel clips no further than the channel's amax and keeps the SQNR.
    auto qs = observe_all("mse", cfg, {w});
    at::Tensor s2 = torch::tensor(qs.scale, torch::kDouble);
    at::Tensor ws = at::quantize_per_channel(w, s2, zps, 0, at::kQInt8).dequantize();
    for (int64_t c = 0; c < w.size(0); ++c) CHECK(qs.scale[c] <= q.scale[c] * 1.0001f);
    CHECK(sqnr_db(w, ws) >= sqnr_db(w, wq) - 0.1);
  }
}
