// Observers: registry and kwargs errors, each observer on known
// distributions, per-channel shapes, fp8, and the streaming histogram.
#include <chrono>
#include <cmath>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "../../lib/src/torch/observers/histogram.h"
#include "taoquant/formats.h"
#include "taoquant/observer.h"

namespace {

tq::ObserverConfig config(tq::DType d, bool symmetric,
                          nlohmann::json kwargs = nlohmann::json::object()) {
  tq::ObserverConfig c;
  c.dtype = d;
  c.symmetric = symmetric;
  c.kwargs = std::move(kwargs);
  return c;
}

std::unique_ptr<tq::Observer> make(const std::string& name, const tq::ObserverConfig& cfg) {
  return tq::ObserverRegistry::instance().create(name, cfg);
}

tq::QParams run(const std::string& name, const tq::ObserverConfig& cfg,
                const std::vector<at::Tensor>& batches) {
  auto o = make(name, cfg);
  for (const auto& b : batches) o->observe(b);
  return o->finalize();
}

// Mean squared error of fake-quantizing x with q (per-tensor integer formats).
double fq_mse(const at::Tensor& x, const tq::QParams& q) {
  at::Tensor y =
      at::fake_quantize_per_tensor_affine(x, q.scale[0], q.zero_point[0], q.quant_min, q.quant_max);
  return (y - x).pow(2).mean().item<double>();
}

// The p-th quantile of |x| (exact, by sorting).
double abs_quantile(const at::Tensor& x, double p) {
  at::Tensor s = std::get<0>(x.abs().reshape({-1}).sort());
  int64_t k = std::min<int64_t>(s.numel() - 1, int64_t(std::ceil(p * double(s.numel()))) - 1);
  return s[std::max<int64_t>(0, k)].item<double>();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tq::Error& e) {
    return e.what();
  }
  return "<no error>";
}

const std::vector<std::string> kAll = {"entropy", "max",       "minmax", "moving_average_minmax",
                                       "mse",     "percentile"};

}  // namespace

TEST_CASE("observers: registry lists every observer with its origin", "[observers]") {
  auto& reg = tq::ObserverRegistry::instance();
  CHECK(reg.names() == kAll);
  for (const auto& n : kAll) {
    const tq::ObserverInfo* info = reg.find(n);
    REQUIRE(info != nullptr);
    CHECK(!info->help.empty());
    CHECK(info->registered_at.find(".cpp:") != std::string::npos);
    auto o = reg.create(n, config(tq::DType::kUInt8, false));
    CHECK(o->name() == n);
  }
  CHECK(reg.find("minmax")->registered_at.find("observers/minmax.cpp:") != std::string::npos);
  CHECK(reg.find("nope") == nullptr);
}

