// The artifact and its report are one result (lib/include/taoquant/result_files.h).
// A quantize run killed at each rename (strace's syscall fault injection,
// SIGKILL), or failing with ENOSPC on each write and fsync, leaves in its
// results_dir the earlier complete pair, the new complete pair, or a pair
// that `evaluate` refuses with a message; never a half-written file under a
// final name. The runs are weight-only on the trained CNN (about a second).
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "../torch/plugin_test_util.h"

using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModels = TQ_MODELS_DIR;

std::string spec_in(const tqtest::TempDir& dir) {
  return dir.write("spec.yaml",
                   "results_dir: " + (dir.path() / "out").string() +
                       "\nquantize:\n  backend: libtorch\n  mode: weight_only_ptq\n"
                       "  default_layer_dtype: int8\n  sensitivity: false\n"
                       "  model_path: " +
                       kModels +
                       "/fmnist/cnn.pt\ndataset:\n  test_dataset:\n    data_file: " + kModels +
                       "/fmnist/test.npz\n    batch_size: 200\n"
                       "evaluate:\n  num_batches: 1\n");
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// What is under the final names: the artifact's bytes, and the report's
// text and the artifact fingerprint it records. Two runs of one spec give
// the same artifact and fingerprint (their reports differ in timings).
struct Pair {
  std::string artifact, report, fingerprint;
  bool operator==(const Pair& o) const {
    return artifact == o.artifact && fingerprint == o.fingerprint;
  }
};

Pair pair_in(const fs::path& out) {
  Pair p{bytes_of(out / "quantized_model_libtorch.pth"), bytes_of(out / "quantize_report.json"),
         ""};
  try {
    p.fingerprint = json::parse(p.report).at("artifact").at("xxh64").get<std::string>();
  } catch (const std::exception&) {
    p.fingerprint = "(no fingerprint)";
  }
  return p;
}

// What a reader sees: "complete" (evaluate accepts the pair) or
// "incomplete" (evaluate refuses it, saying so); anything else fails.
std::string reader_verdict(const std::string& spec) {
  const auto e = tqtest::run_cmd(tqtest::cli() + " -q evaluate -e " + tqtest::quote(spec) +
                                 " --is-quantized --no-html");
  INFO(e.out);
  if (e.rc == 0) return "complete";
  CHECK(e.rc == 1);
  CHECK_THAT(e.out, Contains("incomplete result"));
  return "incomplete";
}

// tao-quant under strace with one fault injected (`inject`: strace's
// -e inject= value for the syscalls in `calls`).
tqtest::CmdResult quantize_with_fault(const std::string& spec, const std::string& calls,
                                      const std::string& inject, const std::string& dtype) {
  return tqtest::run_cmd("strace -f -qq -o /dev/null -e trace=" + calls + " -e inject=" + calls +
                         ":" + inject + " " + tqtest::cli() + " -q quantize -e " +
                         tqtest::quote(spec) + " quantize.default_layer_dtype=" + dtype);
}

bool have_strace() {
  if (tqtest::run_cmd("strace -V").rc == 0) return true;
  WARN("strace not installed (scripts/setup.sh installs it): fault injection skipped");
  return false;
}

}  // namespace

