// Quality gates through the tao-quant binary: each gate passes once and
// fails once (exit code 3, the gate named with its value and limit); the
// --compare table; exit code 1 for a class-count mismatch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "test_data_util.h"

using Catch::Matchers::Contains;
using namespace tqtest_data;

namespace {

std::string write_spec(const std::string& results,
                       const std::string& data = models("fmnist/test.npz")) {
  const std::string path = results + "/spec.yaml";
  write_text(path, fmnist_spec_text(results, "int8", data));
  return path;
}

Run cli(const std::string& spec, const std::string& args) {
  return run_cmd(std::string(TQ_CLI) + " evaluate -e " + spec + " " + args);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::string g6(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Keeps the runs short: 4 batches of 500, a small latency run.
const std::string kQuick =
    "evaluate.num_batches=4 'evaluate.latency={batch_sizes: [1, 8], warmup: 2, iters: 9}' "
    "--is-quantized";

}  // namespace

TEST_CASE("gates: each passes once and fails once, via the CLI", "[evaluate][gates][cli]") {
  const std::string& results = quantized_results("int8");
  const std::string spec = write_spec(results);

  // Measure once (no gates) to place the limits around the real values.
  Run m = cli(spec, kQuick + " --compare --json");
  REQUIRE(m.status == 0);
  auto j = read_json(results + "/evaluate_report.json");
  const auto& mt = j["metrics"];
  const double drop = mt.at("top1_drop"), top1 = mt.at("top1"), cosine = mt.at("cosine"),
               agree = mt.at("top1_agreement"), ratio = mt.at("size_ratio");
  const double sqnr = mt.at("sqnr_db").is_null() ? INFINITY : mt.at("sqnr_db").get<double>();
  const double speed1 = mt.at("speedup").at("1"), speed8 = mt.at("speedup").at("8");
  const double speed = std::min(speed1, speed8);
  REQUIRE(std::isfinite(sqnr));
  REQUIRE(agree < 100);  // int8 changes a few argmaxes: the agreement gate can fail

  // All pass together.
  const std::string pass =
      "'evaluate.gates={max_top1_drop: " + g6(drop + 0.5) + ", min_top1: " + g6(top1 - 1) +
      ", min_cosine: " + g6(cosine - 0.001) + ", min_sqnr_db: " + g6(sqnr - 1) +
      ", min_top1_agreement: " + g6(agree - 1) + ", min_speedup: " + g6(speed / 100) +
      ", max_size_ratio: " + g6(ratio + 0.01) + "}'";
  Run ok = cli(spec, kQuick + " " + pass);
  INFO(ok.out);
  CHECK(ok.status == 0);
  for (const char* g :
       {"max_top1_drop", "min_top1", "min_cosine", "min_sqnr_db", "min_top1_agreement",
        "min_speedup (batch 1)", "min_speedup (batch 8)", "max_size_ratio"})
    CHECK_THAT(ok.out, Contains(std::string("PASS ") + g));
  CHECK_THAT(ok.out, !Contains("FAIL"));
  auto jp = read_json(results + "/evaluate_report.json");
  CHECK(jp["gates"]["passed"] == true);
  CHECK(jp["gates"]["results"].size() == 8);

  // Each fails alone: exit 3, named with the measured value and the limit.
  struct Fail {
    std::string gate, limit, op;
  };
  const std::vector<Fail> fails = {
      {"max_top1_drop", g6(drop - 0.5), "<="},
      {"min_top1", g6(top1 + 1), ">="},
      {"min_cosine", g6(std::min(1.0, cosine + (1 - cosine) / 2) + 1e-9), ">="},
      {"min_sqnr_db", g6(sqnr + 5), ">="},
      // Limits stay in the gate's range ([0, 100]): a limit past it is a spec error.
      {"min_top1_agreement", g6(std::min(100.0, agree + 0.5)), ">="},
      {"min_speedup", g6(speed * 100), ">="},
      {"max_size_ratio", g6(ratio / 2), "<="},
  };
  for (const auto& f : fails) {
    Run r = cli(spec, kQuick + " 'evaluate.gates={" + f.gate + ": " + f.limit + "}'");
    INFO(f.gate << " limit " << f.limit << "\n" << r.out);
    CHECK(r.status == 3);
    CHECK_THAT(r.out, Contains("quality gate") && Contains("failed") && Contains(f.gate) &&
                          Contains("measured ") && Contains("limit " + f.op + " " + f.limit));
    CHECK_THAT(r.out, Contains("FAIL " + f.gate));
    auto jf = read_json(results + "/evaluate_report.json");
    CHECK(jf["gates"]["passed"] == false);
  }
}

TEST_CASE("CLI: --compare table and exit codes", "[evaluate][cli]") {
  const std::string& results = quantized_results("int8");
  const std::string spec = write_spec(results);
  Run r = cli(spec, kQuick + " --compare");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("metric") && Contains("float") && Contains("quantized") &&
                        Contains("change") && Contains("top-1 (%)") && Contains(" pp") &&
                        Contains("x speedup") && Contains(" size") && Contains("cosine") &&
                        Contains("evaluate_report.json"));

  // A class-count mismatch: exit 1 with the reason.
  const std::string dir = temp_dir("cli-mismatch");
  const std::string bad = write_spec(dir, fixture("mismatch.npz"));
  Run e = run_cmd(std::string(TQ_CLI) + " evaluate -e " + bad);
  CHECK(e.status == 1);
  CHECK_THAT(e.out, Contains("the model has 10 outputs") && Contains("label 10 at sample 10"));
  // A bad override: exit 2.
  Run u = cli(spec, "evaluate.batch_size=0");
  CHECK(u.status == 2);
  // --help lists the command and the exit codes.
  Run h = run_cmd(std::string(TQ_CLI) + " --help");
  CHECK_THAT(h.out, Contains("evaluate") && Contains("3  a quality gate failed"));
}