TEST_CASE("observers: unknown names and bad kwargs are spec errors", "[observers]") {
  auto& reg = tq::ObserverRegistry::instance();
  tq::SourceLoc loc{"spec.yaml", 12, 7};
  auto cfg = config(tq::DType::kUInt8, false);
  try {
    reg.create("entropi", cfg, loc);
    FAIL("no error");
  } catch (const tq::SpecError& e) {
    std::string m = e.what();
    CHECK(e.code() == tq::ExitCode::kUsage);
    CHECK(m.rfind("spec.yaml:12:7: unknown observer 'entropi'", 0) == 0);
    CHECK(m.find("did you mean 'entropy'") != std::string::npos);
    CHECK(
        m.find(
            "available observers: entropy, max, minmax, moving_average_minmax, mse, percentile") !=
        std::string::npos);
  }
  // Far from every name: no suggestion, but the list.
  std::string m = error_of([&] { reg.create("kmeans", cfg, loc); });
  CHECK(m.find("did you mean") == std::string::npos);
  CHECK(m.find("available observers:") != std::string::npos);

  auto with = [&](const std::string& name, nlohmann::json kw) {
    auto c = cfg;
    c.kwargs = std::move(kw);
    return error_of([&] { reg.create(name, c, loc); });
  };
  m = with("percentile", {{"percentil", 99.9}});
  CHECK(m.rfind("spec.yaml:12:7: observer 'percentile': unknown kwarg 'percentil'", 0) == 0);
  CHECK(m.find("did you mean 'percentile'") != std::string::npos);
  CHECK(m.find("accepted kwargs: num_bins, percentile") != std::string::npos);
  m = with("minmax", {{"averaging_constant", 0.1}});
  CHECK(m.find("observer 'minmax': unknown kwarg 'averaging_constant'; it accepts no kwargs") !=
        std::string::npos);
  m = with("percentile", {{"percentile", "high"}});
  CHECK(m.find("kwarg 'percentile' must be a number in (0, 100], got \"high\"") !=
        std::string::npos);
  CHECK(with("percentile", {{"percentile", 100.5}}).find("(0, 100]") != std::string::npos);
  CHECK(with("percentile", {{"percentile", 0}}).find("(0, 100]") != std::string::npos);
  CHECK(with("entropy", {{"skip_zeros", "yes"}}).find("kwarg 'skip_zeros' must be true or false") !=
        std::string::npos);
  CHECK(with("entropy", {{"num_bins", 2048.5}}).find("an integer in [16, 65536]") !=
        std::string::npos);
  CHECK(with("entropy", {{"num_bins", 256}, {"start_bin", 512}})
            .find("start_bin (512) must not exceed num_bins (256)") != std::string::npos);
  CHECK(with("mse", {{"start_fraction", 1.5}}).find("kwarg 'start_fraction'") != std::string::npos);
  CHECK(with("mse", {{"num_candidates", 1}}).find("kwarg 'num_candidates'") != std::string::npos);
  CHECK(with("moving_average_minmax", {{"averaging_constant", 0}}).find("(0, 1]") !=
        std::string::npos);
  CHECK(with("entropy", nlohmann::json::array({1, 2})).find("must be a map") != std::string::npos);
  auto bogus = cfg;
  bogus.kwargs = {{"bogus", 1}};
  CHECK_THROWS_AS(reg.create("mse", bogus, loc), tq::SpecError);
  // Every accepted kwarg works.
  CHECK(with("entropy",
             {{"num_bins", 1024}, {"start_bin", 64}, {"stride", 2}, {"skip_zeros", false}}) ==
        "<no error>");
  CHECK(with("mse", {{"num_candidates", 20}, {"start_fraction", 0.2}, {"num_bins", 512}}) ==
        "<no error>");
  CHECK(with("moving_average_minmax", {{"averaging_constant", 0.5}}) == "<no error>");
  CHECK(with("max", nullptr) == "<no error>");  // null kwargs = none

  // Configurations no observer serves.
  auto bad = cfg;
  bad.dtype = tq::DType::kNative;
  CHECK(error_of([&] { reg.create("minmax", bad, loc); }).find("dtype 'native'") !=
        std::string::npos);
  bad = config(tq::DType::kUInt8, true);
  bad.reduce_range = true;
  CHECK(error_of([&] {
          reg.create("entropy", bad, loc);
        }).find("symmetric uint8 with reduce_range is not supported") != std::string::npos);
}

TEST_CASE("observers: a duplicate registration names both places", "[observers]") {
  tq::ObserverInfo info;
  info.name = "minmax";
  info.help = "again";
  info.factory = [](const tq::ObserverConfig&) -> std::unique_ptr<tq::Observer> { return nullptr; };
  info.registered_at = "my_plugin.cpp:42";
  std::string m = error_of([&] { tq::ObserverRegistry::instance().add(info); });
  CHECK(m.find("observer name 'minmax' is registered twice") != std::string::npos);
  CHECK(m.find("observers/minmax.cpp:") != std::string::npos);
  CHECK(m.find("again at my_plugin.cpp:42") != std::string::npos);
  CHECK(tq::ObserverRegistry::instance().names() == kAll);
}

