// One batch job on disk: its inputs and their fingerprint, the result marker
// (job_result.json), the metrics its reports hold, and its log.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "core/batch/internal.h"
#include "core/messages.h"
#include "taoquant/result_files.h"
#include "taoquant/spec.h"

namespace tq::batch_detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kResultFile = "job_result.json";

std::string stamp_of(const struct stat& st) {
  return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// Relative path, size and mtime of every file under a folder (sorted): a
// folder of thousands of images is not read in full.
std::string hash_listing(const std::string& dir) {
  std::vector<std::string> lines;
  std::error_code ec;
  for (auto it =
           fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    lines.push_back(it->path().lexically_relative(dir).string() + "\t" + stamp_of(st));
  }
  std::sort(lines.begin(), lines.end());
  Hash64 h;
  for (const auto& l : lines) h.update(l).update("\n", 1);
  return h.hex();
}

std::optional<json> read_json(const std::string& path) {
  std::string text;
  if (!read_file_capped(path, kMaxReportBytes, "report", text).empty()) return std::nullopt;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// The first of `paths` ("a.b.c") that holds a number.
std::optional<double> number_at(const json& j, std::initializer_list<const char*> paths) {
  for (const char* p : paths) {
    const json* cur = &j;
    std::string path = p;
    size_t start = 0;
    bool ok = true;
    while (ok) {
      const size_t dot = path.find('.', start);
      const std::string key = path.substr(start, dot == std::string::npos ? dot : dot - start);
      ok = cur->is_object() && cur->contains(key);
      if (ok) cur = &(*cur)[key];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (ok && cur->is_number() && std::isfinite(cur->get<double>())) return cur->get<double>();
  }
  return std::nullopt;
}

// {"1": x, "32": y}: the value at the largest batch size.
std::optional<double> at_largest_batch(const json& j) {
  if (!j.is_object()) return std::nullopt;
  long best = -1;
  std::optional<double> v;
  for (const auto& [k, x] : j.items()) {
    char* end = nullptr;
    const long bs = std::strtol(k.c_str(), &end, 10);
    if (!end || *end || !x.is_number() || bs <= best) continue;
    best = bs;
    v = x.get<double>();
  }
  return v;
}

}  // namespace

std::string HashCache::hash_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "missing";
  if (S_ISDIR(st.st_mode)) return "dir:" + hash_listing(path);
  // A FIFO or device is never read (it could block forever).
  if (!S_ISREG(st.st_mode))
    return std::string("special:") + (S_ISFIFO(st.st_mode) ? "fifo" : "other");
  const std::string stamp = stamp_of(st);
  auto it = memo_.find(path);
  if (it != memo_.end() && it->second.first == stamp) return it->second.second;
  std::string h;
  try {
    h = "file:" + hash_file(path);
  } catch (const Error& e) {
    return std::string("unreadable: ") + e.what();  // the job itself reports it
  }
  memo_[path] = {stamp, h};
  return h;
}

JobPlan plan_job(const BatchJob& job, const std::string& out_dir, HashCache& cache) {
  JobPlan p;
  p.job = &job;
  p.dir = (fs::path(out_dir) / job.id).string();
  p.overrides = job.overrides;
  p.overrides.push_back("results_dir=" + p.dir);
  p.overrides.push_back("quantize.results_dir=" + p.dir);

  json inputs = {{"tool_version", TQ_VERSION},
                 {"spec", {{"path", job.spec}, {"hash", cache.hash_path(job.spec)}}},
                 {"overrides", job.overrides},
                 {"evaluate", job.evaluate}};
  // The spec parser warns about odd keys; the job's own log shows that.
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::err);
  try {
    Spec spec = load_spec(job.spec, p.overrides);
    spdlog::set_level(level);
    p.model = spec.quantize.model_path;
    p.backend = spec.quantize.backend;
    p.mode = std::string(to_string(spec.quantize.mode));
    inputs["model"] = {{"path", p.model},
                       {"hash", p.model.empty() ? "" : cache.hash_path(p.model)}};
    json data = json::array();
    auto add = [&](const std::string& path) {
      if (!path.empty()) data.push_back({{"path", path}, {"hash", cache.hash_path(path)}});
    };
    for (const auto* src : {&spec.dataset.quant_calibration_dataset, &spec.dataset.test_dataset}) {
      if (!*src) continue;
      add((*src)->images_dir);
      for (const auto& f : (*src)->data_files) add(f);
    }
    add(spec.evaluate.checkpoint);
    inputs["data"] = data;
  } catch (const std::exception& e) {
    spdlog::set_level(level);
    p.spec_error = e.what();
  }
  if (p.model.empty()) p.model = job.model;
  p.inputs = inputs;
  p.fingerprint =
      Hash64().update(inputs.dump(-1, ' ', false, json::error_handler_t::replace)).hex();
  return p;
}

// What is wrong with the quantize result (artifact + report) in a job's
// folder, or "": the check `evaluate --is-quantized` makes (result_files.h),
// on the artifact the job's backend writes there. A passed job has one.
static std::string result_pair_in(const JobPlan& plan) {
  const fs::path dir(plan.dir);
  return result_pair_problem((dir / artifact_name(plan.backend)).string(),
                             (dir / "quantize_report.json").string());
}

