// The Slurm recipe of docs/batch.md, run as written on a one-node Slurm
// cluster that the test starts (scripts/slurm/cluster.sh): the documented
// sbatch script (a job array) and the documented merge job
// (--dependency=afterany), over a small manifest of the trained test models.
// Checked: the CPU set each task gets; a task cancelled mid-run and
// resubmitted alone loses nothing; the merged summary, artifacts and JUnit
// equal an unsharded run's; a failed job fails the merge job; the cluster
// leaves no process and no file behind. docs/batch.md lists the same.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <regex>

#include "taoquant/json.h"

#include "../unit/batch_junit.h"
#include "../unit/doc_snippets.h"
#include "slurm_cluster.h"

using Catch::Matchers::Contains;
using nlohmann::json;
using tqtest::slurp;
using tqtest::write;
using namespace tqslurm;

namespace {

constexpr int kWaitS = 300;  // a guard against a hang (per wait), never a measured time

// The recipe as docs/batch.md has it.
struct Recipe {
  std::string script;  // zoo.sbatch
  std::string submit;  // the `# Submit:` lines: the array, then the merge job
  int shards = 0;      // --array=1-N
};

Recipe documented_recipe() {
  Recipe r;
  r.script = tqtest::doc_snippet("slurm");
  std::istringstream lines(r.script);
  bool in_submit = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# Submit:", 0) == 0) {
      in_submit = true;
      r.submit += line.substr(std::string("# Submit:").size()) + "\n";
    } else if (in_submit && line.rfind("#", 0) == 0 && line.rfind("#SBATCH", 0) != 0) {
      r.submit += line.substr(1) + "\n";
    } else {
      in_submit = false;
    }
  }
  const size_t at = r.script.find("#SBATCH --array=1-");
  REQUIRE(at != std::string::npos);
  r.shards = std::stoi(r.script.substr(at + std::string("#SBATCH --array=1-").size()));
  REQUIRE_THAT(r.submit, Contains("sbatch --parsable zoo.sbatch"));
  REQUIRE_THAT(r.submit, Contains("--dependency=afterany:$jid"));
  return r;
}

// The models and modes of the test manifest, in manifest order.
const std::vector<std::string> kJobs = {"fmnist-cnn-w8",  "fmnist-mbv2-w8", "fmnist-cnn-s8",
                                        "fmnist-mbv2-s8", "fmnist-cnn-d8",  "fmnist-mbv2-d8"};

// The manifest the recipe runs (specs/zoo/manifest.yaml of the work folder):
// the zoo's own templates (weight-only, static, dynamic int8, each evaluated)
// over the trained CNN and MobileNetV2-style net.
// Static jobs read one timing cache, so that their artifacts do not depend on
// the machine's load. With `failing`, one more job: a truncated model.
std::string manifest(bool failing) {
  std::string m =
      "# The Slurm recipe test's zoo (tests/slurm/test_slurm_recipe.cpp).\n"
      "zoo: ${env:TQ_ZOO_DIR,../../models}\n"
      "defaults:\n  timeout: 900\n"
      // A sample of the test set and a short latency run: the test checks
      // the recipe, not the models.
      "  overrides: [evaluate.num_batches=8, "
      "'evaluate.latency={batch_sizes: [1, 64], warmup: 1, iters: 3}']\n"
      "jobs:\n"
      "  - {template: fmnist_w8.yaml, models: '${zoo}/fmnist/{cnn,mbv2}.pt', "
      "id: 'fmnist-{stem}-w8', evaluate: true}\n"
      "  - {template: fmnist_s8.yaml, models: '${zoo}/fmnist/{cnn,mbv2}.pt', "
      "id: 'fmnist-{stem}-s8', evaluate: true, overrides: "
      "[quantize.timing_cache=timing_cache.json]}\n"
      "  - {template: fmnist_d8.yaml, models: '${zoo}/fmnist/{cnn,mbv2}.pt', "
      "id: 'fmnist-{stem}-d8', evaluate: true}\n";
  if (failing)
    m += "  - {template: fmnist_w8.yaml, models: ../../truncated.pt, id: truncated-w8}\n";
  return m;
}

