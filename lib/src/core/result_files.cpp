#include "taoquant/result_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/messages.h"
#include "taoquant/error.h"
#include "taoquant/hash.h"

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

std::string artifact_name(const std::string& requested_backend) {
  return "quantized_model_" + requested_backend + ".pth";
}

namespace {

using nlohmann::json;

const char* const kInterrupted =
    " (a quantize run was interrupted between writing the two; run quantize again)";

// The report's record of its artifact ({file, bytes, xxh64}, as
// artifact_fingerprint writes it), or what is wrong with it.
std::string artifact_record(const json& report, const std::string& who, json& record) {
  const std::string fix =
      "; it is not a report tao-quant quantize wrote, or it was edited (run "
      "quantize again)";
  if (!report.is_object()) return who + " is not a JSON object" + fix;
  if (!report.contains("artifact") || !report["artifact"].is_object())
    return who + " records no artifact (expected artifact: {file, bytes, xxh64})" + fix;
  record = report["artifact"];
  const json& file = record.contains("file") ? record["file"] : json();
  const json& bytes = record.contains("bytes") ? record["bytes"] : json();
  const json& hash = record.contains("xxh64") ? record["xxh64"] : json();
  const auto shown = [](const json& v) { return v.is_null() ? "nothing" : quote_value(v.dump()); };
  if (!file.is_string() || file.get<std::string>().empty())
    return who + ": artifact.file: expected a file name, found " + shown(file) + fix;
  if (!bytes.is_number_unsigned())
    return who + ": artifact.bytes: expected a size in bytes, found " + shown(bytes) + fix;
  if (!hash.is_string() || hash.get<std::string>().size() != 16 ||
      hash.get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
    return who + ": artifact.xxh64: expected 16 hex digits, found " + shown(hash) + fix;
  return "";
}

// The report names another artifact: a later run with another backend
// wrote its own result into the same folder and replaced this one's report.
std::string replaced_by(const json& report, const json& record, const std::string& artifact,
                        const std::string& report_path) {
  std::string backend;
  if (report.contains("backend") && report["backend"].is_object() &&
      report["backend"].contains("requested") && report["backend"]["requested"].is_string())
    backend = " (backend " + quote_value(report["backend"]["requested"].get<std::string>()) + ")";
  return "no result: " + quote_value(artifact) + " has no report; " + quote_value(report_path) +
         " is the report of " + quote_value(record["file"].get<std::string>()) + backend +
         ", a later quantize into the same results_dir with another backend, which replaced "
         "this artifact's report (quantize again, or give each backend its own results_dir)";
}

}  // namespace

std::string report_pair_problem(const std::string& report_text, const std::string& report_path,
                                const std::string& artifact_path) {
  const std::string who = "unusable result: the report " + quote_value(report_path);
  const json report = json::parse(report_text, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded()) return who + " is not valid JSON" + kInterrupted;
  json record;
  if (std::string bad = artifact_record(report, who, record); !bad.empty()) return bad;
  if (record["file"] != fs::path(artifact_path).filename().string())
    return replaced_by(report, record, artifact_path, report_path);
  if (const std::string p = file_problem(artifact_path); !p.empty())
    return "incomplete result: the report " + quote_value(report_path) + " describes " +
           quote_value(artifact_path) + ", which " + p + kInterrupted;
  const json actual = artifact_fingerprint(artifact_path, "");
  if (actual["bytes"] == record["bytes"] && actual["xxh64"] == record["xxh64"]) return "";
  return "incomplete result: " + quote_value(artifact_path) + " (" +
         std::to_string(actual["bytes"].get<size_t>()) + " bytes, xxh64 " +
         actual["xxh64"].get<std::string>() + ") is not the artifact its report " +
         quote_value(report_path) + " describes (" + std::to_string(record["bytes"].get<size_t>()) +
         " bytes, xxh64 " + record["xxh64"].get<std::string>() + ")" + kInterrupted;
}

std::string result_pair_problem(const std::string& artifact_path, const std::string& report_path) {
  std::string text;
  const std::string problem = read_file_capped(report_path, kMaxReportBytes, "report", text);
  if (problem == "does not exist")
    return "incomplete result: " + quote_value(artifact_path) + " has no report beside it (" +
           quote_value(report_path) + " is missing)" + kInterrupted;
  if (!problem.empty())
    return "unusable result: the report " + quote_value(report_path) + " " + problem;
  return report_pair_problem(text, report_path, artifact_path);
}

std::string reported_artifact_file(const std::string& report_path) {
  std::string text;
  if (!read_file_capped(report_path, kMaxReportBytes, "report", text).empty()) return "";
  const json report = json::parse(text, nullptr, /*allow_exceptions=*/false);
  json record;
  if (report.is_discarded() || !artifact_record(report, "", record).empty()) return "";
  return record["file"].get<std::string>();
}

bool refused_result(const std::string& problem) {
  for (const char* start : {"incomplete result: ", "no result: ", "unusable result: "})
    if (problem.rfind(start, 0) == 0) return true;
  return false;
}

std::string replaced_result_warning(const std::string& results_dir, const std::string& backend) {
  const fs::path report = fs::path(results_dir) / "quantize_report.json";
  const std::string other = reported_artifact_file(report.string());
  const std::string mine = artifact_name(backend);
  std::error_code ec;
  if (other.empty() || other == mine || !fs::exists(fs::path(results_dir) / other, ec)) return "";
  return "results_dir " + quote_value(results_dir) + " holds another backend's result (" +
         quote_value(other) + " and its report); this run (backend " + quote_value(backend) +
         ") writes " + quote_value(mine) + " and replaces that report, so " + quote_value(other) +
         " is left without one and evaluate refuses it (give each backend its own results_dir)";
}

namespace {

// A file descriptor written in chunks of at least kChunk bytes (small
// writes are gathered), EINTR retried. It never throws: the first error is
// kept and later writes are dropped, so that a serializer calling it (whose
// own cleanup writes again) is never unwound from inside; error() says.
class FdWriter {
 public:
  static constexpr size_t kChunk = size_t{1} << 20;
  explicit FdWriter(int fd) : fd_(fd) {}
  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    if (buf_.size() + n < kChunk) return buf_.append(p, n), void();
    flush();
    if (n < kChunk) return buf_.append(p, n), void();
    write_all(p, n);
  }
  void flush() {
    write_all(buf_.data(), buf_.size());
    buf_.clear();
  }
  int error() const { return error_; }

