// Artifacts run wherever the float model runs: a model that returns a
// NamedTuple (like scripted GoogLeNet), a dict or nested tuples gets an
// artifact, in every mode, that plain LibTorch and Python's torch.jit.load
// load and run, returning the float model's type (issue 14).
#include <torch/script.h>

#include <catch2/catch.hpp>

#include "../../lib/src/torch/artifact_checks.h"
#include "taoquant/model.h"
#include "test_data_util.h"

using namespace tqtest_data;
using Catch::Matchers::Contains;

namespace {

const char* const kModes[] = {"static_ptq", "dynamic_ptq", "weight_only_ptq"};

tq::QuantizeOutcome quantize(const std::string& model, const std::string& mode,
                             const std::string& dir) {
  const std::string yaml = "quantize:\n  backend: libtorch\n  mode: " + mode +
                           "\n  default_layer_dtype: int8\n  model_path: " + fixture(model) +
                           "\n  results_dir: " + dir +
                           (mode == "static_ptq" ? "\n  default_activation_dtype: int8"
                                                   "\n  backend_kwargs: {latency_check: false}"
                                                 : "") +
                           "\n  sensitivity: false\n"
                           "dataset:\n  quant_calibration_dataset:\n    data_file: " +
                           fixture("nolabels.npz") + "\n    batch_size: 4\n";
  return tq::run_quantize(spec_of(yaml));
}

std::string output_type(torch::jit::Module& m) {
  torch::NoGradGuard g;
  return m.forward({torch::randn({2, 1, 28, 28})}).type()->annotation_str();
}

}  // namespace

TEST_CASE("artifacts return the float model's NamedTuple, dict or nested tuple in every mode",
          "[e2e][artifact]") {
  const std::string root = temp_dir("artifact-types");
  size_t written = 0;
  for (const std::string model : {"named_out.pt", "dict_out.pt", "nested_out.pt"}) {
    auto float_model = torch::jit::load(fixture(model));
    const std::string want = tq::forward_return_type(float_model);
    const std::string want_value = output_type(float_model);
    for (const std::string mode : kModes) {
      INFO(model << " " << mode);
      const std::string dir = root + "/" + fs::path(model).stem().string() + "-" + mode;
      auto out = quantize(model, mode, dir);
      INFO(out.report["layers"].dump());
      CHECK(std::count_if(out.layers.begin(), out.layers.end(),
                          [](const tq::LayerResult& r) { return !r.kept_float; }) >= 1);
      auto q = torch::jit::load(out.artifact_path);
      CHECK(tq::forward_return_type(q) == want);
      CHECK(output_type(q) == want_value);
      ++written;
    }
  }
  CHECK(written == 9);
  // The same artifacts, loaded and run by Python's torch.jit.load.
  Run r =
      run_cmd(std::string(kPython) + " " + TQ_SOURCE_DIR + "/scripts/check_artifacts.py " + root);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("9 of 9 artifacts run in PyTorch"));
  CHECK_THAT(r.out, Contains("Heads(logits: Tensor float32 [2, 10], features: Tensor float32"));
  CHECK_THAT(r.out, Contains("aux: None)"));
}

TEST_CASE("an artifact with another return type than the float model is not published",
          "[e2e][artifact]") {
  const std::string dir = temp_dir("artifact-check");
  auto named = torch::jit::load(fixture("named_out.pt"));
  named.save(dir + "/named.pt");
  // The dict model's file stands in for a broken artifact of the NamedTuple model.
  try {
    tq::check_artifact_loads(fixture("dict_out.pt"), tq::forward_return_type(named), "libtorch");
    FAIL("accepted");
  } catch (const tq::RuntimeError& e) {
    CHECK_THAT(e.what(), Contains("returns Dict[str, Tensor] where the float model returns"));
    CHECK_THAT(e.what(), Contains("Heads"));
    CHECK_THAT(e.what(), Contains("it was not published"));
  }
  {
    std::ofstream f(dir + "/truncated.pth", std::ios::binary);
    f << "PK\x03\x04 not a whole archive";
  }
  try {
    tq::check_artifact_loads(dir + "/truncated.pth", "Tensor", "libtorch");
    FAIL("accepted");
  } catch (const tq::RuntimeError& e) {
    CHECK_THAT(e.what(), Contains("does not load in LibTorch"));
  }
  CHECK_NOTHROW(tq::check_artifact_loads(dir + "/named.pt", tq::forward_return_type(named), "x"));
}

// A deployment runs batch 1, then a batch, then 1 again in one process
// (LibTorch 1.13's onednn int8 convolutions fail such a change on some
// models, issue 31): the check finds an artifact that fails it, names the
// line of its code that failed, and says nothing of one that runs or takes
// a fixed batch size only; publishing refuses the first.
TEST_CASE("an artifact that fails when the batch size changes is found", "[artifact]") {
  const fs::path dir = temp_dir("batch_change");
  auto save = [&](const std::string& name, const std::string& body) {
    torch::jit::Module m("m");
    m.register_attribute("seen", c10::IntType::get(), 0);
    m.define("def forward(self, x):\n" + body + "    return x * 2.0 + y.sum()\n");
    const std::string path = (dir / name).string();
    m.save(path);
    return path;
  };
  // Remembers the first batch size it ran and refuses another, as a kernel
  // that packed its weights for one shape would.
  const std::string sticky = save("sticky.pt",
                                  "    if self.seen == 0:\n        self.seen = x.size(0)\n"
                                  "    y = torch.zeros([self.seen]).view([x.size(0)])\n");
  const std::string plain = save("plain.pt", "    y = torch.zeros([1])\n");
  const std::string fixed = save("fixed.pt", "    y = torch.zeros([4]).view([x.size(0)])\n");
  const std::vector<at::Tensor> holdout = {torch::randn({4, 3})};
  const std::string p = tq::batch_change_problem(sticky, holdout);
  CHECK_THAT(p, Contains("fails when the batch size changes (batch 1, 4, then 1") &&
                    Contains("failed at batch 4") && Contains("is invalid for input of size 1"));
  CHECK(tq::batch_change_problem(plain, holdout).empty());
  CHECK(tq::batch_change_problem(fixed, holdout).empty());
  CHECK(tq::batch_change_problem(plain, {torch::randn({1, 3})}).empty());  // nothing to change
  CHECK_THAT(p, Contains("in `y = torch.view(torch.zeros("));
  CHECK_NOTHROW(tq::check_artifact_finite(sticky, holdout, "libtorch"));  // finite
  // Publishing refuses it (exit 1) and removes it; one that runs stays.
  try {
    tq::check_batch_change(sticky, holdout, "libtorch");
    FAIL("published");
  } catch (const tq::RuntimeError& e) {
    CHECK_THAT(e.what(), Contains("fails when the batch size changes") &&
                             Contains("it was not published") && Contains("skip_names"));
  }
  CHECK_FALSE(fs::exists(sticky));
  CHECK_NOTHROW(tq::check_batch_change(plain, holdout, "libtorch"));
  CHECK(fs::exists(plain));
}
