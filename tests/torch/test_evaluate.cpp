// tao-quant evaluate: exact top-1 against plain PyTorch (float, int8, fp8
// artifacts over the 10k Fashion-MNIST test set), --compare, data without
// labels, the artifact's qengine, and the errors.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/Parallel.h>
#include <torch/script.h>

#include "taoquant/evaluate.h"
#include "taoquant/model.h"
#include "test_data_util.h"

using Catch::Matchers::Contains;
using namespace tqtest_data;

namespace {

tq::Spec spec_in(const std::string& results, const std::string& dtype = "int8",
                 const std::vector<std::string>& overrides = {},
                 const std::string& data = models("fmnist/test.npz")) {
  return tq::parse_spec_text(fmnist_spec_text(results, dtype, data), "spec.yaml", overrides);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("evaluate's top-1 equals plain PyTorch exactly: float, int8 and fp8 over 10k images",
          "[evaluate][exact]") {
  at::set_num_threads(2);  // as eval_torch.py --threads 2
  const std::string data = models("fmnist/test.npz");
  {
    const std::string dir = temp_dir("eval-float");
    tq::EvaluateOutcome out = tq::run_evaluate(spec_in(dir));
    REQUIRE(out.models.size() == 1);
    const tq::ModelResult& m = out.models[0];
    CHECK(m.role == "float");
    CHECK(out.num_samples == 10000);
    CHECK(out.num_classes == 10);
    const int64_t want = pytorch_correct(models("fmnist/cnn.pt"), data);
    CHECK(static_cast<int64_t>(m.correct1) == want);
    REQUIRE(m.top1);
    CHECK(*m.top1 == Approx(want / 100.0));
    REQUIRE(m.top5);
    CHECK(*m.top5 >= *m.top1);
    auto j = read_json(dir + "/evaluate_report.json");
    CHECK(j["schema_version"] == tq::kEvaluateReportSchema);
    CHECK(j["metrics"]["top1_correct"].is_null());  // per-model blocks carry the counts
    CHECK(j["float"]["top1_correct"] == want);
    CHECK(j["metrics"]["num_samples"] == 10000);
    CHECK(j["metrics"]["top1"].get<double>() == Approx(want / 100.0));
    CHECK(j["metrics"]["cosine"].is_null());
  }
  for (const std::string dtype : {"int8", "fp8_e4m3fn"}) {
    INFO(dtype);
    const std::string& results = quantized_results(dtype);
    tq::EvaluateOptions opts;
    opts.is_quantized = true;
    tq::EvaluateOutcome out = tq::run_evaluate(spec_in(results, dtype), opts);
    REQUIRE(out.models.size() == 1);
    CHECK(out.models[0].role == "quantized");
    CHECK(out.models[0].path == results + "/quantized_model_libtorch.pth");
    const int64_t want = pytorch_correct(out.models[0].path, data);
    CHECK(static_cast<int64_t>(out.models[0].correct1) == want);
    CHECK(out.num_samples == 10000);
  }
}

TEST_CASE("evaluate --compare: drop, fidelity, speedup and size ratio", "[evaluate][compare]") {
  const std::string& results = quantized_results("int8");
  tq::EvaluateOptions opts;
  opts.compare = true;
  opts.write_report = false;
  auto spec = spec_in(
      results, "int8",
      {"evaluate.num_batches=4", "evaluate.latency={batch_sizes: [1, 16], warmup: 2, iters: 7}"});
  tq::EvaluateOutcome out = tq::run_evaluate(spec, opts);
  REQUIRE(out.models.size() == 2);
  const auto& f = out.models[0];
  const auto& q = out.models[1];
  CHECK(f.role == "float");
  CHECK(q.role == "quantized");
  CHECK(out.num_samples == 2000);
  REQUIRE(out.top1_drop);
  CHECK(*out.top1_drop == Approx(*f.top1 - *q.top1));
  REQUIRE(out.fidelity);
  CHECK(out.fidelity->cosine > 0.99);
  CHECK(out.fidelity->cosine <= 1.0 + 1e-12);
  CHECK(out.fidelity->sqnr_db > 20);
  CHECK(out.fidelity->max_abs_error > 0);
  CHECK(out.fidelity->mean_abs_error <= out.fidelity->max_abs_error);
  CHECK(out.fidelity->top1_agreement > 95);
  REQUIRE(out.size_ratio);
  CHECK(*out.size_ratio == Approx(static_cast<double>(q.file_bytes) / f.file_bytes));
  CHECK(*out.size_ratio < 0.5);
  REQUIRE(out.speedup.size() == 2);
  REQUIRE(f.latency.size() == 2);
  CHECK(f.latency[1].batch_size == 16);
  CHECK(f.latency[1].iters == 7);
  CHECK(f.latency[1].p90_ms >= f.latency[1].median_ms);
  CHECK(f.latency[1].throughput == Approx(16 / (f.latency[1].median_ms / 1e3)));
  CHECK(out.speedup[1] == Approx(f.latency[1].median_ms / q.latency[1].median_ms));
  CHECK(out.threads == at::get_num_threads());

  auto& m = out.report["metrics"];
  CHECK(m["top1_drop"].get<double>() == Approx(*out.top1_drop));
  CHECK(m["speedup"].contains("1"));
  CHECK(m["speedup"].contains("16"));
  CHECK(m["latency_ms"]["16"]["median"].get<double>() == Approx(q.latency[1].median_ms));
  CHECK(m["size_ratio"].get<double>() == Approx(*out.size_ratio));
  CHECK(m["top1_agreement"].get<double>() == Approx(out.fidelity->top1_agreement));

  std::string table = tq::format_evaluate_table(out);
  CHECK_THAT(table, Contains("float") && Contains("quantized") && Contains("change") &&
                        Contains(" pp") && Contains("x speedup") && Contains(" size") &&
                        Contains("cosine") && Contains("SQNR"));
}

TEST_CASE("evaluate: fidelity of a model against itself is exact", "[evaluate][compare]") {
  const std::string dir = temp_dir("eval-self");
  tq::EvaluateOptions opts;
  opts.compare = true;
  opts.checkpoint = models("fmnist/cnn.pt");
  tq::EvaluateOutcome out =
      tq::run_evaluate(spec_in(dir, "int8", {"evaluate.num_batches=2"}), opts);
  REQUIRE(out.fidelity);
  CHECK(out.fidelity->cosine == Approx(1.0).epsilon(1e-12));
  CHECK(std::isinf(out.fidelity->sqnr_db));
  CHECK(out.fidelity->max_abs_error == 0);
  CHECK(out.fidelity->top1_agreement == 100);
  CHECK(*out.top1_drop == 0);
  CHECK(out.report["metrics"]["sqnr_db"].is_null());  // JSON has no infinity
}

TEST_CASE("evaluate without labels: fidelity and latency only", "[evaluate][labels]") {
  const std::string& results = quantized_results("int8");
  tq::EvaluateOptions opts;
  opts.compare = true;
  opts.write_report = false;
  auto spec = spec_in(results, "int8", {"evaluate.latency={batch_sizes: [4], warmup: 1, iters: 3}"},
                      fixture("nolabels.npz"));
  tq::EvaluateOutcome out = tq::run_evaluate(spec, opts);
  CHECK_FALSE(out.has_labels);
  CHECK_FALSE(out.models[0].top1);
  CHECK_FALSE(out.models[1].top1);
  REQUIRE(out.fidelity);
  CHECK(out.fidelity->cosine > 0.9);
  CHECK(out.speedup.size() == 1);
  CHECK(out.report["metrics"]["top1"].is_null());
  CHECK(out.report["metrics"]["top5"].is_null());
  REQUIRE_FALSE(out.notes.empty());
  CHECK_THAT(out.notes[0], Contains("no labels"));
  // A gate that needs labels cannot be checked: a spec error at the gate.
  auto g = spec_in(results, "int8", {"evaluate.gates={min_top1: 50}"}, fixture("nolabels.npz"));
  auto e = catch_error([&] { tq::run_evaluate(g, opts); });
  CHECK(e.code == tq::ExitCode::kUsage);
  CHECK_THAT(e.msg, Contains("evaluate.gates.min_top1 needs labels"));
}

TEST_CASE("evaluate: a model whose outputs do not fit the labels is a clear error",
          "[evaluate][errors]") {
  const std::string dir = temp_dir("eval-mismatch");
  auto e =
      catch_error([&] { tq::run_evaluate(spec_in(dir, "int8", {}, fixture("mismatch.npz"))); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  // The first label out of range (the labels are 0..12), the file and the range.
  CHECK_THAT(e.msg, Contains("cnn.pt'") && Contains("mismatch.npz") &&
                        Contains("label 10 at sample 10 is out of range") &&
                        Contains("the model has 10 outputs, so labels are 0..9"));
  // Image folders: more class folders than model outputs.
  const std::string imgs = temp_dir("eval-mismatch-img");
  for (int c = 0; c < 12; ++c) {
    const std::string d = imgs + "/c" + (c < 10 ? "0" : "") + std::to_string(c);
    fs::create_directories(d);
    fs::copy_file(models("fmnist/test_png/0_tshirt_top/00019.png"), d + "/a.png");
  }
  auto s =
      spec_in(dir, "int8",
              {"dataset.test_dataset.data_file=null", "dataset.test_dataset.images_dir=" + imgs,
               "dataset.test_dataset.preprocess={color: gray}"});
  e = catch_error([&] { tq::run_evaluate(s); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("12 classes") && Contains("outputs 10 classes"));
}

TEST_CASE("evaluate: data that does not fit the model's input", "[evaluate][errors]") {
  const std::string dir = temp_dir("eval-shape");
  auto e = catch_error([&] { tq::run_evaluate(spec_in(dir, "int8", {}, fixture("f32.npz"))); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("the model's forward failed on the test data (shape [1,2,3,4])") &&
                        Contains("hint: the data's shape does not fit the model's input: its "
                                 "first layer 'features.conv1' Conv2d expects 1 input channels"));
}

TEST_CASE("evaluate: which model, missing pieces", "[evaluate][errors]") {
  const std::string dir = temp_dir("eval-missing");
  tq::EvaluateOptions q;
  q.is_quantized = true;
  auto e = catch_error([&] { tq::run_evaluate(spec_in(dir), q); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains(dir + "/quantized_model_libtorch.pth") && Contains("does not exist") &&
                        Contains("tao-quant quantize"));
  auto no_data = tq::parse_spec_text(
      "results_dir: " + dir + "\nquantize:\n  model_path: " + models("fmnist/cnn.pt") + "\n",
      "spec.yaml");
  e = catch_error([&] { tq::run_evaluate(no_data); });
  CHECK(e.code == tq::ExitCode::kUsage);
  CHECK_THAT(e.msg, Contains("dataset.test_dataset") && Contains("data_file"));
  // --checkpoint wins over quantize.model_path.
  tq::EvaluateOptions c;
  c.checkpoint = dir + "/nope.pt";
  e = catch_error([&] { tq::run_evaluate(spec_in(dir), c); });
  CHECK_THAT(e.msg, Contains("nope.pt") && Contains("--checkpoint"));
}

TEST_CASE("evaluate sets the qengine an artifact names", "[evaluate][qengine]") {
  const std::string dir = temp_dir("eval-qengine");
  auto model = torch::jit::load(models("fmnist/cnn.pt"));
  const auto before = at::globalContext().qEngine();
  const auto& supported = at::globalContext().supportedQEngines();
  for (const auto& [name, engine] :
       {std::pair<std::string, at::QEngine>{"qnnpack", at::QEngine::QNNPACK},
        {"fbgemm", at::QEngine::FBGEMM}}) {
    if (std::find(supported.begin(), supported.end(), engine) == supported.end()) continue;
    INFO(name);
    const std::string path = dir + "/" + name + ".pth";
    tq::save_module_atomic(
        model, path,
        {{"tao_quant_meta.json", R"({"backend_meta": {"engine": ")" + name + R"("}})"}});
    tq::EvaluateOptions opts;
    opts.is_quantized = true;
    opts.checkpoint = path;
    auto out = tq::run_evaluate(spec_in(dir, "int8", {"evaluate.num_batches=1"}), opts);
    CHECK(out.models[0].qengine == name);
    CHECK(at::globalContext().qEngine() == engine);
    CHECK(out.report["quantized"]["qengine"] == name);
  }
  const std::string bad = dir + "/bad.pth";
  tq::save_module_atomic(model, bad,
                         {{"tao_quant_meta.json", R"({"backend_meta": {"engine": "warp9"}})"}});
  tq::EvaluateOptions opts;
  opts.is_quantized = true;
  opts.checkpoint = bad;
  auto e = catch_error([&] { tq::run_evaluate(spec_in(dir), opts); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("'warp9' quantized engine") && Contains("supported:"));
  at::globalContext().setQEngine(before);
}
