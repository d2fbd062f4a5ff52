// The run rules live in the library: a spec planned through tq::run_quantize
// and through the CLI gives the same artifact bytes and the same plan, and
// the report is written once, by the library, before it is published.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "taoquant/pipeline.h"
#include "taoquant/spec.h"
#include "test_data_util.h"

using namespace tqtest_data;

namespace {

std::string bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// static_ptq with no activation dtype anywhere: the library's default rule
// (int8 activations) and its note apply. The speed check is off: its
// decisions follow the machine's timings, and this compares two runs.
std::string write_spec(const std::string& dir, const std::string& out) {
  const std::string path = dir + "/" + out + ".yaml";
  std::ofstream(path) << "results_dir: " << dir << "/" << out
                      << "\nquantize:\n  backend: libtorch\n  mode: static_ptq\n"
                         "  default_layer_dtype: int8\n  model_path: "
                      << models("fmnist/cnn.pt")
                      << "\n  backend_kwargs: {latency_check: false}\n"
                         "dataset:\n  quant_calibration_dataset:\n    data_file: "
                      << models("fmnist/calib.npz")
                      << "\n    batch_size: 64\n    max_batches: 2\n"
                         "  test_dataset:\n    data_file: "
                      << models("fmnist/test.npz") << "\n    batch_size: 64\n";
  return path;
}

}  // namespace

TEST_CASE("tq::run_quantize and the CLI plan a spec alike and publish one report",
          "[e2e][static]") {
  const std::string dir = temp_dir("run_rules");
  const tq::Spec spec = tq::load_spec(write_spec(dir, "lib"));
  REQUIRE(spec.notes.size() == 1);
  CHECK_THAT(spec.notes[0], Catch::Contains("activations default to int8"));
  CHECK(spec.quantize.default_activation_dtype == tq::DType::kInt8);
  const tq::QuantizeOutcome lib = tq::run_quantize(spec);
  // The report on disk is the one the library returned: nothing rewrites it.
  CHECK(bytes(lib.report_path) == lib.report.dump(2) + "\n");
  CHECK(lib.report["notes"] == nlohmann::json(spec.notes));

  const Run cli = run_cmd(std::string(TQ_CLI) + " quantize -e " + write_spec(dir, "cli"));
  INFO(cli.out);
  REQUIRE(cli.status == 0);
  CHECK_THAT(cli.out, Catch::Contains("note:    static_ptq with no activation dtype"));
  std::ifstream in(dir + "/cli/quantize_report.json");
  const auto rep = nlohmann::json::parse(in);
  CHECK(bytes(dir + "/cli/" + tq::artifact_name("libtorch")) == bytes(lib.artifact_path));
  CHECK(rep["spec"]["quantize"] == lib.report["spec"]["quantize"]);
  CHECK(rep["notes"] == lib.report["notes"]);
  CHECK(rep["layers"] == lib.report["layers"]);
  CHECK(rep["warnings"] == lib.report["warnings"]);
  CHECK(rep["artifact"]["xxh64"] == lib.report["artifact"]["xxh64"]);

  // Native activations named explicitly: no default, and the plan itself
  // warns (inspect, dry runs and reports alike).
  const tq::Spec native =
      tq::load_spec(write_spec(dir, "native"), {"quantize.default_activation_dtype=native"});
  CHECK(native.notes.empty());
  const auto plan = tq::run_inspect(native).plan;
  REQUIRE(plan.warnings.size() == 1);
  CHECK_THAT(plan.warnings[0], Catch::StartsWith("static_ptq quantized no activation"));
}