// A folder laid out as the recipe expects the repository root: build/ and
// models/ link to the real ones, specs/zoo/ holds the test manifest next to
// links to the zoo templates, zoo.sbatch is the documented script. The Slurm
// run and the unsharded run each get one: an artifact embeds its resolved
// spec, output folder included, so both write to results/zoo.
fs::path make_tree(const fs::path& root, const std::string& name, const Recipe& r) {
  const fs::path w = root / name;
  fs::create_directories(w / "specs/zoo");
  fs::create_directory_symlink(TQ_BINARY_DIR, w / "build");
  fs::create_directory_symlink(TQ_MODELS_DIR, w / "models");
  for (const char* t : {"fmnist_w8.yaml", "fmnist_s8.yaml", "fmnist_d8.yaml"})
    fs::create_symlink(fs::path(TQ_SOURCE_DIR) / "specs/zoo" / t, w / "specs/zoo" / t);
  write((w / "specs/zoo/manifest.yaml").string(), manifest(false));
  write((w / "zoo.sbatch").string(), r.script);
  write((w / "truncated.pt").string(),
        slurp(std::string(TQ_MODELS_DIR) + "/fmnist/cnn.pt").substr(0, 4096));
  return w;
}

// `tao-quant ARGS` in the work folder, outside Slurm.
Result tao_quant(const fs::path& work, const std::string& args, const std::string& env = "") {
  return shell("cd " + quote(work.string()) + " && env -u CI -u TQ_ZOO_DIR " + env +
               " build/bin/tao-quant " + args);
}

// One timing cache for both static jobs, measured with the threads their
// batch gives them (profile each model; the second run completes the first's
// cache).
void make_timing_cache(const fs::path& work, int threads) {
  const std::string env =
      "OMP_NUM_THREADS=" + std::to_string(threads) + " TQ_NUM_THREADS=" + std::to_string(threads);
  std::string cache;
  for (const char* model : {"cnn", "mbv2"}) {
    const std::string dir = std::string("profile-") + model;
    const Result r = tao_quant(
        work,
        "-q profile -e specs/zoo/fmnist_s8.yaml quantize.model_path=models/fmnist/" +
            std::string(model) + ".pt results_dir=" + dir + " quantize.results_dir=" + dir +
            (cache.empty() ? "" : " quantize.timing_cache=" + cache),
        env);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    cache = dir + "/timing_cache.json";
  }
  fs::copy_file(work / cache, work / "timing_cache.json");
}

// What two runs of one manifest must agree on: all but the timings (and the
// speedup, a timing) and whether a job was reused.
json comparable(json s) {
  s.erase("wall_s");
  s["totals"].erase("resumed");
  for (auto& j : s["jobs"])
    for (const char* k : {"duration_s", "resumed", "speedup"}) j.erase(k);
  return s;
}

json read_json(const fs::path& p) {
  return tqtest::read_json(p.string());
}

struct Submitted {
  std::string array, merge;
};

// Submits the documented `# Submit:` lines in the work folder, with
// `sbatch_opts` added to the array's sbatch (never to the merge job's).
Submitted submit(const SlurmCluster& c, const fs::path& work, const Recipe& r,
                 const std::string& sbatch_opts) {
  std::string cmd = r.submit;
  const std::string call = "sbatch --parsable zoo.sbatch";
  cmd.replace(cmd.find(call), call.size(), "sbatch --parsable " + sbatch_opts + " zoo.sbatch");
  // As on a cluster: no CI=true, no zoo folder from the test's environment.
  const Result res =
      c.run(work.string(), "set -e\nunset CI TQ_ZOO_DIR\n" + cmd + "echo \"array job $jid\"\n");
  INFO(cmd << "\n" << res.out);
  REQUIRE(res.rc == 0);
  std::smatch a, m;
  REQUIRE(std::regex_search(res.out, a, std::regex("array job ([0-9]+)")));
  REQUIRE(std::regex_search(res.out, m, std::regex("Submitted batch job ([0-9]+)")));
  return {a[1], m[1]};
}