TEST_CASE("observers: bad tensors are runtime errors naming the observer", "[observers]") {
  for (const auto& n : kAll) {
    auto o = make(n, config(tq::DType::kUInt8, false));
    at::Tensor x = torch::randn({4, 4});
    x[1][2] = std::nanf("");
    std::string m = error_of([&] { o->observe(x); });
    CHECK(m.find("observer '" + n + "'") != std::string::npos);
    CHECK(m.find("NaN or infinite") != std::string::npos);
    x[1][2] = INFINITY;
    CHECK_THROWS_AS(o->observe(x), tq::RuntimeError);
    CHECK_THROWS_AS(o->observe(torch::ones({2}, torch::kBool)), tq::RuntimeError);

    auto pc = config(tq::DType::kInt8, true);
    pc.per_channel = true;
    pc.axis = 3;
    auto p = make(n, pc);
    CHECK(error_of([&] {
            p->observe(torch::randn({2, 3}));
          }).find("per-channel axis 3 is outside a tensor of shape [2, 3]") != std::string::npos);
    pc.axis = 1;
    auto p2 = make(n, pc);
    p2->observe(torch::randn({2, 3}));
    CHECK(error_of([&] {
            p2->observe(torch::randn({2, 4}));
          }).find("channel count changed from 3 to 4") != std::string::npos);
    // Empty tensors are ignored; nothing observed gives PyTorch's defaults.
    auto e = make(n, config(tq::DType::kUInt8, false));
    e->observe(torch::empty({0, 3}));
    auto q = e->finalize();
    CHECK(q.scale == std::vector<float>{1.0f});
    CHECK(q.zero_point == std::vector<int32_t>{0});
  }
}

TEST_CASE("observers: minmax, max and moving average ranges", "[observers]") {
  at::Tensor a = torch::tensor({-1.0f, 0.5f, 2.0f}), b = torch::tensor({-3.0f, 1.0f}),
             c = torch::tensor({0.25f, 4.0f});
  auto q = run("minmax", config(tq::DType::kUInt8, false), {a, b, c});
  CHECK(q.min_val == -3.0);
  CHECK(q.max_val == 4.0);
  CHECK(q.clip_min == -3.0);
  CHECK(q.clip_max == 4.0);
  CHECK(q.scale[0] == 7.0f / 255.0f);
  CHECK(q.zero_point[0] == 0 - int(std::nearbyint(-3.0f / (7.0f / 255.0f))));

  // max: symmetric by nature; unsigned data keeps the full uint8 range.
  q = run("max", config(tq::DType::kInt8, true), {a, b, c});
  CHECK(q.clip_min == -4.0);
  CHECK(q.clip_max == 4.0);
  CHECK(q.scale[0] == 4.0f / 127.5f);
  CHECK(q.zero_point[0] == 0);
  CHECK(q.min_val == -3.0);
  q = run("max", config(tq::DType::kUInt8, false), {torch::tensor({0.0f, 1.0f, 3.0f})});
  CHECK(q.clip_min == 0.0);
  CHECK(q.scale[0] == 3.0f / 255.0f);
  CHECK(q.zero_point[0] == 0);
  q = run("max", config(tq::DType::kUInt8, false), {a});
  CHECK(q.clip_min == -2.0);
  CHECK(q.clip_max == 2.0);
  CHECK(q.zero_point ==
        tq::qparams_from_range({-2.0f}, {2.0f}, config(tq::DType::kUInt8, false)).zero_point);

  // Moving average: first batch sets it, then min += c * (batch_min - min).
  q = run("moving_average_minmax", config(tq::DType::kUInt8, false, {{"averaging_constant", 0.5}}),
          {a, b, c});
  float lo = -1.0f, hi = 2.0f;
  lo = lo + 0.5f * (-3.0f - lo);
  hi = hi + 0.5f * (1.0f - hi);
  lo = lo + 0.5f * (0.25f - lo);
  hi = hi + 0.5f * (4.0f - hi);
  CHECK(q.min_val == lo);
  CHECK(q.max_val == hi);
}

TEST_CASE("observers: percentile of a uniform distribution", "[observers]") {
  torch::manual_seed(1);
  std::vector<at::Tensor> batches;
  for (int i = 0; i < 4; ++i) batches.push_back(torch::rand({250000}) * 2 - 1);
  at::Tensor all = torch::cat(batches);
  for (double p : {90.0, 99.0, 99.99}) {
    auto q = run("percentile", config(tq::DType::kInt8, true, {{"percentile", p}}), batches);
    INFO("percentile " << p);
    CHECK(q.clip_max == Approx(p / 100).margin(2e-3));
    CHECK(q.clip_max == Approx(abs_quantile(all, p / 100)).margin(1e-3));
    CHECK(q.clip_min == -q.clip_max);
    CHECK(q.scale[0] == Approx(q.clip_max / 127.5).epsilon(1e-6));
  }
  auto q = run("percentile", config(tq::DType::kInt8, true, {{"percentile", 100}}), batches);
  CHECK(q.clip_max == Approx(all.abs().max().item<double>()).epsilon(1e-7));
  // Affine on ReLU-like data: the clip starts at 0.
  q = run("percentile", config(tq::DType::kUInt8, false, {{"percentile", 99}}),
          {torch::rand({100000}) * 6});
  CHECK(q.clip_min == 0.0);
  CHECK(q.clip_max == Approx(5.94).margin(0.03));
  CHECK(q.zero_point[0] == 0);
}

