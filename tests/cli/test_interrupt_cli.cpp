// Issue 30, item 6: an interrupted run leaves a consistent result. A static
// tune killed (SIGKILL) right after it kept its first real run leaves a
// tuned_spec.yaml that rebuilds the kept artifact byte for byte; SIGINT and
// SIGTERM end tune, quantize and batch at the next safe point with exit
// 130 / 143, the best (or earlier) pair in place and no temporary file or
// .tune folder. The signals are sent once the process catches them (its
// SigCgt mask) or once a file shows how far it got: no sleeps.
#include <catch2/catch.hpp>

#include "reliability_util.h"

using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Static int8 tune of the trained CNN whose first real runs fail the gates
// (no int8 model is 1000x faster), so that it runs more real steps after
// the first one is kept.
std::string slow_tune_spec(const tqtest::TempDir& dir) {
  return tqtest::fmnist_spec(dir, tqtest::fmnist() + "/cnn.pt",
                             "  mode: static_ptq\n  default_layer_dtype: int8\n"
                             "  tune: {formats: [int8, native], "
                             "min_sqnr_db: 0, min_speedup: 1000}\n");
}

// quantize -e tuned_spec.yaml gives the kept artifact's bytes.
void check_rebuild(const fs::path& out) {
  const fs::path art = out / "quantized_model_libtorch.pth";
  const std::string kept = tqtest::file_bytes(art);
  REQUIRE_FALSE(kept.empty());
  const auto r = tqtest::tao("quantize -e " + tqtest::quote((out / "tuned_spec.yaml").string()) +
                             " --no-html");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(tqtest::file_bytes(art) == kept);
}

}  // namespace

TEST_CASE("tune killed after its first real run: tuned_spec.yaml rebuilds the artifact",
          "[cli][tune][interrupt]") {
  tqtest::TempDir dir("tune_kill");
  const fs::path out = dir.path() / "out";
  tqtest::Background tune("tune -e " + tqtest::quote(slow_tune_spec(dir)),
                          (dir.path() / "log").string());
  REQUIRE(tune.wait_file(out / "tuned_spec.yaml"));
  tune.signal(SIGKILL);
  CHECK(tune.wait() == -SIGKILL);
  INFO(tqtest::file_bytes(dir.path() / "log"));
  const json rep = tqtest::read_json((out / "quantize_report.json").string());
  CHECK(rep["tune"]["status"] == "searching");
  check_rebuild(out);
}

TEST_CASE("tune: SIGINT after the first real run exits 130 with the best pair, cleaned up",
          "[cli][tune][interrupt]") {
  tqtest::TempDir dir("tune_sigint");
  const fs::path out = dir.path() / "out";
  tqtest::Background tune("tune -e " + tqtest::quote(slow_tune_spec(dir)),
                          (dir.path() / "log").string());
  REQUIRE(tune.wait_file(out / "tuned_spec.yaml"));
  tune.signal(SIGINT);
  const int rc = tune.wait();
  const std::string log = tqtest::file_bytes(dir.path() / "log");
  INFO(log);
  CHECK(rc == 130);
  CHECK_THAT(log, Contains("interrupted"));
  CHECK(tqtest::leftovers(out).empty());
  const json rep = tqtest::read_json((out / "quantize_report.json").string());
  CHECK(rep["tune"]["status"] == "interrupted");
  CHECK(rep["tune"]["trace"].size() >= 1);
  // The pair is complete: evaluate accepts it.
  const auto e = tqtest::tao("evaluate -e " + tqtest::quote((out / "tuned_spec.yaml").string()) +
                             " --is-quantized --no-html");
  INFO(e.out);
  CHECK(e.rc == 0);
  check_rebuild(out);
}

TEST_CASE("quantize: SIGTERM exits 143 and keeps the earlier pair, batch: SIGINT exits 130",
          "[cli][interrupt]") {
  tqtest::TempDir dir("quantize_sigterm");
  const fs::path out = dir.path() / "out";
  const std::string spec =
      tqtest::fmnist_spec(dir, tqtest::fmnist() + "/cnn.pt",
                          "  mode: static_ptq\n  default_layer_dtype: int8\n  sensitivity: false\n"
                          "  backend_kwargs: {latency_check: false}\n");
  REQUIRE(tqtest::tao("quantize -e " + tqtest::quote(spec) + " --no-html").rc == 0);
  const fs::path art = out / "quantized_model_libtorch.pth", rep = out / "quantize_report.json";
  const std::string art_before = tqtest::file_bytes(art), rep_before = tqtest::file_bytes(rep);
  {
    tqtest::Background q("quantize -e " + tqtest::quote(spec) +
                             " --no-html quantize.algorithm=entropy quantize.bias_correction=true",
                         (dir.path() / "qlog").string());
    REQUIRE(q.wait_catches(SIGTERM));
    q.signal(SIGTERM);
    const int rc = q.wait();
    INFO(tqtest::file_bytes(dir.path() / "qlog"));
    CHECK(rc == 143);
  }
  CHECK(tqtest::file_bytes(art) == art_before);
  CHECK(tqtest::file_bytes(rep) == rep_before);
  CHECK(tqtest::leftovers(out).empty());

  const std::string manifest = dir.write(
      "manifest.yaml", "jobs:\n  - {id: a, spec: " + spec + "}\n  - {id: b, spec: " + spec + "}\n");
  tqtest::Background b(
      "batch " + tqtest::quote(manifest) + " -o " + tqtest::quote((dir.path() / "batch").string()),
      (dir.path() / "blog").string());
  REQUIRE(b.wait_catches(SIGINT));
  b.signal(SIGINT);
  const int rc = b.wait();
  INFO(tqtest::file_bytes(dir.path() / "blog"));
  CHECK(rc == 130);
  const json summary = tqtest::read_json((dir.path() / "batch" / "batch_summary.json").string());
  CHECK_THAT(summary.dump(), Contains("interrupted"));
}
