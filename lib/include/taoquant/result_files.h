// The artifact and its report are one result. `quantize` writes both under
// temporary names, makes them durable (fsync), then renames the report into
// place first and the artifact last. The report records the artifact's size
// and XXH64 (`artifact_fingerprint`), so a reader can tell a complete pair
// from one a run left behind when it was killed between the two renames
// (`result_pair_problem`): `evaluate` and `batch --resume` refuse such a pair.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

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

// {file: the name `as_name` will have, bytes, xxh64} of the file at `path`.
nlohmann::json artifact_fingerprint(const std::string& path, const std::string& as_name);

// "" when the report at `report_path` describes the artifact at
// `artifact_path` (or was written by a tao-quant that recorded no
// fingerprint); otherwise what is wrong, in a sentence.
std::string result_pair_problem(const std::string& artifact_path, const std::string& report_path);

}  // namespace tq