TEST_CASE("observers: entropy clips outliers, keeps bounded data whole", "[observers]") {
  torch::manual_seed(2);
  at::Tensor g = torch::randn({400000});
  at::Tensor outliers = torch::tensor({-60.0f, 45.0f, 52.0f, 60.0f});
  at::Tensor x = torch::cat({g, outliers});
  auto q =
      run("entropy", config(tq::DType::kInt8, true), {x.slice(0, 0, 200000), x.slice(0, 200000)});
  CHECK(q.max_val == 60.0);
  CHECK(q.clip_max < 0.25 * 60.0);
  CHECK(q.clip_max > 3.0);  // not below the Gaussian's bulk
  // Fewer quantization levels (int4) clip harder.
  auto q4 = run("entropy", config(tq::DType::kInt4, true), {g});
  auto q8 = run("entropy", config(tq::DType::kInt8, true), {g});
  CHECK(q4.clip_max < q8.clip_max);
  // A uniform distribution has nothing to clip.
  auto qu = run("entropy", config(tq::DType::kInt8, true), {torch::rand({200000}) * 2 - 1});
  CHECK(qu.clip_max > 0.9);
  // Entropy's clip resolves the bulk of the Gaussian-with-outliers far better than minmax.
  auto qa = run("entropy", config(tq::DType::kUInt8, false), {x});
  auto qm = run("minmax", config(tq::DType::kUInt8, false), {x});
  CHECK(qa.clip_max < 0.25 * 60.0);
  CHECK(fq_mse(g, qa) < 0.2 * fq_mse(g, qm));
  // ReLU outputs: the exact zeros are left out (skip_zeros); with them, the
  // zero spike drags the threshold down.
  at::Tensor r = torch::randn({400000}).relu_();
  auto qr = run("entropy", config(tq::DType::kUInt8, false), {r});
  auto qz = run("entropy", config(tq::DType::kUInt8, false, {{"skip_zeros", false}}), {r});
  INFO("relu clip " << qr.clip_max << ", with zeros " << qz.clip_max << ", amax " << qr.max_val);
  CHECK(qr.clip_min == 0.0);
  CHECK(qr.clip_max > 0.5 * qr.max_val);
  CHECK(qz.clip_max < qr.clip_max);
}

TEST_CASE("observers: mse finds the MSE-optimal clip", "[observers]") {
  torch::manual_seed(3);
  at::Tensor g = torch::randn({500000});
  // int4 on N(0,1): the known optimum is about 2.5 sigma (ACIQ: 2.55).
  auto q4 = run("mse", config(tq::DType::kInt4, true), {g});
  CHECK(q4.clip_max > 2.2);
  CHECK(q4.clip_max < 2.9);
  // The chosen clip beats its neighbours and the full range on the real data.
  auto at_clip = [&](double t) {
    auto q = tq::qparams_from_range({float(-t)}, {float(t)}, config(tq::DType::kInt4, true));
    return fq_mse(g, q);
  };
  double best = fq_mse(g, q4);
  CHECK(best <= at_clip(q4.clip_max * 0.9) * 1.01);
  CHECK(best <= at_clip(q4.clip_max * 1.1) * 1.01);
  CHECK(best < 0.5 * at_clip(q4.max_val));
  // Heavy tails (Laplace, b = 1): below the max, near the known optima
  // (ACIQ: 9.89 b for 8 bits, 5.03 b for 4 bits).
  at::Tensor u = torch::rand({500000}) - 0.5;
  at::Tensor lap = -u.sign() * torch::log1p(-2 * u.abs());
  auto q8 = run("mse", config(tq::DType::kInt8, true), {lap});
  INFO("laplace int8 clip " << q8.clip_max << " of max " << q8.max_val);
  CHECK(q8.clip_max < 0.95 * q8.max_val);
  CHECK(q8.clip_max > 8.0);
  CHECK(q8.clip_max < 10.5);
  auto ql4 = run("mse", config(tq::DType::kInt4, true), {lap});
  CHECK(ql4.clip_max > 4.0);
  CHECK(ql4.clip_max < 6.0);
  CHECK(fq_mse(lap, q8) < fq_mse(lap, run("minmax", config(tq::DType::kInt8, true), {lap})));
  // Uniform data: clipping only hurts.
  auto qu = run("mse", config(tq::DType::kInt8, true), {torch::rand({200000}) * 2 - 1});
  CHECK(qu.clip_max > 0.97);
}

