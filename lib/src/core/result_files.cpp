#include "taoquant/result_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "taoquant/batch.h"
#include "taoquant/error.h"

namespace tq {

namespace fs = std::filesystem;

std::string partial_path(const std::string& final_path) {
  return final_path + ".partial";
}

namespace {

void fsync_path(const std::string& path, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0)
    throw RuntimeError("cannot open " + what + " '" + path + "': " + std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw RuntimeError("cannot sync " + what + " '" + path + "': " + std::strerror(err));
}

}  // namespace

void sync_file(const std::string& path) {
  fsync_path(path, O_RDONLY, "file");
}

void sync_parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), O_RDONLY | O_DIRECTORY, "directory");
}

void rename_file(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    std::remove(from.c_str());
    throw RuntimeError("cannot rename '" + from + "' to '" + to + "': " + std::strerror(err));
  }
}

void rename_durably(const std::string& from, const std::string& to) {
  rename_file(from, to);
  sync_parent_dir(to);
}

nlohmann::json artifact_fingerprint(const std::string& path, const std::string& as_name) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec) throw RuntimeError("cannot read '" + path + "': " + ec.message());
  return {{"file", as_name}, {"bytes", bytes}, {"xxh64", hash_file(path)}};
}

std::string result_pair_problem(const std::string& artifact_path, const std::string& report_path) {
  const std::string hint =
      " (a quantize run was interrupted between writing the two; run quantize again)";
  std::error_code ec;
  if (!fs::exists(report_path, ec))
    return "incomplete result: '" + artifact_path + "' has no report beside it ('" + report_path +
           "' is missing)" + hint;
  nlohmann::json report;
  try {
    std::ifstream in(report_path);
    report = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return "incomplete result: the report '" + report_path + "' is not valid JSON" + hint;
  }
  const auto it = report.find("artifact");
  if (it == report.end() || !it->is_object() || !it->contains("xxh64"))
    return "";  // written before reports recorded the artifact's fingerprint
  const nlohmann::json actual = artifact_fingerprint(artifact_path, "");
  if (actual["bytes"] == (*it).value("bytes", nlohmann::json()) &&
      actual["xxh64"] == (*it)["xxh64"])
    return "";
  return "incomplete result: '" + artifact_path + "' (" +
         std::to_string(actual["bytes"].get<size_t>()) + " bytes, xxh64 " +
         actual["xxh64"].get<std::string>() + ") is not the artifact its report '" + report_path +
         "' describes (" + std::to_string((*it).value("bytes", size_t{0})) + " bytes, xxh64 " +
         (*it).value("xxh64", std::string("?")) + ")" + hint;
}

}  // namespace tq