// The merge job's state and exit code ("COMPLETED 0:0", "FAILED 1:0").
std::string merge_outcome(const SlurmCluster& c, const std::string& id) {
  const auto js = c.jobs(id);
  REQUIRE(js.size() == 1);
  return js[0].get("JobState") + " " + js[0].get("ExitCode");
}

void wait_finished(const SlurmCluster& c, const Submitted& s) {
  for (const auto& id : {s.array, s.merge})
    if (!c.wait_finished(id, kWaitS)) FAIL("job " << id << " is not done:\n" << c.diagnostics());
}

}  // namespace

namespace {

// Job `id`'s quantize (or evaluate) process of the Slurm run.
std::vector<pid_t> job_processes(const std::string& id) {
  return processes_where([&](const std::vector<std::string>& a) {
    return is_tao_quant(a) && has_arg(a, "results_dir=results/zoo/" + id);
  });
}

// Shard `shard`'s batch process.
std::vector<pid_t> batch_processes(int shard, int shards) {
  return processes_where([&](const std::vector<std::string>& a) {
    return is_tao_quant(a) && has_arg(a, "batch") &&
           has_arg(a, std::to_string(shard) + "/" + std::to_string(shards));
  });
}

// Task `shard` runs jobs `done` and `victim`. Freezes the victim's process as
// soon as it starts, waits until `done` has finished, then cancels the task:
// the cancel lands while one job of the task has passed and the other runs,
// whatever the load. Returns the CPUs the task's batch may use.
int cancel_mid_run(const SlurmCluster& c, const Submitted& s, int shard, int shards,
                   const fs::path& work, const std::string& done, const std::string& victim) {
  std::vector<pid_t> frozen;
  if (!wait_until([&] { return !(frozen = job_processes(victim)).empty(); }, kWaitS, 50))
    FAIL(victim << " never started:\n" << c.diagnostics());
  for (pid_t p : frozen) ::kill(p, SIGSTOP);
  const auto batch = batch_processes(shard, shards);
  REQUIRE(batch.size() == 1);
  const int cpus = allowed_cpus(batch[0]);
  const fs::path result = work / "results/zoo" / done / "job_result.json";
  REQUIRE(wait_until([&] { return fs::exists(result); }, kWaitS));
  REQUIRE_FALSE(fs::exists(work / "results/zoo" / victim / "job_result.json"));
  const Result r = c.run("/", "scancel " + s.array + "_" + std::to_string(shard));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  return cpus;
}

// Every task but `cancelled` completed; that one was cancelled.
void check_tasks(const SlurmCluster& c, const std::string& array, int cancelled) {
  for (const auto& t : c.jobs(array)) {
    INFO("task " << t.get("ArrayTaskId") << ": " << t.get("JobState") << " " << t.get("ExitCode"));
    if (std::stoi(t.get("ArrayTaskId")) == cancelled)
      CHECK(t.get("JobState") == "CANCELLED");
    else
      CHECK((t.get("JobState") + " " + t.get("ExitCode")) == "COMPLETED 0:0");
  }
}

bool same_bytes(const fs::path& a, const fs::path& b) {
  return fs::exists(a) && fs::exists(b) && slurp(a.string()) == slurp(b.string());
}

// The merged summary and the artifacts against the unsharded run's.
void check_summary_and_artifacts(const fs::path& work, const fs::path& ref) {
  const json merged = read_json(work / "results/zoo.json");
  const json want = read_json(ref / "results/zoo/batch_summary.json");
  CHECK(comparable(merged) == comparable(want));
  for (const auto& j : want["jobs"]) {
    const std::string id = j["id"];
    int artifacts = 0;
    for (const auto& f : fs::directory_iterator(ref / "results/zoo" / id)) {
      if (f.path().extension() != ".pth") continue;
      ++artifacts;
      INFO(id << ": " << f.path().filename() << " differs from the unsharded run's");
      CHECK(same_bytes(f.path(), work / "results/zoo" / id / f.path().filename()));
    }
    INFO(id);
    CHECK(artifacts == (j["status"] == "passed" ? 1 : 0));
  }
}

// The merged JUnit has the unsharded run's test cases, in order; the tasks'
// JUnit files have them too, between them.
void check_junit(const fs::path& work, const fs::path& ref, int shards) {
  const std::string xsd = std::string(TQ_SOURCE_DIR) + "/tests/data/batch/junit.xsd";
  const auto got = tqtest::parse_junit(slurp((work / "results/zoo.xml").string()), xsd);
  const auto want = tqtest::parse_junit(slurp((ref / "junit.xml").string()), xsd);
  CHECK(got.errors.empty());
  REQUIRE(got.suites.size() == 1);
  REQUIRE(want.suites.size() == 1);
  REQUIRE(got.suites[0].cases.size() == want.suites[0].cases.size());
  std::vector<std::string> names, shard_names;
  for (size_t i = 0; i < want.suites[0].cases.size(); ++i) {
    const auto& g = got.suites[0].cases[i];
    const auto& w = want.suites[0].cases[i];
    CHECK(g.attrs.at("name") == w.attrs.at("name"));
    CHECK(g.attrs.at("classname") == w.attrs.at("classname"));
    CHECK(g.failure.has_value() == w.failure.has_value());
    if (g.failure && w.failure) CHECK(*g.failure == *w.failure);
    names.push_back(g.attrs.at("name"));
  }
  for (int i = 1; i <= shards; ++i) {
    const std::string f = (work / ("results/zoo/junit-" + std::to_string(i) + ".xml")).string();
    const auto part = tqtest::parse_junit(slurp(f), xsd);
    CHECK(part.errors.empty());
    for (const auto& suite : part.suites)
      for (const auto& tc : suite.cases) shard_names.push_back(tc.attrs.at("name"));
  }
  std::sort(names.begin(), names.end());
  std::sort(shard_names.begin(), shard_names.end());
  CHECK(shard_names == names);
}

}  // namespace