std::optional<JobResult> recorded_result(const JobPlan& plan, std::string& why) {
  const std::string path = (fs::path(plan.dir) / kResultFile).string();
  auto j = read_json(path);
  if (!j) {
    why = fs::exists(path) ? "its job_result.json cannot be read" : "it has no result yet";
    return std::nullopt;
  }
  try {
    if (!j->is_object() || !j->contains("result") || !j->contains("fingerprint")) {
      why = "its job_result.json is incomplete";
      return std::nullopt;
    }
    JobResult r = job_result_from_json((*j)["result"], path);
    if (r.status != JobStatus::kPassed) {
      why = "it " + std::string(to_string(r.status)) + " last time";
      return std::nullopt;
    }
    if ((*j)["fingerprint"] != plan.fingerprint) {
      const json& old = j->value("inputs", json::object());
      why = "its inputs changed";
      for (const char* k : {"spec", "overrides", "model", "data", "evaluate", "tool_version"})
        if (!old.contains(k) || old[k] != plan.inputs.value(k, json())) {
          why = std::string("its ") + k + " changed";
          break;
        }
      return std::nullopt;
    }
    why = result_pair_in(plan);
    if (!why.empty()) return std::nullopt;
    r.index = plan.job->index;
    r.dir = plan.dir;
    r.resumed = true;
    return r;
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
}

void write_job_result(const JobPlan& plan, const JobResult& r) {
  json j = {{"schema_version", kBatchSummarySchema},
            {"fingerprint", plan.fingerprint},
            {"inputs", plan.inputs},
            {"result", job_result_to_json(r)}};
  write_text_atomic((fs::path(plan.dir) / kResultFile).string(),
                    j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void clear_job_dir(const JobPlan& plan) {
  std::error_code ec;
  for (const char* f : {kResultFile, "quantize_report.json", "evaluate_report.json", "log.txt"})
    fs::remove(fs::path(plan.dir) / f, ec);
}

namespace {

// The file names of the exports a quantize report lists (exports.files).
std::vector<std::string> exported_files(const json& report) {
  std::vector<std::string> out;
  const json* files = report.is_object() && report.contains("exports") &&
                              report["exports"].is_object() && report["exports"].contains("files")
                          ? &report["exports"]["files"]
                          : nullptr;
  if (!files || !files->is_array()) return out;
  for (const auto& f : *files)
    if (f.is_object() && f.contains("path") && f["path"].is_string())
      out.push_back(fs::path(f["path"].get<std::string>()).filename().string());
  return out;
}

}  // namespace

void read_job_metrics(const std::string& dir, JobResult& r) {
  if (auto q = read_json((fs::path(dir) / "quantize_report.json").string())) {
    r.size_ratio = number_at(*q, {"totals.file_ratio"});
    if ((*q).contains("backend") && (*q)["backend"].is_object())
      r.backend = (*q)["backend"].value("requested", r.backend);
    if ((*q).contains("mode") && (*q)["mode"].is_string()) r.mode = (*q)["mode"].get<std::string>();
    r.exports = exported_files(*q);
  }
  auto e = read_json((fs::path(dir) / "evaluate_report.json").string());
  if (!e) return;
  const json& m = e->contains("metrics") ? (*e)["metrics"] : json::object();
  // evaluate_report.json (schema 1): float/quantized blocks, metrics.top1_drop, ...
  r.fp32_top1 = number_at(*e, {"float.top1"});
  r.quant_top1 = number_at(*e, {"quantized.top1", "metrics.top1"});
  r.top1_drop = number_at(*e, {"metrics.top1_drop"});
  if (!r.top1_drop && r.fp32_top1 && r.quant_top1) r.top1_drop = *r.fp32_top1 - *r.quant_top1;
  if (m.is_object() && m.contains("speedup")) {
    r.speedup = m["speedup"].is_number() ? std::optional<double>(m["speedup"].get<double>())
                                         : at_largest_batch(m["speedup"]);
  }
  if (!r.size_ratio) r.size_ratio = number_at(*e, {"metrics.size_ratio", "size_ratio"});
}

std::vector<std::string> violated_gates(const std::string& dir) {
  std::vector<std::string> out;
  auto e = read_json((fs::path(dir) / "evaluate_report.json").string());
  if (!e || !e->contains("gates")) return out;
  const json& g = (*e)["gates"];
  // {passed, results: [{name, op, limit, value, passed}]}
  auto one = [&](const json& x) {
    if (!x.is_object() || x.value("passed", true)) return;
    std::string s = x.value("name", std::string("gate"));
    s += ": " + (x.contains("value") && !x["value"].is_null() ? x["value"].dump() : "not measured");
    if (x.contains("limit"))
      s += " (must be " + x.value("op", std::string("vs")) + " " + x["limit"].dump() + ")";
    out.push_back(s);
  };
  const json& list = g.is_object() && g.contains("results") ? g["results"] : g;
  if (list.is_array())
    for (const auto& x : list) one(x);
  return out;
}

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n == 2) ok = c >= 0xc2;  // no overlong forms
    if (!ok) {
      out += '?';
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

std::vector<std::string> tail_lines(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  // Read at most the last 64 KiB.
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - 65536);
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines;
  std::istringstream is(text);
  std::string line;
  bool first = start > 0;  // a partial first line
  while (std::getline(is, line)) {
    if (first) {
      first = false;
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A progress line redrawn with '\r' keeps only its last state.
    const size_t cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    if (line.size() > 400) line = line.substr(0, 400) + "...";
    lines.push_back(sanitize_utf8(line));
  }
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(n));
  return lines;
}

std::string error_message(const std::vector<std::string>& lines) {
  const std::string prefix = "tao-quant: error: ";
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const size_t at = it->find(prefix);
    if (at != std::string::npos) return it->substr(at + prefix.size());
  }
  return "";
}

}  // namespace tq::batch_detail