TEST_CASE("observers: streaming histogram re-bins and keeps counts", "[observers]") {
  torch::manual_seed(4);
  tq::obs::AbsHistogram h(2048, false, 0, "test");
  std::vector<at::Tensor> batches = {torch::randn({30000}) * 0.5, torch::randn({20000}) * 3,
                                     torch::randn({10000}) * 40, torch::zeros({1000})};
  double n = 0;
  for (const auto& b : batches) {
    h.observe(b);
    n += b.numel();
    CHECK(h.total(0) == n);  // exact
  }
  at::Tensor all = torch::cat(batches);
  float amax = all.abs().max().item<float>();
  CHECK(h.amax(0) == amax);
  CHECK(h.internal_bins() == 4 * 2048);
  // R grew from the first batch's amax by powers of two.
  float first = batches[0].abs().max().item<float>();
  float ratio = h.internal_top(0) / first;
  CHECK(ratio == std::exp2(std::round(std::log2(ratio))));
  CHECK(h.internal_top(0) >= amax);
  CHECK(h.internal_top(0) < 2 * amax);
  auto counts = h.counts(0);
  REQUIRE(counts.size() == 2048);
  double sum = 0;
  for (double c : counts) sum += c;
  CHECK(sum == Approx(n).epsilon(1e-12));
  // The re-binned histogram still gives accurate quantiles.
  double width = amax / 2048.0;
  for (double p : {0.5, 0.9, 0.999}) {
    double cum = 0, target = p * n;
    size_t j = 0;
    while (cum + counts[j] < target) cum += counts[j++];
    double t = (j + (target - cum) / counts[j]) * width;
    INFO("quantile " << p);
    CHECK(t == Approx(abs_quantile(all, p)).margin(2 * width));
  }
  // Only zeros: everything in bin 0, amax 0.
  tq::obs::AbsHistogram z(64, false, 0, "test");
  z.observe(torch::zeros({10}));
  CHECK(z.amax(0) == 0);
  CHECK(z.counts(0)[0] == 10);
  CHECK(z.zeros(0) == 10);
  CHECK(z.counts(0, true)[0] == 0);
  // Exact zeros stay a point mass in bin 0, also when the range grows.
  tq::obs::AbsHistogram pz(128, true, 0, "test");
  pz.observe(torch::tensor({{0.0f, 0.0f, 0.5f, 1.0f}, {0.0f, -2.0f, 2.0f, 1.0f}}));
  pz.observe(torch::tensor({{0.0f, 3.0f}, {0.0f, 0.1f}}));
  CHECK(pz.zeros(0) == 3);
  CHECK(pz.zeros(1) == 2);
  CHECK(pz.counts(0)[0] == 3);
  CHECK(pz.counts(0, true)[0] == 0);
  CHECK(pz.total(0) == 6);
  CHECK(pz.internal_top(0) == 4.0f);  // 1 -> 2 -> 4
  CHECK(pz.internal_top(1) == 2.0f);
}