namespace {

// What every phase needs.
struct Setup {
  Recipe recipe;
  std::string jobs;  // the recipe's --jobs
  int cpus = 0;      // the node's
  int threads = 0;   // per job: what the batch makes of cpus and --jobs
  fs::path work, ref;
};

Setup prepare(const SlurmCluster& c) {
  Setup s;
  s.recipe = documented_recipe();
  std::smatch m;
  REQUIRE(std::regex_search(s.recipe.script, m, std::regex("--jobs ([0-9]+)")));
  s.jobs = m[1];
  s.cpus = std::stoi(c.run("/", "sinfo -h -o %c").out);
  s.threads = std::max(1, s.cpus / std::stoi(s.jobs));
  s.work = make_tree(c.dir(), "work", s.recipe);
  s.ref = make_tree(c.dir(), "ref", s.recipe);
  make_timing_cache(s.work, s.threads);
  fs::copy_file(s.work / "timing_cache.json", s.ref / "timing_cache.json");
  return s;
}

// The unsharded run of the manifest (resuming the previous one); its exit code.
int run_unsharded(const Setup& s) {
  const Result r = tao_quant(s.ref, "batch specs/zoo/manifest.yaml --jobs " + s.jobs +
                                        " --keep-going --resume -o results/zoo --junit junit.xml");
  INFO(r.out);
  return r.rc;
}

std::string cpus_per_task(const Setup& s) {
  return "--cpus-per-task=" + std::to_string(s.cpus);
}

// The array and the merge as documented; task 2 (mbv2-w8, mbv2-d8) is
// cancelled once mbv2-w8 has passed, while mbv2-d8 runs; then task 2 alone
// again, and the merge again: nothing lost, nothing redone.
void cancel_and_resubmit(const SlurmCluster& c, const Setup& s) {
  const Submitted first = submit(c, s.work, s.recipe, cpus_per_task(s));
  CHECK(cancel_mid_run(c, first, 2, s.recipe.shards, s.work, "fmnist-mbv2-w8", "fmnist-mbv2-d8") ==
        s.cpus);
  wait_finished(c, first);
  check_tasks(c, first.array, 2);
  // The cancelled batch got SIGTERM: it stopped its running job and wrote its
  // shard's summary, so the merge has every job and fails on that one.
  CHECK(merge_outcome(c, first.merge) == "FAILED 1:0");
  const json shard2 = read_json(s.work / ("results/zoo/batch_summary.shard-2-of-" +
                                          std::to_string(s.recipe.shards) + ".json"));
  INFO(shard2.dump(1));
  REQUIRE(shard2["jobs"].size() == 2);
  CHECK(shard2["jobs"][0]["status"] == "passed");
  CHECK(shard2["jobs"][1]["status"] == "failed");
  for (int i = 1; i <= s.recipe.shards; ++i) {
    const std::string out =
        slurp((s.work / ("slurm-" + first.array + "_" + std::to_string(i) + ".out")).string());
    INFO(out);
    CHECK_THAT(out, Contains(", " + s.jobs + " at a time, " + std::to_string(s.threads) +
                             " thread(s) each"));
  }
  const fs::path done_log = s.work / "results/zoo/fmnist-mbv2-w8/log.txt";
  const auto done_at = fs::last_write_time(done_log);

  const Submitted again = submit(c, s.work, s.recipe, cpus_per_task(s) + " --array=2");
  wait_finished(c, again);
  CHECK(merge_outcome(c, again.merge) == "COMPLETED 0:0");
  const json merged = read_json(s.work / "results/zoo.json");
  REQUIRE(merged["jobs"].size() == kJobs.size());
  for (const auto& j : merged["jobs"]) {
    INFO(j.dump());
    CHECK(j["status"] == "passed");
    CHECK(j["resumed"] == (j["id"] == "fmnist-mbv2-w8"));
  }
  CHECK(fs::last_write_time(done_log) == done_at);
}

// A job that fails in one shard fails the merge job; every passed job is
// reused (--resume in the script).
void add_failing_job(const SlurmCluster& c, const Setup& s) {
  for (const auto& tree : {s.work, s.ref})
    write((tree / "specs/zoo/manifest.yaml").string(), manifest(true));
  CHECK(run_unsharded(s) == 1);
  const Submitted failing = submit(c, s.work, s.recipe, cpus_per_task(s));
  wait_finished(c, failing);
  CHECK(merge_outcome(c, failing.merge) == "FAILED 1:0");
  const json merged = read_json(s.work / "results/zoo.json");
  CHECK(merged["totals"]["failed"] == 1);
  CHECK(merged["totals"]["resumed"] == kJobs.size());
}

// Stopped: no process of the cluster left, its folder gone.
void check_stopped(SlurmCluster& c) {
  const auto daemons = c.daemons();
  const Result stopped = c.stop();
  INFO(stopped.out);
  CHECK(stopped.rc == 0);
  for (const auto& [name, pid] : daemons) {
    INFO(name << " (pid " << pid << ") still runs");
    CHECK_FALSE(alive(pid));
  }
  for (const auto& id : kJobs) CHECK(job_processes(id).empty());
  CHECK_FALSE(fs::exists(c.stopped_dir()));
}

}  // namespace

TEST_CASE("Slurm recipe: the documented job array and merge on a one-node cluster", "[slurm]") {
  if (const auto why = cannot_start()) {
    std::cout << "\n**********************************************************************\n"
              << "SLURM TEST SKIPPED: " << *why
              << "The Slurm recipe of docs/batch.md was NOT run (ctest reports it skipped).\n"
              << "**********************************************************************\n";
    return;
  }
  SlurmCluster c;
  INFO(c.start_result().out);
  REQUIRE(c.up());
  const Setup s = prepare(c);
  REQUIRE(run_unsharded(s) == 0);
  cancel_and_resubmit(c, s);
  check_summary_and_artifacts(s.work, s.ref);
  check_junit(s.work, s.ref, s.recipe.shards);
  add_failing_job(c, s);
  check_summary_and_artifacts(s.work, s.ref);
  check_junit(s.work, s.ref, s.recipe.shards);
  check_stopped(c);
}