TEST_CASE("result pair: SIGKILL at each rename leaves the old pair, the new one, or a refused one",
          "[cli][atomic]") {
  if (!have_strace()) return;
  tqtest::TempDir dir("pair_kill");
  const std::string spec = spec_in(dir);
  const fs::path out = dir.path() / "out";
  REQUIRE(tqtest::run_cmd(tqtest::cli() + " -q quantize -e " + tqtest::quote(spec)).rc == 0);
  const Pair old = pair_in(out);
  std::set<std::string> seen;
  int n = 1;
  for (; n <= 12; ++n) {
    INFO("kill at rename " << n);
    const auto r = quantize_with_fault(spec, "rename,renameat,renameat2",
                                       "signal=KILL:when=" + std::to_string(n), "int4");
    const std::string verdict = reader_verdict(spec);
    const Pair now = pair_in(out);
    if (verdict == "complete" && now == old) seen.insert("old");
    if (verdict == "complete" && !(now == old)) seen.insert("new");
    if (verdict == "incomplete") {
      seen.insert("incomplete");
      CHECK(now.artifact == old.artifact);  // the new report landed first
    }
    // Whatever is under a final name is whole: the report parses, the
    // artifact is either one that was completely written.
    CHECK_NOTHROW(json::parse(now.report));
    if (r.rc == 0) break;  // fewer renames than n: the run finished
    CHECK(r.rc != 1);      // killed, not failed
    // Back to the old pair for the next kill.
    REQUIRE(tqtest::run_cmd(tqtest::cli() + " -q quantize -e " + tqtest::quote(spec)).rc == 0);
    REQUIRE(pair_in(out) == old);
  }
  CHECK(n > 2);    // the run renames at least the report and the artifact
  CHECK(n <= 12);  // and it finished once the kills ran out
  CHECK(seen.count("old"));
  CHECK(seen.count("incomplete"));  // killed between the report and the artifact
  CHECK(seen.count("new"));
}

TEST_CASE("result pair: ENOSPC on each write or fsync keeps the old pair or makes the new one",
          "[cli][atomic]") {
  if (!have_strace()) return;
  tqtest::TempDir dir("pair_enospc");
  const std::string spec = spec_in(dir);
  const fs::path out = dir.path() / "out";
  REQUIRE(tqtest::run_cmd(tqtest::cli() + " -q quantize -e " + tqtest::quote(spec)).rc == 0);
  const Pair old = pair_in(out);
  // How many writes and fsyncs a run makes (a traced run without a fault).
  // strace counts each syscall apart, so each is failed in its own loop.
  const std::string trace = (dir.path() / "trace.txt").string();
  REQUIRE(tqtest::run_cmd("strace -f -qq -o " + trace + " -e trace=write,fsync " + tqtest::cli() +
                          " -q quantize -e " + tqtest::quote(spec) +
                          " quantize.default_layer_dtype=int4")
              .rc == 0);
  REQUIRE(tqtest::run_cmd(tqtest::cli() + " -q quantize -e " + tqtest::quote(spec)).rc == 0);
  std::map<std::string, int> calls;
  std::ifstream in(trace);
  for (std::string line; std::getline(in, line);)
    for (const char* c : {"write", "fsync"})
      calls[c] += line.find(std::string(" ") + c + "(") != std::string::npos;
  REQUIRE(calls["write"] >= 2);  // the artifact and the report, at least
  REQUIRE(calls["fsync"] >= 3);
  REQUIRE(calls["write"] + calls["fsync"] <= 200);
  size_t failed = 0, kept_old = 0;
  for (const auto& [call, count] : calls)
    for (int n = 1; n <= count; ++n) {
      INFO("ENOSPC at " << call << " " << n << " of " << count);
      const auto r =
          quantize_with_fault(spec, call, "error=ENOSPC:when=" + std::to_string(n), "int4");
      INFO(r.out);
      CHECK(reader_verdict(spec) == "complete");  // never an incomplete pair
      const Pair now = pair_in(out);
      if (r.rc != 0) {
        ++failed;
        CHECK(r.rc == 1);
        CHECK_THAT(r.out, Contains("No space left on device"));
        kept_old += now == old;
      }
      if (!(now == old))  // back to the old pair for the next fault
        REQUIRE(tqtest::run_cmd(tqtest::cli() + " -q quantize -e " + tqtest::quote(spec)).rc == 0);
    }
  CHECK(failed >= 4);    // the artifact's write and fsync, the report's write and fsync
  CHECK(kept_old >= 4);  // and each of those keeps the earlier pair
  // No temporary file is left behind by a failed run.
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    INFO(name);
    CHECK(name.find(".tmp") == std::string::npos);
    CHECK(name.find(".partial") == std::string::npos);
  }
}
