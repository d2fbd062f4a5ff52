// Private to the batch runner: one job's inputs, fingerprint and results on
// disk.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/batch.h"

namespace tq::batch_detail {

// Content hashes of files, memoized by (path, size, mtime): many jobs of a zoo
// share models and data.
class HashCache {
 public:
  // "file:<xxh64>", "dir:<xxh64 of the listing>", "missing" or "special:<kind>".
  std::string hash_path(const std::string& path);

 private:
  std::map<std::string, std::pair<std::string, std::string>> memo_;  // path -> (stamp, hash)
};

struct JobPlan {
  const BatchJob* job = nullptr;
  std::string dir;                     // <out>/<id>: the job's results_dir
  std::vector<std::string> overrides;  // the job's, then results_dir=<dir>
  std::string spec_error;              // the spec does not load (message)
  std::string model, backend, mode;    // from the resolved spec
  nlohmann::json inputs;               // what the fingerprint covers, with hashes
  std::string fingerprint;             // xxh64 of `inputs`
};

// Loads the job's spec (quietly) and hashes its inputs: spec file bytes,
// overrides, model file, the data files and folders the spec names.
JobPlan plan_job(const BatchJob& job, const std::string& out_dir, HashCache& cache);

// The recorded result when <dir>/job_result.json passed with the same
// fingerprint; otherwise nullopt and `why` says what differs.
std::optional<JobResult> recorded_result(const JobPlan& plan, std::string& why);

// Writes <dir>/job_result.json atomically (the "job finished" marker).
void write_job_result(const JobPlan& plan, const JobResult& r);

// Removes what an earlier run of the job left (reports, result marker, log).
void clear_job_dir(const JobPlan& plan);

// Size ratio, backend and mode from quantize_report.json; top-1, drop and
// speedup from evaluate_report.json. Absent or unreadable reports leave the
// fields unset.
void read_job_metrics(const std::string& dir, JobResult& r);

// The gate messages from evaluate_report.json, if it records any.
std::vector<std::string> violated_gates(const std::string& dir);

// The last `n` lines of a file, each at most 400 bytes and valid UTF-8.
std::vector<std::string> tail_lines(const std::string& path, size_t n);

// The message a failed tao-quant process printed last ("tao-quant: error: X"
// -> "X"), or "".
std::string error_message(const std::vector<std::string>& tail);

// Valid UTF-8 (bad bytes become '?').
std::string sanitize_utf8(const std::string& s);

}  // namespace tq::batch_detail
