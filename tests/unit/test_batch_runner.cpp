// The batch runner with a stand-in for the tao-quant binary (a shell script
// that crashes, hangs, fails or writes reports as told), so that process
// isolation, timeouts, keep-going, resume and thread division are tested
// without LibTorch. tests/torch/test_batch_cli.cpp runs the real binary.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <csignal>
#include <fstream>

#include "batch_test_util.h"
#include "taoquant/batch.h"

using Catch::Matchers::Contains;
using tqtest::ScratchDir;
using tqtest::slurp;
using tqtest::write;

namespace {

// Acts on `fake.quantize=...` / `fake.evaluate=...` overrides; logs each call
// to `fake.calls=FILE`.
const char* kFakeExe = R"(#!/bin/sh
ulimit -c 0
stage=$1; shift
dir=""; q=ok; e=ok; calls=""
for a in "$@"; do
  case "$a" in
    results_dir=*) dir=${a#results_dir=} ;;
    fake.quantize=*) q=${a#fake.quantize=} ;;
    fake.evaluate=*) e=${a#fake.evaluate=} ;;
    fake.calls=*) calls=${a#fake.calls=} ;;
  esac
done
[ -n "$calls" ] && echo "$TQ_BATCH_JOB_ID $stage" >> "$calls"
echo "fake $stage threads=$TQ_NUM_THREADS omp=$OMP_NUM_THREADS"
if [ "$stage" = quantize ]; then b=$q; else b=$e; fi
case "$b" in
  ok) ;;
  barrier4)  # waits until 4 jobs run side by side (gives up after ~120 s)
    touch "$dir.arrived"; parent=${dir%/*}; i=0
    until [ $(ls "$parent" | grep -c '[.]arrived$') -ge 4 ]; do
      i=$((i + 1)); if [ $i -gt 1200 ]; then echo "barrier4: not side by side" >&2; exit 1; fi
      sleep 0.1
    done ;;
  fail) echo "some output"; echo "tao-quant: error: cannot load model 'x.pt': boom" >&2; exit 1 ;;
  segv) kill -SEGV $$ ;;
  abort) kill -ABRT $$ ;;
  oom) kill -KILL $$ ;;
  hang) sleep 60 ;;
  stubborn) trap '' TERM; while :; do sleep 1; done ;;
  gate)
    echo '{"metrics":{"top1":88.0,"top1_drop":3.0},"float":{"top1":91.0},"quantized":{"top1":88.0},"gates":{"passed":false,"results":[{"name":"max_top1_drop","op":"<=","value":3.0,"limit":0.5,"passed":false},{"name":"min_cosine","op":">=","value":0.999,"limit":0.99,"passed":true}]}}' > "$dir/evaluate_report.json"
    echo "tao-quant: error: quality gate failed" >&2; exit 3 ;;
esac
if [ "$stage" = quantize ]; then
  printf '%s' "@ARTIFACT@" > "$dir/quantized_model_libtorch.pth"
  echo "{\"totals\":{\"file_ratio\":0.25},\"backend\":{\"requested\":\"fakebackend\"},\"mode\":\"weight_only_ptq\",\"threads\":\"$TQ_NUM_THREADS\",\"artifact\":@RECORD@}" > "$dir/quantize_report.json"
else
  echo '{"schema_version":1,"metrics":{"top1":90.5,"top1_drop":0.75,"speedup":{"1":1.5,"32":2.5,"4":9.0}},"float":{"top1":91.25},"quantized":{"top1":90.5}}' > "$dir/evaluate_report.json"
fi
exit 0
)";

struct Fixture {
  ScratchDir d{"runner"};
  std::string exe = d / "fake-tao-quant";
  std::string calls = d / "calls.txt";
  Fixture() {
    // The fake quantize writes an artifact and its record in the report (a
    // complete result pair, result_files.h), as tao-quant does.
    const std::string artifact = "PK fake artifact";
    const nlohmann::json record = {{"file", "quantized_model_libtorch.pth"},
                                   {"bytes", artifact.size()},
                                   {"xxh64", tq::Hash64().update(artifact).hex()}};
    std::string exe_text = kFakeExe;
    exe_text.replace(exe_text.find("@ARTIFACT@"), 10, artifact);
    std::string rec;  // inside the script's "..." string
    for (char c : record.dump()) rec += c == '"' ? std::string("\\\"") : std::string(1, c);
    exe_text.replace(exe_text.find("@RECORD@"), 8, rec);
    write(exe, exe_text);
    ::chmod(exe.c_str(), 0755);
    write(d / "spec.yaml", "quantize:\n  backend: libtorch\n  model_path: " + (d / "m.pt") + "\n");
    write(d / "m.pt", "PK model bytes");
  }
  // A manifest with one job per behaviour ("quantize[/evaluate]").
  tq::Manifest manifest(const std::vector<std::string>& behaviours) {
    std::string text = "jobs:\n";
    for (const auto& b : behaviours) {
      const size_t slash = b.find('/');
      const std::string q = b.substr(0, slash);
      const std::string e = slash == std::string::npos ? "" : b.substr(slash + 1);
      std::string id = q + (e.empty() ? "" : "-" + e);
      for (int n = 2; text.find("id: " + id + "\n") != std::string::npos; ++n)
        id = q + (e.empty() ? "" : "-" + e) + "-" + std::to_string(n);
      text += "  - spec: spec.yaml\n    id: " + id +
              "\n    evaluate: " + (e.empty() ? "false" : "true") +
              "\n    overrides: [fake.quantize=" + q + ", fake.evaluate=" + (e.empty() ? "ok" : e) +
              ", fake.calls=" + calls + "]\n";
    }
    write(d / "manifest.yaml", text);
    return tq::load_manifest(d / "manifest.yaml");
  }
  tq::BatchOptions options() const {
    tq::BatchOptions o;
    o.exe = exe;
    o.out_dir = d / "out";
    o.keep_going = true;
    o.kill_grace_s = 0.5;
    return o;
  }
  size_t count_calls(const std::string& what) const {
    std::istringstream is(slurp(calls));
    size_t n = 0;
    for (std::string l; std::getline(is, l);) n += l == what ? 1 : 0;
    return n;
  }
};

const tq::JobResult& by_id(const tq::BatchSummary& s, const std::string& id) {
  for (const auto& j : s.jobs)
    if (j.id == id) return j;
  FAIL("no job " << id);
  throw 0;
}

}  // namespace

TEST_CASE("batch runner: each failure stays in its job", "[batch]") {
  Fixture f;
  tq::Manifest m = f.manifest(
      {"ok", "fail", "segv", "abort", "oom", "hang", "stubborn", "ok/ok", "ok/gate", "ok/fail"});
  tq::BatchOptions o = f.options();
  o.jobs = 3;
  // Only the two jobs that never end get a (short) limit: the others finish
  // however slow the machine is.
  for (auto& j : m.jobs)
    if (j.id == "hang" || j.id == "stubborn") j.timeout_s = 2.0;
  std::vector<std::string> done;
  o.on_job_done = [&](const tq::JobResult& r, const tq::BatchProgress& p) {
    done.push_back(r.id);
    CHECK(p.done == done.size());
    CHECK(p.total == 10);
  };
  const tq::BatchSummary s = tq::run_batch(m, o);
  CHECK(done.size() == 10);

  const auto t = s.totals();
  CHECK(t.passed == 2);
  CHECK(t.failed == 8);
  CHECK(t.gate_failures == 1);
  CHECK(tq::summary_exit_code(s) == tq::ExitCode::kRuntime);

  const auto& ok = by_id(s, "ok");
  CHECK(ok.status == tq::JobStatus::kPassed);
  CHECK(ok.backend == "fakebackend");
  REQUIRE(ok.size_ratio);
  CHECK(*ok.size_ratio == 0.25);
  CHECK_FALSE(ok.quant_top1);
  CHECK(ok.log_tail.empty());

  const auto& fail = by_id(s, "fail");
  CHECK(fail.failure == "exit");
  CHECK(fail.exit_code == 1);
  CHECK(fail.message == "quantize failed (exit code 1): cannot load model 'x.pt': boom");
  REQUIRE(fail.log_tail.size() >= 2);
  CHECK(fail.log_tail.back() == "tao-quant: error: cannot load model 'x.pt': boom");

  CHECK(by_id(s, "segv").failure == "signal");
  CHECK(by_id(s, "segv").signal == SIGSEGV);
  CHECK_THAT(by_id(s, "segv").message, Contains("SIGSEGV"));
  CHECK(by_id(s, "abort").signal == SIGABRT);
  CHECK(by_id(s, "oom").signal == SIGKILL);
  CHECK_THAT(by_id(s, "oom").message, Contains("out-of-memory"));

  const auto& hang = by_id(s, "hang");
  CHECK(hang.failure == "timeout");
  CHECK(hang.signal == SIGTERM);
  CHECK_THAT(hang.message, Contains("timed out after 2 s in quantize; stopped with SIGTERM"));
  CHECK(hang.duration_s >= 1.5);  // stopped by its 2 s limit, not before
  const auto& stubborn = by_id(s, "stubborn");
  CHECK(stubborn.failure == "timeout");
  CHECK(stubborn.signal == SIGKILL);
  CHECK_THAT(stubborn.message, Contains("SIGKILL"));

  const auto& both = by_id(s, "ok-ok");
  CHECK(both.status == tq::JobStatus::kPassed);
  CHECK(both.stage == "evaluate");
  CHECK(*both.fp32_top1 == 91.25);
  CHECK(*both.quant_top1 == 90.5);
  CHECK(*both.top1_drop == Approx(0.75));
  CHECK(*both.speedup == 2.5);  // the largest batch size

  const auto& gate = by_id(s, "ok-gate");
  CHECK(gate.failure == "gate");
  CHECK(gate.exit_code == 3);
  CHECK(gate.message == "quality gate failed: max_top1_drop: 3.0 (must be <= 0.5)");
  CHECK(*gate.top1_drop == Approx(3.0));
  CHECK(by_id(s, "ok-fail").failure == "exit");
  CHECK(by_id(s, "ok-fail").stage == "evaluate");

  // Every job has its own directory with its log and its result marker.
  for (const auto& j : s.jobs) {
    INFO(j.id);
    CHECK(std::filesystem::exists(f.d / ("out/" + j.id + "/log.txt")));
    const auto rec = nlohmann::json::parse(slurp(f.d / ("out/" + j.id + "/job_result.json")));
    CHECK(rec["result"]["status"] == tq::to_string(j.status));
  }
  CHECK_THAT(slurp(f.d / "out/ok-ok/log.txt"), Contains("fake evaluate"));
  CHECK_THAT(slurp(f.d / "out/ok-ok/log.txt"), Contains("--compare"));
}

TEST_CASE("batch runner: without --keep-going no new job starts after a failure", "[batch]") {
  Fixture f;
  const tq::Manifest m = f.manifest({"ok", "fail", "ok", "ok"});
  tq::BatchOptions o = f.options();
  o.keep_going = false;
  const tq::BatchSummary s = tq::run_batch(m, o);
  REQUIRE(s.jobs.size() == 4);
  CHECK(s.jobs[0].status == tq::JobStatus::kPassed);
  CHECK(s.jobs[1].status == tq::JobStatus::kFailed);
  for (size_t i : {2u, 3u}) {
    CHECK(s.jobs[i].status == tq::JobStatus::kSkipped);
    CHECK(s.jobs[i].message == "not run: job 'fail' failed and --keep-going is off");
  }
  CHECK(f.count_calls("ok-2 quantize") == 0);
  CHECK(tq::summary_exit_code(s) == tq::ExitCode::kRuntime);
}

TEST_CASE("batch runner: resume reruns only what is missing, failed or changed", "[batch]") {
  Fixture f;
  const tq::Manifest m = f.manifest({"ok", "ok/ok", "fail", "ok"});
  tq::BatchOptions o = f.options();
  tq::BatchSummary first = tq::run_batch(m, o);
  CHECK(first.totals().passed == 3);
  CHECK(f.count_calls("ok quantize") == 1);

  // As if the batch had been killed during the last job: no result marker.
  std::filesystem::remove(f.d / "out/ok-2/job_result.json");
  o.resume = true;
  const tq::BatchSummary second = tq::run_batch(m, o);
  CHECK(f.count_calls("ok quantize") == 1);     // reused
  CHECK(f.count_calls("ok-ok evaluate") == 1);  // reused
  CHECK(f.count_calls("fail quantize") == 2);   // failed last time: runs again
  CHECK(f.count_calls("ok-2 quantize") == 2);   // incomplete: runs again
  CHECK(second.totals().resumed == 2);
  CHECK(by_id(second, "ok").resumed);
  CHECK(*by_id(second, "ok-ok").quant_top1 == 90.5);  // the recorded metrics
  nlohmann::json a = tq::job_result_to_json(by_id(first, "ok-ok"));
  nlohmann::json b = tq::job_result_to_json(by_id(second, "ok-ok"));
  a.erase("resumed");
  b.erase("resumed");
  CHECK(a == b);

  // A changed model file or spec invalidates every job that uses it.
  write(f.d / "m.pt", "PK other bytes");
  const tq::BatchSummary third = tq::run_batch(m, o);
  CHECK(third.totals().resumed == 0);
  CHECK(f.count_calls("ok quantize") == 2);
  const tq::BatchSummary fourth = tq::run_batch(m, o);
  CHECK(fourth.totals().resumed == 3);
  CHECK(f.count_calls("ok quantize") == 2);
  write(f.d / "spec.yaml", tqtest::slurp(f.d / "spec.yaml") + "# edited\n");
  CHECK(tq::run_batch(m, o).totals().resumed == 0);
}

TEST_CASE("batch runner: threads divided between parallel jobs", "[batch]") {
  Fixture f;
  // Each job waits for the other three: they pass only when side by side.
  const tq::Manifest m = f.manifest({"barrier4", "barrier4", "barrier4", "barrier4"});
  tq::BatchOptions o = f.options();
  o.jobs = 4;
  const tq::BatchSummary s = tq::run_batch(m, o);
  CHECK(s.totals().passed == 4);
  const int expected = std::max(1, tq::usable_cores() / 4);
  const auto report = nlohmann::json::parse(slurp(f.d / "out/barrier4/quantize_report.json"));
  CHECK(report["threads"] == std::to_string(expected));
  CHECK_THAT(slurp(f.d / "out/barrier4/log.txt"), Contains("omp=" + std::to_string(expected)));

  o.threads_per_job = 3;
  o.jobs = 1;
  tq::run_batch(f.manifest({"ok"}), o);
  CHECK(nlohmann::json::parse(slurp(f.d / "out/ok/quantize_report.json"))["threads"] == "3");
}

TEST_CASE("batch runner: a job whose spec does not load fails alone", "[batch]") {
  Fixture f;
  write(f.d / "manifest.yaml",
        "jobs:\n  - spec: spec.yaml\n    id: good\n  - spec: spec.yaml\n    id: bad\n"
        "    overrides: [quantize.mode=static_qat]\n");
  const tq::Manifest m = tq::load_manifest(f.d / "manifest.yaml");
  const tq::BatchSummary s = tq::run_batch(m, f.options());
  CHECK(s.jobs[0].status == tq::JobStatus::kPassed);
  CHECK(s.jobs[1].status == tq::JobStatus::kFailed);
  CHECK(s.jobs[1].failure == "spec");
  CHECK(s.jobs[1].exit_code == 2);
  CHECK_THAT(s.jobs[1].message, Contains("quantize.mode"));
  CHECK_THAT(s.jobs[1].message, Contains("static_qat"));
}

TEST_CASE("batch runner: shards and outputs", "[batch]") {
  Fixture f;
  const tq::Manifest m = f.manifest({"ok", "ok/ok", "fail", "ok", "ok/ok"});
  tq::BatchOptions o = f.options();
  o.shard = {2, 2};
  const tq::BatchSummary s = tq::run_batch(m, o);
  REQUIRE(s.jobs.size() == 2);
  CHECK(s.jobs[0].index == 1);
  CHECK(s.jobs[1].index == 3);
  CHECK(s.job_ids.size() == 5);
  const std::string path = tq::write_batch_outputs(s, o.out_dir, f.d / "junit.xml");
  CHECK(path == f.d / "out/batch_summary.shard-2-of-2.json");
  CHECK(std::filesystem::exists(f.d / "out/batch_summary.shard-2-of-2.md"));
  CHECK(std::filesystem::exists(f.d / "junit.xml"));
  const auto back = tq::summary_from_json(nlohmann::json::parse(slurp(path)), path);
  CHECK(back.shard.index == 2);
  CHECK(back.jobs.size() == 2);
}