 private:
  void write_all(const char* p, size_t n) {
    for (size_t off = 0; off < n && error_ == 0;) {
      const ssize_t w = ::write(fd_, p + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0)
        error_ = errno;
      else
        off += static_cast<size_t>(w);
    }
  }
  int fd_;
  int error_ = 0;
  std::string buf_;
};

}  // namespace

void write_streamed_atomic(const std::string& path,
                           const std::function<void(const ByteSink& sink)>& fill) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      throw RuntimeError("cannot create the directory '" + target.parent_path().string() +
                         "': " + ec.message());
  }
  std::random_device rd;
  const fs::path tmp = target.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                       std::to_string(rd() & 0xffffff);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError("cannot write '" + tmp.string() + "': " + std::strerror(errno));
  try {
    FdWriter out(fd);
    fill([&](const void* data, size_t n) { out.write(data, n); });
    out.flush();
    const int err = out.error() ? out.error() : ::fsync(fd) != 0 ? errno : 0;
    if (err) throw RuntimeError("cannot write '" + tmp.string() + "': " + std::strerror(err));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw RuntimeError("cannot write '" + tmp.string() + "': " + std::strerror(err));
  }
  rename_durably(tmp.string(), path);
}

void write_text_atomic(const std::string& path, const std::string& data) {
  write_streamed_atomic(path, [&](const ByteSink& sink) { sink(data.data(), data.size()); });
}

}  // namespace tq
