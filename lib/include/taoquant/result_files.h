// The artifact and its report are one result. `quantize` writes both under
// temporary names, makes them durable (fsync), then renames the report into
// place first and the artifact last. The report records the artifact's size
// and XXH64 (`artifact_fingerprint`), so a reader can tell a complete pair
// from one a run left behind when it was killed between the two renames
// (`result_pair_problem`): `evaluate` and `batch --resume` refuse such a pair.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "taoquant/json.h"

namespace tq {

// Where a result file is written before its rename: FINAL + ".partial".
std::string partial_path(const std::string& final_path);

// fsync of a file's data, and of the directory holding `path` (so that a
// rename in it is durable). RuntimeError naming the file on failure.
void sync_file(const std::string& path);
void sync_parent_dir(const std::string& path);

// rename(from, to); RuntimeError on failure (`from` is removed then).
// rename_durably also syncs the directory afterwards.
void rename_file(const std::string& from, const std::string& to);
void rename_durably(const std::string& from, const std::string& to);

// Writes `data` to `path` through a temporary file and a rename, creating
// parent directories (fsync of the file, then rename_durably; the torch-free twin of
// write_file_atomic in model.h).
void write_text_atomic(const std::string& path, const std::string& data);
// The same, with the bytes streamed: `fill` calls `sink(data, n)` as often as
// it likes (a serializer writing straight into the temporary file, with no
// copy of the whole file in memory). `sink` never throws: a write error is
// kept, later bytes are dropped, and it is thrown once `fill` returns. An
// exception from `fill` removes the temporary file and propagates.
using ByteSink = std::function<void(const void* data, size_t n)>;
void write_streamed_atomic(const std::string& path,
                           const std::function<void(const ByteSink& sink)>& fill);

// {file: the name `as_name` will have, bytes, xxh64} of the file at `path`.
nlohmann::json artifact_fingerprint(const std::string& path, const std::string& as_name);

// The artifact's file name in results_dir: quantized_model_<backend>.pth,
// after the backend name the spec asked for (an alias stays an alias).
std::string artifact_name(const std::string& requested_backend);

// The largest report read back (quantize_report.json holds a histogram per
// activation: megabytes on large models; a larger file is not a report).
constexpr size_t kMaxReportBytes = size_t{256} << 20;

// "" when the report at `report_path` describes the artifact at
// `artifact_path` (its file name, size and XXH64); otherwise what is wrong,
// in a sentence that starts with "incomplete result" (a run was interrupted
// between its two renames: no report, or another artifact's bytes), "no
// result" (the report is another backend's result's, written later into the
// same folder) or "unusable result" (the report is not a regular file, not
// JSON, or its artifact record is missing or not what quantize writes).
std::string result_pair_problem(const std::string& artifact_path, const std::string& report_path);
// Whether `problem` is one of result_pair_problem's sentences.
bool refused_result(const std::string& problem);
// The same for the report's text, read from `report_path`.
std::string report_pair_problem(const std::string& report_text, const std::string& report_path,
                                const std::string& artifact_path);
// The artifact file name the report at `report_path` records, or "" when
// there is no readable report or it records none.
std::string reported_artifact_file(const std::string& report_path);
// A warning for a quantize run with `backend` into `results_dir` when the
// folder holds another backend's result (its report names another
// artifact, which is there): this run replaces that report. "" otherwise.
std::string replaced_result_warning(const std::string& results_dir, const std::string& backend);

}  // namespace tq
