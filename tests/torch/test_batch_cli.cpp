// `tao-quant batch` and `tao-quant report merge` with the real binary on the
// Fashion-MNIST CNN: isolation of a truncated model and a hanging job,
// JUnit, kill + --resume, shards + merge, evaluate metrics and gates, and the
// command-line errors.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "taoquant/json.h"

#include "../unit/batch_junit.h"
#include "../unit/batch_test_util.h"

using Catch::Matchers::Contains;
using nlohmann::json;
using tqtest::ScratchDir;
using tqtest::slurp;
using tqtest::write;
namespace fs = std::filesystem;

namespace {

const std::string kCnn = std::string(TQ_MODELS_DIR) + "/fmnist/cnn.pt";
const std::string kDemo = std::string(TQ_SOURCE_DIR) + "/specs/demo/";

// Runs the CLI in `dir` (stdout+stderr to dir/cli.txt); the exit code.
int cli(const ScratchDir& d, const std::string& args, const std::string& env = "") {
  const std::string cmd = "cd " + d.str() + " && env -u CI " + env + " " + TQ_CLI + " " + args +
                          " > " + (d / "cli.txt") + " 2>&1";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Three good weight-only jobs on the CNN (int8, int4, fp8).
std::string good_jobs() {
  return "  - template: " + kDemo + "fmnist_cnn_int8.yaml\n    models: " + kCnn +
         "\n    id: cnn-int8\n"
         "  - template: " +
         kDemo + "fmnist_cnn_int4.yaml\n    models: " + kCnn +
         "\n    id: cnn-int4\n"
         "  - template: " +
         kDemo + "fmnist_cnn_fp8.yaml\n    models: " + kCnn + "\n    id: cnn-fp8\n";
}

json read_json(const std::string& path) {
  return json::parse(slurp(path));
}

// The summary without what differs from run to run (timings).
json comparable(json s) {
  s.erase("wall_s");
  for (auto& j : s["jobs"]) {
    j.erase("duration_s");
    j.erase("resumed");
  }
  return s;
}

// Whether a running process has `text` in its command line (/proc).
bool process_mentions(const std::string& text) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(text) != std::string::npos) return true;
  }
  return false;
}

