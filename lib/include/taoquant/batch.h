// `tao-quant batch`: many quantize (+ evaluate) jobs from one manifest, each
// in its own process, with timeouts, resume, shards, and summaries (JSON,
// markdown, JUnit) that `tao-quant report merge` combines. Torch-free.
// docs/batch.md is the user documentation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/error.h"
#include "taoquant/hash.h"

namespace tq {

// ---------------------------------------------------------------- manifest

struct BatchJob {
  std::string id;     // stable: explicit, or derived (see docs/batch.md)
  size_t index = 0;   // position in the manifest's (expanded) job list
  std::string spec;   // spec path to run (manifest-relative path joined to the manifest's dir)
  std::string model;  // template jobs: the matched model file; "" otherwise
  std::vector<std::string> overrides;  // defaults.overrides, then the job's, then model_path
  bool evaluate = false;               // run `evaluate --compare` after quantize
  std::optional<double> timeout_s;     // the job's own `timeout:`
  SourceLoc loc;                       // where the job is in the manifest
};

struct Manifest {
  std::string path;  // as given
  std::string name;  // file stem ("manifest")
  std::string dir;   // directory relative paths are taken from ("" = current)
  // Hash of the expanded job list (ids, manifest-relative spec and model
  // paths, overrides, evaluate, timeouts): equal for every shard of one
  // manifest, on any machine.
  std::string hash;
  std::optional<double> default_timeout_s;  // defaults.timeout
  std::vector<BatchJob> jobs;
};

// Reads a manifest. Relative paths (spec, template, models) are taken from
// the manifest's directory; `${env:VAR,default}` and `${a.b}` interpolation
// work as in specs. Any problem (unknown key, bad type, no matching model,
// duplicate id) is a SpecError (exit code 2) with file:line:col.
Manifest load_manifest(const std::string& path);
Manifest parse_manifest_text(const std::string& text, const std::string& name,
                             const std::string& dir);

// `--shard i/N`: 1 <= i <= N. Job k (0-based, manifest order) belongs to
// shard (k % N) + 1.
struct Shard {
  int index = 1;
  int count = 1;
  bool sharded() const { return count > 1; }
  bool contains(size_t job_index) const {
    return static_cast<int>(job_index % static_cast<size_t>(count)) + 1 == index;
  }
  std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }
};
// Parses "i/N"; throws UsageError (exit code 2) naming the problem.
Shard parse_shard(const std::string& text);

// ------------------------------------------------------------------ results

enum class JobStatus { kPassed, kFailed, kSkipped };
const char* to_string(JobStatus s);

struct JobResult {
  std::string id;
  size_t index = 0;
  std::string spec, model, backend, mode;
  JobStatus status = JobStatus::kSkipped;
  // How it failed: "exit" (non-zero exit), "signal", "timeout", "gate"
  // (evaluate exit code 3), "spec" (the job's spec does not load), "start"
  // (could not start the process), "interrupted"; "not_run" for skipped.
  std::string failure;
  std::string stage;  // "quantize" or "evaluate": where it stopped
  int exit_code = 0;  // of the last process (-1: killed by a signal / not run)
  int signal = 0;     // signal that ended it, 0 = none
  double duration_s = 0;
  std::optional<double> size_ratio;                        // quantized / original file bytes
  std::optional<double> fp32_top1, quant_top1, top1_drop;  // percent, points
  std::optional<double> speedup;                           // at the largest measured batch size
  std::string message;                                     // one line: why it failed
  std::vector<std::string> log_tail;
  bool resumed = false;              // reused from an earlier run (--resume)
  std::vector<std::string> exports;  // files exported with the result (quantize.export)
  std::string dir;                   // the job's results_dir
};

struct BatchSummary {
  std::string manifest_path, manifest_name, manifest_hash;
  std::vector<std::string> job_ids;  // every job of the manifest, in order
  Shard shard;
  std::vector<JobResult> jobs;  // this shard's jobs, in manifest order
  double wall_s = 0;

  struct Totals {
    size_t jobs = 0, passed = 0, failed = 0, gate_failures = 0, skipped = 0, resumed = 0;
  };
  Totals totals() const;
};

constexpr int kBatchSummarySchema = 1;

nlohmann::json job_result_to_json(const JobResult& r);
// Throws RuntimeError naming `source` and the key when the JSON is not a job.
JobResult job_result_from_json(const nlohmann::json& j, const std::string& source);

nlohmann::json summary_to_json(const BatchSummary& s);
// Throws UsageError (exit 2) naming `source` and the key when the JSON is
// not a batch summary.
BatchSummary summary_from_json(const nlohmann::json& j, const std::string& source);
// The same for the text of a summary file.
BatchSummary summary_from_text(const std::string& text, const std::string& source);
// A batch_summary.json a user hands over (`report merge`): only a regular
// file of at most kMaxReportBytes is read (UsageError otherwise).
BatchSummary read_summary_file(const std::string& path);
// A markdown table: one row per job (model, backend, mode, status, size
// ratio, fp32/quant top-1, drop, speedup, wall time), then the totals.
std::string summary_to_markdown(const BatchSummary& s);
// JUnit XML: <testsuites><testsuite> with one <testcase> per job; failed
// jobs get <failure message type>, skipped ones <skipped>.
std::string summary_to_junit(const BatchSummary& s);
// 0 all passed (or skipped by a shard); 3 gate violations only; 1 otherwise.
ExitCode summary_exit_code(const BatchSummary& s);

// Combines shard summaries into what one unsharded run writes (timings
// aside). Throws UsageError when the manifests differ, a job appears twice,
// or jobs are missing (named).
BatchSummary merge_summaries(const std::vector<BatchSummary>& parts,
                             const std::vector<std::string>& sources);

// -------------------------------------------------------------------- run

struct BatchProgress {
  size_t total = 0;  // jobs in this shard
  size_t done = 0;   // finished (passed, failed or resumed)
  size_t failed = 0;
  size_t running = 0;
  double elapsed_s = 0;
};

struct BatchOptions {
  std::string out_dir;                  // job dirs and summaries go here
  std::string exe;                      // the tao-quant binary the jobs run
  std::vector<std::string> child_args;  // global args for every child (--plugin P, -v)
  int jobs = 1;                         // processes side by side
  int threads_per_job = 0;              // 0: max(1, usable cores / jobs)
  Shard shard;
  bool keep_going = false;
  bool resume = false;
  std::optional<double> timeout_s;  // --timeout: replaces defaults.timeout
  double kill_grace_s = 3;          // SIGTERM -> SIGKILL delay on timeout
  std::function<void(const BatchJob&)> on_job_start;
  std::function<void(const JobResult&, const BatchProgress&)> on_job_done;
  // Called about every 0.5 s and on every change.
  std::function<void(const BatchProgress&)> on_progress;
};

// Runs this shard's jobs. Failures of jobs are results, not exceptions; an
// output directory that cannot be written is a RuntimeError. SIGINT/SIGTERM
// stop the batch: running jobs are terminated and marked "interrupted".
BatchSummary run_batch(const Manifest& manifest, const BatchOptions& opts);

// Writes batch_summary.json and batch_summary.md (with --shard i/N:
// batch_summary.shard-i-of-N.{json,md}) into `out_dir`, and the JUnit XML to
// `junit_path` when not empty, each atomically. Returns the JSON path.
std::string write_batch_outputs(const BatchSummary& s, const std::string& out_dir,
                                const std::string& junit_path);

// The number of CPUs this process may run on (affinity mask), at least 1.
int usable_cores();

}  // namespace tq