TEST_CASE("observers: per-channel qparams have one entry per channel", "[observers]") {
  torch::manual_seed(5);
  at::Tensor x = torch::randn({8, 5, 4, 4}) *
                 torch::tensor({0.1f, 1.0f, 3.0f, 10.0f, 0.5f}).reshape({1, 5, 1, 1});
  x.select(1, 4).abs_();  // an all-positive channel
  for (const auto& n : kAll) {
    for (int axis : {1, -3}) {
      auto cfg = config(tq::DType::kInt8, true);
      cfg.per_channel = true;
      cfg.axis = axis;
      auto q = run(n, cfg, {x, x * 0.5});
      INFO(n << " axis " << axis);
      REQUIRE(q.scale.size() == 5);
      REQUIRE(q.zero_point.size() == 5);
      CHECK(q.per_channel);
      CHECK(q.axis == axis);
      for (int c = 0; c < 5; ++c) {
        float amax = x.select(1, c).abs().max().item<float>();
        CHECK(q.zero_point[c] == 0);
        CHECK(q.scale[c] <= amax / 127.5f * 1.0001f);
        CHECK(q.scale[c] > amax / 127.5f * 0.2f);
      }
      CHECK(q.scale[3] > 5 * q.scale[1]);
    }
  }
  // Axis 0 on a weight-like tensor, uint8 affine: the all-positive row gets zero point 0.
  at::Tensor w = torch::randn({6, 9});
  w[2] = w[2].abs();
  auto cfg = config(tq::DType::kUInt8, false);
  cfg.per_channel = true;
  for (const auto& n : {"minmax", "max", "percentile", "mse", "entropy"}) {
    auto q = run(n, cfg, {w});
    REQUIRE(q.scale.size() == 6);
    CHECK(q.zero_point[2] == 0);
  }
  // Per-channel minmax equals per-tensor minmax on each slice.
  cfg = config(tq::DType::kUInt8, false);
  cfg.per_channel = true;
  cfg.axis = 1;
  auto q = run("minmax", cfg, {x});
  for (int c = 0; c < 5; ++c) {
    auto qc = run("minmax", config(tq::DType::kUInt8, false), {x.select(1, c)});
    CHECK(q.scale[c] == qc.scale[0]);
    CHECK(q.zero_point[c] == qc.zero_point[0]);
  }
}

TEST_CASE("observers: fp8 gives amax / fp8 max scales", "[observers]") {
  torch::manual_seed(6);
  at::Tensor x = torch::randn({10000}) * 3;
  float amax = x.abs().max().item<float>();
  for (auto d : {tq::DType::kFp8E4M3, tq::DType::kFp8E5M2}) {
    float fmax = tq::wformat::fp8_max(d == tq::DType::kFp8E4M3 ? tq::wformat::Fp8::kE4M3FN
                                                               : tq::wformat::Fp8::kE5M2);
    for (const auto& n : {"minmax", "max", "moving_average_minmax"}) {
      auto q = run(n, config(d, false), {x});
      CHECK(q.dtype == d);
      CHECK(q.scale[0] == amax / fmax);
      CHECK(q.zero_point[0] == 0);
      CHECK(q.amax() == Approx(amax));
      CHECK(q.quant_max == int(fmax));
    }
    for (const auto& n : {"percentile", "mse", "entropy"}) {
      auto q = run(n, config(d, false), {x});
      INFO(n);
      CHECK(q.clip_min == -q.clip_max);
      CHECK(q.clip_max <= amax);
      CHECK(q.clip_max > 0.3 * amax);
      CHECK(q.scale[0] == Approx(q.clip_max / fmax).epsilon(1e-6));
    }
  }
  // fp8's fine resolution near zero: mse clips a Gaussian far less than int4 does.
  auto q8 = run("mse", config(tq::DType::kFp8E4M3, false), {x});
  auto q4 = run("mse", config(tq::DType::kInt4, true), {x});
  CHECK(q8.clip_max > q4.clip_max);
}

// Timing, not run by default: build-obs/bin/tq_torch_tests "[.observers_bench]"
TEST_CASE("observers: observe and finalize timings", "[.observers_bench]") {
  torch::manual_seed(7);
  at::Tensor x = torch::randn({32, 64, 56, 56}).relu_();  // 6.4M values, a ResNet-like activation
  for (bool per_channel : {false, true}) {
    for (const auto& n : kAll) {
      auto cfg = config(tq::DType::kUInt8, false);
      cfg.per_channel = per_channel;
      cfg.axis = 1;
      auto o = make(n, cfg);
      o->observe(x);  // warm-up, sets the range
      const int reps = 5;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) o->observe(x);
      auto t1 = std::chrono::steady_clock::now();
      auto q = o->finalize();
      auto t2 = std::chrono::steady_clock::now();
      double obs_ms = std::chrono::duration<double, std::milli>(t1 - t0).count() / reps;
      double fin_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
      WARN(n << (per_channel ? " per-channel(64)" : " per-tensor") << ": observe " << obs_ms
             << " ms per 6.4M values (" << 6.4e6 / obs_ms / 1e6 << " Gval/s), finalize " << fin_ms
             << " ms, clip_max " << q.clip_max);
    }
  }
}