bool evaluate_available() {
  const std::string cmd = std::string(TQ_CLI) + " evaluate --help > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

TEST_CASE("batch CLI: a truncated model and a hanging job fail alone", "[batch][cli]") {
  ScratchDir d("batch-cli");
  // Truncated: the first 64 KiB of the CNN (a zip without its directory).
  const std::string full = slurp(kCnn);
  write(d / "truncated.pt", full.substr(0, 65536));
  // Hangs: a model whose forward never returns, calibrated in static mode
  // (a FIFO as the model, which blocked forever, is refused since issue 30).
  write(d / "looping.py",
        "import sys, torch\n"
        "class Looping(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(784, 10)\n"
        "    def forward(self, x):\n"
        "        while bool(x.sum() == x.sum()):\n"
        "            x = x * 1.0\n"
        "        return self.fc(x.flatten(1))\n"
        "torch.jit.script(Looping()).save(sys.argv[1])\n");
  REQUIRE(std::system(("/usr/bin/python3 " + (d / "looping.py") + " " + (d / "hang.pt")).c_str()) ==
          0);
  // Only the hanging job has a short time limit (its own `timeout:`, which
  // wins over --timeout): it never ends whatever the CPU speed. The jobs
  // that must finish get a limit no loaded machine reaches.
  write(d / "manifest.yaml",
        "jobs:\n" + good_jobs() + "  - template: " + kDemo +
            "fmnist_cnn_int8.yaml\n    models: truncated.pt\n    id: bad-{stem}\n"
            "  - template: " +
            kDemo +
            "fmnist_cnn_int8.yaml\n    models: hang.pt\n    id: bad-{stem}\n"
            "    timeout: 5\n    overrides: [quantize.mode=static_ptq, "
            "dataset.quant_calibration_dataset.data_file=" +
            std::string(TQ_MODELS_DIR) + "/fmnist/calib.npz]\n");

  const int rc =
      cli(d, "batch manifest.yaml --jobs 2 --keep-going --timeout 1800 -o out --junit junit.xml");
  const std::string out = slurp(d / "cli.txt");
  INFO(out);
  CHECK(rc == 1);

  const json s = read_json(d / "out/batch_summary.json");
  CHECK(s["totals"]["jobs"] == 5);
  CHECK(s["totals"]["passed"] == 3);
  CHECK(s["totals"]["failed"] == 2);
  std::map<std::string, json> jobs;
  for (const auto& j : s["jobs"]) jobs[j["id"].get<std::string>()] = j;
  for (const char* id : {"cnn-int8", "cnn-int4", "cnn-fp8"}) {
    INFO(id);
    CHECK(jobs[id]["status"] == "passed");
    CHECK(jobs[id]["backend"] == "libtorch");
    CHECK(jobs[id]["mode"] == "weight_only_ptq");
    CHECK(jobs[id]["size_ratio"].get<double>() < 0.5);
    CHECK(fs::exists(d / ("out/" + std::string(id) + "/quantized_model_libtorch.pth")));
  }
  CHECK(jobs["cnn-int4"]["size_ratio"].get<double>() <
        jobs["cnn-int8"]["size_ratio"].get<double>());

  const json& trunc = jobs["bad-truncated"];
  CHECK(trunc["status"] == "failed");
  CHECK(trunc["failure"] == "exit");
  CHECK(trunc["exit_code"] == 1);
  CHECK_THAT(trunc["message"].get<std::string>(), Contains("cannot load model"));
  CHECK_THAT(trunc["message"].get<std::string>(), Contains("truncated.pt"));
  CHECK_FALSE(trunc["log_tail"].empty());

  const json& hang = jobs["bad-hang"];
  CHECK(hang["status"] == "failed");
  CHECK(hang["failure"] == "timeout");
  // SIGTERM ends it: quantize catches it and exits 143 at its next safe
  // point; a forward that never returns reaches none, and the runner's
  // SIGKILL after the grace period ends it.
  CHECK((hang["exit_code"] == 128 + SIGTERM || hang["signal"] == SIGTERM ||
         hang["signal"] == SIGKILL));
  CHECK_THAT(hang["message"].get<std::string>(), Contains("timed out after 5 s in quantize"));
  CHECK(hang["duration_s"].get<double>() >= 4.5);  // stopped by its 5 s limit, not before

  // JUnit: valid, exactly those two failures.
  const auto doc = tqtest::parse_junit(slurp(d / "junit.xml"),
                                       std::string(TQ_SOURCE_DIR) + "/tests/data/batch/junit.xsd");
  for (const auto& e : doc.errors) UNSCOPED_INFO(e);
  CHECK(doc.errors.empty());
  REQUIRE(doc.suites.size() == 1);
  CHECK(doc.suites[0].attrs.at("tests") == "5");
  CHECK(doc.suites[0].attrs.at("failures") == "2");
  std::set<std::string> failed;
  for (const auto& c : doc.suites[0].cases)
    if (c.failure) failed.insert(c.attrs.at("name"));
  CHECK(failed == std::set<std::string>{"bad-truncated", "bad-hang"});

  // The markdown table: one row per job.
  const std::string md = slurp(d / "out/batch_summary.md");
  CHECK_THAT(md, Contains("| bad-hang | hang.pt | libtorch | static_ptq | **FAILED** (timeout) |"));
  size_t rows = 0;
  std::istringstream is(md);
  for (std::string l; std::getline(is, l);) rows += l.rfind("| ", 0) == 0 ? 1 : 0;
  CHECK(rows == 1 + 5);

  // Not a TTY: one line per finished job, no progress line.
  size_t lines = 0;
  std::istringstream os(out);
  for (std::string l; std::getline(os, l);) lines += l.rfind("[", 0) == 0 ? 1 : 0;
  CHECK(lines == 5);
  CHECK(out.find('\r') == std::string::npos);
  CHECK_THAT(out, Contains("FAILED  bad-hang  (timeout"));

  // Without --keep-going (and no CI=true), the first failure stops new jobs.
  write(d / "stop.yaml", "jobs:\n  - template: " + kDemo +
                             "fmnist_cnn_int8.yaml\n    models: truncated.pt\n" + good_jobs());
  CHECK(cli(d, "batch stop.yaml -o stop") == 1);
  const json st = read_json(d / "stop/batch_summary.json");
  CHECK(st["totals"]["failed"] == 1);
  CHECK(st["totals"]["skipped"] == 3);
  // With CI=true, keep going is the default.
  CHECK(cli(d, "batch stop.yaml -o stop-ci", "CI=true") == 1);
  CHECK(read_json(d / "stop-ci/batch_summary.json")["totals"]["passed"] == 3);
}

TEST_CASE("batch CLI: a killed batch resumes with only the missing jobs", "[batch][cli]") {
  ScratchDir d("batch-resume");
  write(d / "manifest.yaml",
        "jobs:\n" + good_jobs() + "  - template: " + kDemo +
            "fmnist_cnn_int8.yaml\n    models: " + kCnn +
            "\n    id: cnn-int8-per-tensor\n    overrides: [\"quantize.layers=[{module_name: '*', "
            "weights: {granularity: per_tensor}}]\"]\n");
  const std::string out_dir = d / "out";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open((d / "first.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(TQ_CLI, TQ_CLI, "batch", (d / "manifest.yaml").c_str(), "--jobs", "1", "-o",
            out_dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  // Kill the batch (SIGKILL: no chance to clean up) once the first job is done.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!fs::exists(out_dir + "/cnn-int8/job_result.json") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  // The orphaned job dies too (its parent is gone); wait until it has, however
  // long that takes on a loaded machine, so that it writes nothing more.
  for (int i = 0; i < 30000 && process_mentions(out_dir); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(process_mentions(out_dir));

  std::vector<std::string> ids = {"cnn-int8", "cnn-int4", "cnn-fp8", "cnn-int8-per-tensor"};
  std::map<std::string, fs::file_time_type> finished;
  for (const auto& id : ids)
    if (fs::exists(out_dir + "/" + id + "/job_result.json"))
      finished[id] = fs::last_write_time(out_dir + "/" + id + "/log.txt");
  INFO(slurp(d / "first.txt"));
  REQUIRE(finished.count("cnn-int8"));
  REQUIRE(finished.size() < ids.size());
  CHECK_FALSE(fs::exists(out_dir + "/batch_summary.json"));

  const int rc = cli(d, "batch manifest.yaml --jobs 1 --resume -o out");
  const std::string out = slurp(d / "cli.txt");
  INFO(out);
  CHECK(rc == 0);
  const json s = read_json(out_dir + "/batch_summary.json");
  CHECK(s["totals"]["passed"] == 4);
  CHECK(s["totals"]["resumed"] == finished.size());
  for (const auto& j : s["jobs"]) {
    const std::string id = j["id"];
    INFO(id);
    const bool was_done = finished.count(id) > 0;
    CHECK(j["resumed"] == was_done);
    if (was_done) {
      // Not run again: its log is the one from the first run.
      CHECK(fs::last_write_time(out_dir + "/" + id + "/log.txt") == finished[id]);
      CHECK_THAT(out, Contains("resumed " + id));
    } else {
      CHECK_THAT(slurp(out_dir + "/" + id + "/log.txt"), Contains("quantize -e"));
    }
  }
  // Everything done: a third run reuses all four.
  CHECK(cli(d, "batch manifest.yaml --resume -o out") == 0);
  CHECK(read_json(out_dir + "/batch_summary.json")["totals"]["resumed"] == 4);
  // An artifact its report does not describe (as a quantize killed between
  // its two renames leaves) is not reused: that job runs again.
  fs::copy_file(out_dir + "/cnn-int4/quantized_model_libtorch.pth",
                out_dir + "/cnn-int8/quantized_model_libtorch.pth",
                fs::copy_options::overwrite_existing);
  CHECK(cli(d, "batch manifest.yaml --resume -o out") == 0);
  INFO(slurp(d / "cli.txt"));
  CHECK_THAT(slurp(d / "cli.txt"), Contains("cnn-int8 runs again: incomplete result"));
  const json again = read_json(out_dir + "/batch_summary.json");
  CHECK(again["totals"]["resumed"] == 3);
  for (const auto& j : again["jobs"]) CHECK(j["resumed"] == (j["id"] != "cnn-int8"));
}

TEST_CASE("batch CLI: two shards merged equal the unsharded run", "[batch][cli]") {
  ScratchDir d("batch-shards");
  write(d / "truncated.pt", slurp(kCnn).substr(0, 4096));
  write(d / "manifest.yaml",
        "jobs:\n" + good_jobs() + "  - template: " + kDemo +
            "fmnist_cnn_int8.yaml\n    models: truncated.pt\n    id: truncated\n");
  // As on a shared file system (Slurm, a Kubernetes volume): one output
  // directory, each shard writes batch_summary.shard-i-of-N.json.
  CHECK(cli(d, "batch manifest.yaml --keep-going -o out --junit all.xml") == 1);
  fs::copy_file(d / "out/batch_summary.json", d / "all.json");
  CHECK(cli(d, "batch manifest.yaml --keep-going --shard 1/2 -o out") == 0);
  CHECK(cli(d, "batch manifest.yaml --keep-going --shard 2/2 -o out") ==
        1);  // holds the truncated job
  const json s1 = read_json(d / "out/batch_summary.shard-1-of-2.json");
  const json s2 = read_json(d / "out/batch_summary.shard-2-of-2.json");
  REQUIRE(s1["jobs"].size() == 2);
  REQUIRE(s2["jobs"].size() == 2);
  CHECK(s1["jobs"][0]["id"] == "cnn-int8");  // job k -> shard k % 2 + 1
  CHECK(s1["jobs"][1]["id"] == "cnn-fp8");
  CHECK(s2["jobs"][0]["id"] == "cnn-int4");
  CHECK(s2["shard"] == json{{"index", 2}, {"count", 2}});

  const int rc =
      cli(d,
          "report merge out/batch_summary.shard-2-of-2.json out/batch_summary.shard-1-of-2.json "
          "-o merged.json --markdown merged.md --junit merged.xml");
  INFO(slurp(d / "cli.txt"));
  CHECK(rc == 1);  // like the batch: a job failed
  const json merged = read_json(d / "merged.json");
  const json all = read_json(d / "all.json");
  CHECK(comparable(merged) == comparable(all));
  CHECK(merged["jobs"][1]["size_ratio"] == all["jobs"][1]["size_ratio"]);
  CHECK(merged["totals"] == all["totals"]);
  CHECK_THAT(slurp(d / "merged.md"), Contains("| truncated |"));
  CHECK(tqtest::parse_junit(slurp(d / "merged.xml"),
                            std::string(TQ_SOURCE_DIR) + "/tests/data/batch/junit.xsd")
            .errors.empty());

  // Bad merges: exit code 2 and a message that names the files.
  CHECK(cli(d, "report merge out/batch_summary.shard-1-of-2.json -o x.json") == 2);
  CHECK_THAT(slurp(d / "cli.txt"),
             Contains("2 of 4 jobs are in none of the summaries (cnn-int4, truncated)"));
  CHECK(cli(d, "report merge out/batch_summary.shard-1-of-2.json all.json -o x.json") == 2);
  CHECK_THAT(slurp(d / "cli.txt"), Contains("job 'cnn-int8' is in both"));
  write(d / "other.yaml", "jobs:\n" + good_jobs());
  CHECK(cli(d, "batch other.yaml --shard 2/2 -o o2") == 0);
  CHECK(cli(d,
            "report merge out/batch_summary.shard-1-of-2.json o2/batch_summary.shard-2-of-2.json "
            "-o x.json") == 2);
  CHECK_THAT(slurp(d / "cli.txt"), Contains("is from a different manifest"));
  write(d / "junk.json", "{\"command\": \"quantize\"}");
  CHECK(cli(d, "report merge junk.json -o x.json") == 2);
  CHECK_THAT(slurp(d / "cli.txt"), Contains("not a batch summary"));
  CHECK_FALSE(fs::exists(d / "x.json"));
}

TEST_CASE("batch CLI: usage and manifest errors exit with 2", "[batch][cli]") {
  ScratchDir d("batch-usage");
  write(d / "manifest.yaml", "jobs:\n  - spec: nope.yaml\n");
  CHECK(cli(d, "batch manifest.yaml") == 2);
  CHECK_THAT(slurp(d / "cli.txt"),
             Contains("manifest.yaml:2:11: jobs.0.spec: 'nope.yaml' does not exist"));
  write(d / "manifest.yaml", "jobs:\n" + good_jobs());
  CHECK(cli(d, "batch manifest.yaml --shard 3/2") == 2);
  CHECK_THAT(slurp(d / "cli.txt"), Contains("--shard '3/2'"));
  CHECK(cli(d, "batch manifest.yaml --jobs 0") == 2);
  CHECK(cli(d, "batch") == 2);
  CHECK(cli(d, "report") == 2);
  CHECK(cli(d, "batch --help") == 0);
  CHECK_THAT(slurp(d / "cli.txt"),
             Contains("--resume") && Contains("--keep-going") && Contains("--junit"));
  CHECK_FALSE(fs::exists(d / "results"));
}

TEST_CASE("batch CLI: evaluate metrics and quality gates", "[batch][cli][evaluate]") {
  if (!evaluate_available()) {
    WARN("tao-quant evaluate is not available in this build; skipped");
    return;
  }
  ScratchDir d("batch-eval");
  const std::string data = std::string(TQ_MODELS_DIR) + "/fmnist/test.npz";
  const std::string eval = "dataset.test_dataset.data_file=" + data +
                           ", \"evaluate.latency={batch_sizes: [1, 16], warmup: 1, iters: 3}\"";
  write(d / "manifest.yaml",
        "defaults:\n  evaluate: true\n  overrides: [" + eval + "]\njobs:\n  - template: " + kDemo +
            "fmnist_cnn_int8.yaml\n    models: " + kCnn +
            "\n    id: cnn-int8\n    overrides: [\"quantize.export={formats: [onnx, onnx_qdq]}\"]\n"
            "  - template: " +
            kDemo + "fmnist_cnn_int8.yaml\n    models: " + kCnn +
            "\n    id: cnn-gated\n    overrides: [\"evaluate.gates={min_top1: 99.5}\"]\n");
  const int rc = cli(d, "batch manifest.yaml --keep-going -o out --junit junit.xml");
  INFO(slurp(d / "cli.txt"));
  CHECK(rc == 3);  // a gate failed, nothing else
  const json s = read_json(d / "out/batch_summary.json");
  const json& ok = s["jobs"][0];
  CHECK(ok["status"] == "passed");
  REQUIRE(ok["fp32_top1"].is_number());
  const json report = read_json(std::string(TQ_MODELS_DIR) + "/fmnist/cnn.json");
  CHECK(ok["fp32_top1"].get<double>() ==
        Approx(report["fp32_top1"].get<double>() * 100).margin(1e-6));
  CHECK(ok["quant_top1"].get<double>() > 85);
  CHECK(ok["top1_drop"].get<double>() ==
        Approx(ok["fp32_top1"].get<double>() - ok["quant_top1"].get<double>()));
  CHECK(ok["speedup"].is_number());
  // The exported files, in the summary's JSON, Markdown and HTML.
  CHECK(ok["exports"] == json::array({"model_float.onnx", "quantized_model_libtorch.onnx"}));
  CHECK_THAT(slurp(d / "out/batch_summary.md"),
             Contains("| model_float.onnx, quantized_model_libtorch.onnx |"));
  CHECK_THAT(slurp(d / "out/batch_summary.html"), Contains("quantized_model_libtorch.onnx"));
  const json& gated = s["jobs"][1];
  CHECK(gated["status"] == "failed");
  CHECK(gated["failure"] == "gate");
  CHECK(gated["exit_code"] == 3);
  CHECK_THAT(gated["message"].get<std::string>(), Contains("min_top1"));
  CHECK_THAT(gated["message"].get<std::string>(), Contains("99.5"));
  const auto doc = tqtest::parse_junit(slurp(d / "junit.xml"),
                                       std::string(TQ_SOURCE_DIR) + "/tests/data/batch/junit.xsd");
  CHECK(doc.errors.empty());
  REQUIRE(doc.suites.size() == 1);
  REQUIRE(doc.suites[0].cases.size() == 2);
  REQUIRE(doc.suites[0].cases[1].failure);
  CHECK(doc.suites[0].cases[1].failure->at("type") == "gate");
}

TEST_CASE("batch CLI: --resume runs a job again whose report or artifact is gone or damaged",
          "[batch][cli]") {
  ScratchDir d("batch-resume-pair");
  write(d / "manifest.yaml", "jobs:\n  - template: " + kDemo +
                                 "fmnist_cnn_int8.yaml\n    models: " + kCnn +
                                 "\n    id: cnn-int8\n");
  REQUIRE(cli(d, "batch manifest.yaml -o out") == 0);
  const std::string job = d / "out/cnn-int8";
  // As batch names them: under its -o folder, relative to where it runs.
  const std::string report = "out/cnn-int8/quantize_report.json";
  const std::string artifact = "out/cnn-int8/quantized_model_libtorch.pth";
  const std::string good = slurp(d / report);
  // The same check as evaluate --is-quantized (result_pair_problem) each time.
  const std::vector<std::pair<std::function<void()>, std::string>> damages = {
      {[&] { fs::remove(d / report); },
       "cnn-int8 runs again: incomplete result: '" + artifact + "' has no report beside it"},
      {[&] { fs::remove(d / artifact); }, "cnn-int8 runs again: incomplete result: the report '" +
                                              report + "' describes '" + artifact +
                                              "', which does not exist"},
      {[&] {
         json j = json::parse(good);
         j["artifact"]["xxh64"] = 42;
         write(d / report, j.dump());
       },
       "cnn-int8 runs again: unusable result: the report '" + report +
           "': artifact.xxh64: expected 16 hex digits, found '42'"},
  };
  for (const auto& [damage, expected] : damages) {
    INFO(expected);
    REQUIRE(cli(d, "batch manifest.yaml --resume -o out") == 0);
    REQUIRE(read_json(d / "out/batch_summary.json")["totals"]["resumed"] == 1);  // intact: reused
    damage();
    CHECK(cli(d, "batch manifest.yaml --resume -o out") == 0);
    const std::string out = slurp(d / "cli.txt");
    INFO(out);
    CHECK_THAT(out, Contains(expected));
    const json s = read_json(d / "out/batch_summary.json");
    CHECK(s["totals"]["resumed"] == 0);
    CHECK(s["totals"]["passed"] == 1);
    CHECK(cli(d, "-q --no-html evaluate -e " + kDemo +
                     "fmnist_cnn_int8.yaml --is-quantized results_dir=" + job +
                     " dataset.test_dataset.data_file=" + TQ_MODELS_DIR +
                     "/fmnist/test.npz evaluate.num_batches=1") == 0);  // a complete pair again
  }
}
