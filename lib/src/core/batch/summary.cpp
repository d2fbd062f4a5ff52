// Batch summaries: JSON (and back), the markdown table, JUnit XML, the exit
// code, and merging shard summaries.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <type_traits>
#include <variant>

#include <kainjow/mustache.hpp>

#include "core/messages.h"
#include "taoquant/batch.h"
#include "taoquant/result_files.h"
#include "taoquant/strings.h"

namespace tq {

using nlohmann::json;

namespace {

// Each job status and its name in summaries (to_string and the JSON reader).
constexpr std::pair<JobStatus, const char*> kStatusNames[] = {{JobStatus::kPassed, "passed"},
                                                              {JobStatus::kFailed, "failed"},
                                                              {JobStatus::kSkipped, "skipped"}};

}  // namespace

const char* to_string(JobStatus s) {
  for (const auto& [status, name] : kStatusNames)
    if (status == s) return name;
  return "?";
}

BatchSummary::Totals BatchSummary::totals() const {
  Totals t;
  t.jobs = jobs.size();
  for (const auto& j : jobs) {
    if (j.status == JobStatus::kPassed) ++t.passed;
    if (j.status == JobStatus::kFailed) ++t.failed;
    if (j.status == JobStatus::kFailed && j.failure == "gate") ++t.gate_failures;
    if (j.status == JobStatus::kSkipped) ++t.skipped;
    if (j.resumed) ++t.resumed;
  }
  return t;
}

namespace {

json opt(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}

[[noreturn]] void bad(const std::string& source, const std::string& key, const std::string& what) {
  throw UsageError(source + ": " + key + ": " + what);
}

const json& field(const json& j, const char* key, const std::string& source,
                  const std::string& ctx) {
  if (!j.is_object() || !j.contains(key)) bad(source, ctx + key, "missing");
  return j.at(key);
}

std::string str_field(const json& j, const char* key, const std::string& source,
                      const std::string& ctx) {
  const json& v = field(j, key, source, ctx);
  if (!v.is_string()) bad(source, ctx + key, "expected a string, found " + quote_value(v.dump()));
  return v.get<std::string>();
}

int64_t int_field(const json& j, const char* key, const std::string& source,
                  const std::string& ctx) {
  const json& v = field(j, key, source, ctx);
  if (!v.is_number_integer())
    bad(source, ctx + key, "expected an integer, found " + quote_value(v.dump()));
  return v.get<int64_t>();
}

std::optional<double> opt_field(const json& j, const char* key, const std::string& source,
                                const std::string& ctx) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  if (!j.at(key).is_number())
    bad(source, ctx + key, "expected a number or null, found " + quote_value(j.at(key).dump()));
  return j.at(key).get<double>();
}

std::string fixed(double v, int prec) {
  return format_fixed(v, prec);
}

std::string cell(const std::optional<double>& v, int prec, const char* suffix = "") {
  return v ? fixed(*v, prec) + suffix : "-";
}

// Text a user controls (an id, a path, an error message) in the markdown:
// HTML-escaped as the HTML summary's templates escape it (markdown renderers
// pass HTML through), pipes escaped (a table cell), no newline, no backtick
// (it would open a code span).
std::string md(const std::string& s) {
  std::string out;
  for (char c : kainjow::mustache::html_escape<std::string>(s)) {
    if (c == '|')
      out += "\\|";
    else if (c == '`')
      out += "&#96;";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out.empty() ? "-" : out;
}

// XML 1.0 escapes: the character, its escape and whether only attribute
// values need it (text keeps it as it is).
struct XmlEscape {
  char c;
  const char* escaped;
  bool attribute_only;
};
constexpr XmlEscape kXmlEscapes[] = {
    {'&', "&amp;", false},  {'<', "&lt;", false},  {'>', "&gt;", false}, {'"', "&quot;", true},
    {'\'', "&apos;", true}, {'\n', "&#10;", true}, {'\t', "&#9;", true}, {'\r', "&#13;", false}};

// XML 1.0 text/attribute escaping; characters XML cannot hold become '?'.
std::string xml(const std::string& s, bool attribute) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const auto* e = std::find_if(std::begin(kXmlEscapes), std::end(kXmlEscapes),
                                 [&](const XmlEscape& x) { return x.c == static_cast<char>(c); });
    if (e != std::end(kXmlEscapes))
      out += attribute || !e->attribute_only ? e->escaped : std::string(1, e->c);
    else
      out += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
  }
  return out;
}

std::string model_name(const JobResult& j) {
  return j.model.empty() ? "-" : std::filesystem::path(j.model).filename().string();
}

// Every field of a job in a summary, in the order the reader checks them (its
// first error is about the first bad field here). The member's type says how
// the field is written and read (see job_value and JobFieldReader).
using JobMember =
    std::variant<std::string JobResult::*, size_t JobResult::*, JobStatus JobResult::*,
                 int JobResult::*, double JobResult::*, std::optional<double> JobResult::*,
                 std::vector<std::string> JobResult::*, bool JobResult::*>;
struct JobField {
  const char* key;
  JobMember member;
};
const JobField kJobFields[] = {{"id", &JobResult::id},
                               {"index", &JobResult::index},
                               {"spec", &JobResult::spec},
                               {"model", &JobResult::model},
                               {"backend", &JobResult::backend},
                               {"mode", &JobResult::mode},
                               {"status", &JobResult::status},
                               {"failure", &JobResult::failure},
                               {"stage", &JobResult::stage},
                               {"exit_code", &JobResult::exit_code},
                               {"signal", &JobResult::signal},
                               {"duration_s", &JobResult::duration_s},
                               {"size_ratio", &JobResult::size_ratio},
                               {"fp32_top1", &JobResult::fp32_top1},
                               {"quant_top1", &JobResult::quant_top1},
                               {"top1_drop", &JobResult::top1_drop},
                               {"speedup", &JobResult::speedup},
                               {"message", &JobResult::message},
                               {"log_tail", &JobResult::log_tail},
                               {"resumed", &JobResult::resumed},
                               {"exports", &JobResult::exports}};

// A field's JSON: the status by name, a missing or non-finite number as null.
template <class T>
json job_value(const T& v) {
  if constexpr (std::is_same_v<T, JobStatus>)
    return to_string(v);
  else if constexpr (std::is_same_v<T, std::optional<double>>)
    return opt(v);
  else
    return v;
}

// Reads one field of a job's JSON by the member's type: a string; an index
// (an integer >= 0); a status name; an integer; a duration (a number, null
// for 0); a number or null; a list of strings; a flag (false when missing).
struct JobFieldReader {
  const json& j;
  const char* key;
  const std::string& source;
  const std::string& ctx;

  void read(std::string& v) const { v = str_field(j, key, source, ctx); }
  void read(size_t& v) const {
    const int64_t index = int_field(j, key, source, ctx);
    if (index < 0) bad(source, ctx + key, "must be >= 0");
    v = static_cast<size_t>(index);
  }
  void read(JobStatus& v) const {
    const std::string status = str_field(j, key, source, ctx);
    const auto* named = std::find_if(std::begin(kStatusNames), std::end(kStatusNames),
                                     [&](const auto& e) { return status == e.second; });
    if (named == std::end(kStatusNames))
      bad(source, ctx + key, "expected passed, failed or skipped, found '" + status + "'");
    v = named->first;
  }
  void read(int& v) const { v = static_cast<int>(int_field(j, key, source, ctx)); }
  void read(double& v) const { v = opt_field(j, key, source, ctx).value_or(0.0); }
  void read(std::optional<double>& v) const { v = opt_field(j, key, source, ctx); }
  void read(std::vector<std::string>& v) const {
    if (!j.is_object() || !j.contains(key)) return;  // an earlier summary: none
    const json& list = field(j, key, source, ctx);
    if (!list.is_array()) bad(source, ctx + key, "expected a list of strings");
    for (const auto& line : list) {
      if (!line.is_string()) bad(source, ctx + key, "expected a list of strings");
      v.push_back(line.get<std::string>());
    }
  }
  void read(bool& v) const {
    if (j.contains(key) && !j.at(key).is_boolean())
      bad(source, ctx + key, "expected true or false, found " + quote_value(j.at(key).dump()));
    v = j.contains(key) && j.at(key).get<bool>();
  }
};

}  // namespace

json job_result_to_json(const JobResult& r) {
  json j = json::object();
  for (const auto& f : kJobFields)
    std::visit([&](auto member) { j[f.key] = job_value(r.*member); }, f.member);
  return j;
}

JobResult job_result_from_json(const json& j, const std::string& source) {
  JobResult r;
  const std::string ctx = j.is_object() && j.contains("id") && j["id"].is_string()
                              ? "job " + quote_value(j["id"].get<std::string>()) + ": "
                              : "job: ";
  for (const auto& f : kJobFields)
    std::visit(
        [&](auto member) {
          JobFieldReader{j, f.key, source, ctx}.read(r.*member);
        },
        f.member);
  return r;
}

json summary_to_json(const BatchSummary& s) {
  const auto t = s.totals();
  json jobs = json::array();
  for (const auto& j : s.jobs) jobs.push_back(job_result_to_json(j));
  return {{"schema_version", kBatchSummarySchema},
          {"command", "batch"},
          {"tool", {{"name", "tao-quant"}, {"version", TQ_VERSION}}},
          {"manifest",
           {{"path", s.manifest_path},
            {"name", s.manifest_name},
            {"hash", s.manifest_hash},
            {"jobs", s.job_ids.size()},
            {"job_ids", s.job_ids}}},
          {"shard", {{"index", s.shard.index}, {"count", s.shard.count}}},
          {"totals",
           {{"jobs", t.jobs},
            {"passed", t.passed},
            {"failed", t.failed},
            {"gate_failures", t.gate_failures},
            {"skipped", t.skipped},
            {"resumed", t.resumed}}},
          {"wall_s", s.wall_s},
          {"jobs", jobs}};
}

BatchSummary summary_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) bad(source, "summary", "expected a JSON object (a batch_summary.json)");
  if (!j.contains("command") || j["command"] != "batch")
    bad(source, "command", "this is not a batch summary (expected \"command\": \"batch\")");
  const int64_t schema = int_field(j, "schema_version", source, "");
  if (schema != kBatchSummarySchema)
    bad(source, "schema_version",
        "is " + std::to_string(schema) + ", this tao-quant reads " +
            std::to_string(kBatchSummarySchema));
  BatchSummary s;
  const json& m = field(j, "manifest", source, "");
  s.manifest_path = str_field(m, "path", source, "manifest.");
  s.manifest_name = str_field(m, "name", source, "manifest.");
  s.manifest_hash = str_field(m, "hash", source, "manifest.");
  const json& ids = field(m, "job_ids", source, "manifest.");
  if (!ids.is_array()) bad(source, "manifest.job_ids", "expected a list of strings");
  for (const auto& id : ids) {
    if (!id.is_string()) bad(source, "manifest.job_ids", "expected a list of strings");
    s.job_ids.push_back(id.get<std::string>());
  }
  const json& sh = field(j, "shard", source, "");
  s.shard.index = static_cast<int>(int_field(sh, "index", source, "shard."));
  s.shard.count = static_cast<int>(int_field(sh, "count", source, "shard."));
  if (s.shard.count < 1 || s.shard.index < 1 || s.shard.index > s.shard.count)
    bad(source, "shard", "expected 1 <= index <= count, found " + quote_value(sh.dump()));
  s.wall_s = opt_field(j, "wall_s", source, "").value_or(0.0);
  const json& jobs = field(j, "jobs", source, "");
  if (!jobs.is_array()) bad(source, "jobs", "expected a list");
  for (const auto& job : jobs) {
    JobResult r = job_result_from_json(job, source);
    if (r.index >= s.job_ids.size() || s.job_ids[r.index] != r.id)
      bad(source, "job " + quote_value(r.id),
          "index " + std::to_string(r.index) + " does not match manifest.job_ids");
    s.jobs.push_back(std::move(r));
  }
  return s;
}

BatchSummary summary_from_text(const std::string& text, const std::string& source) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw UsageError(source + ": not a batch summary (not valid JSON)");
  return summary_from_json(j, source);
}

BatchSummary read_summary_file(const std::string& path) {
  std::string text;
  const std::string problem = read_file_capped(path, kMaxReportBytes, "batch summary", text);
  if (!problem.empty()) throw UsageError("report merge: " + quote_value(path) + " " + problem);
  return summary_from_text(text, path);
}

std::string summary_to_markdown(const BatchSummary& s) {
  std::ostringstream os;
  os << "| job | model | backend | mode | status | size ratio | fp32 top-1 | quant top-1 | "
        "top-1 drop | speedup | wall time | exports |\n";
  os << "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& j : s.jobs) {
    std::string status = to_string(j.status);
    if (j.status == JobStatus::kFailed) status = "**FAILED** (" + j.failure + ")";
    if (j.resumed) status += " (resumed)";
    os << "| " << md(j.id) << " | " << md(model_name(j)) << " | " << md(j.backend) << " | "
       << md(j.mode) << " | " << status << " | " << cell(j.size_ratio, 3) << " | "
       << cell(j.fp32_top1, 2) << " | " << cell(j.quant_top1, 2) << " | " << cell(j.top1_drop, 2)
       << " | " << cell(j.speedup, 2, "x") << " | "
       << (j.status == JobStatus::kSkipped ? "-" : fixed(j.duration_s, 1) + " s") << " | "
       << (j.exports.empty() ? "-" : md(join(j.exports, ", "))) << " |\n";
  }
  const auto t = s.totals();
  os << "\n**" << t.jobs << " jobs**: " << t.passed << " passed, " << t.failed << " failed";
  if (t.gate_failures) os << " (" << t.gate_failures << " quality gate)";
  os << ", " << t.skipped << " skipped";
  if (t.resumed) os << "; " << t.resumed << " reused from an earlier run (--resume)";
  os << ". Manifest " << md(s.manifest_path);
  if (s.shard.sharded()) os << ", shard " << s.shard.str();
  os << ".\n";
  bool header = false;
  for (const auto& j : s.jobs) {
    if (j.status != JobStatus::kFailed) continue;
    if (!header) os << "\nFailures:\n\n";
    header = true;
    os << "- " << md(j.id) << ": " << md(j.message) << "\n";
  }
  return os.str();
}

std::string summary_to_junit(const BatchSummary& s) {
  const auto t = s.totals();
  double total_time = 0;
  for (const auto& j : s.jobs) total_time += j.duration_s;
  const std::string suite = "tao-quant.batch." + s.manifest_name;
  std::ostringstream os;
  auto counts = [&](const std::string& time) {
    return "tests=\"" + std::to_string(t.jobs) + "\" failures=\"" + std::to_string(t.failed) +
           "\" errors=\"0\" skipped=\"" + std::to_string(t.skipped) + "\" time=\"" + time + "\"";
  };
  const std::string time = fixed(total_time, 3);
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << "<testsuites name=\"" << xml("tao-quant batch " + s.manifest_path, true) << "\" "
     << counts(time) << ">\n";
  os << "  <testsuite name=\"" << xml(suite, true) << "\" " << counts(time) << ">\n";
  os << "    <properties>\n";
  auto prop = [&](const std::string& k, const std::string& v) {
    os << "      <property name=\"" << xml(k, true) << "\" value=\"" << xml(v, true) << "\"/>\n";
  };
  prop("manifest", s.manifest_path);
  prop("manifest_hash", s.manifest_hash);
  prop("shard", s.shard.str());
  os << "    </properties>\n";
  for (const auto& j : s.jobs) {
    os << "    <testcase name=\"" << xml(j.id, true) << "\" classname=\"" << xml(suite, true)
       << "\" time=\"" << fixed(j.duration_s, 3) << "\"";
    std::string details = "model " + (j.model.empty() ? std::string("-") : j.model) + ", backend " +
                          (j.backend.empty() ? "-" : j.backend) + ", mode " +
                          (j.mode.empty() ? "-" : j.mode) + ", spec " + j.spec;
    if (j.status == JobStatus::kPassed) {
      os << ">\n      <system-out>" << xml(details + (j.resumed ? " (resumed)" : ""), false)
         << "</system-out>\n    </testcase>\n";
      continue;
    }
    os << ">\n";
    if (j.status == JobStatus::kSkipped) {
      os << "      <skipped message=\"" << xml(j.message, true) << "\"/>\n";
    } else {
      std::string body =
          details + "\nstage " + j.stage + ", exit code " + std::to_string(j.exit_code) +
          (j.signal ? ", signal " + std::to_string(j.signal) : "") + "\n" + j.message + "\n";
      if (!j.log_tail.empty()) body += "--- last lines of the log ---\n";
      for (const auto& line : j.log_tail) body += line + "\n";
      os << "      <failure message=\"" << xml(j.message, true) << "\" type=\""
         << xml(j.failure, true) << "\">" << xml(body, false) << "</failure>\n";
    }
    os << "    </testcase>\n";
  }
  os << "  </testsuite>\n</testsuites>\n";
  return os.str();
}

ExitCode summary_exit_code(const BatchSummary& s) {
  bool gate = false;
  for (const auto& j : s.jobs) {
    if (j.status == JobStatus::kSkipped && j.failure == "interrupted") return ExitCode::kRuntime;
    if (j.status == JobStatus::kFailed && j.failure != "gate") return ExitCode::kRuntime;
    if (j.status == JobStatus::kFailed) gate = true;
  }
  return gate ? ExitCode::kGate : ExitCode::kOk;
}

BatchSummary merge_summaries(const std::vector<BatchSummary>& parts,
                             const std::vector<std::string>& sources) {
  if (parts.empty()) throw UsageError("report merge: no summaries given");
  const BatchSummary& first = parts[0];
  BatchSummary out;
  out.manifest_path = first.manifest_path;
  out.manifest_name = first.manifest_name;
  out.manifest_hash = first.manifest_hash;
  out.job_ids = first.job_ids;
  std::vector<const JobResult*> slots(first.job_ids.size(), nullptr);
  std::vector<size_t> from(first.job_ids.size(), 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    const BatchSummary& s = parts[p];
    if (s.manifest_hash != first.manifest_hash || s.job_ids != first.job_ids)
      throw UsageError("report merge: " + sources[p] + " is from a different manifest than " +
                       sources[0] + " (manifest hash " + s.manifest_hash + " vs " +
                       first.manifest_hash + ", " + std::to_string(s.job_ids.size()) + " vs " +
                       std::to_string(first.job_ids.size()) +
                       " jobs); merge only the shards of one run of one manifest");
    out.wall_s = std::max(out.wall_s, s.wall_s);
    for (const auto& j : s.jobs) {
      if (slots[j.index])
        throw UsageError("report merge: job '" + j.id + "' is in both " + sources[from[j.index]] +
                         " and " + sources[p] +
                         " (overlapping shards, or the same summary given twice)");
      slots[j.index] = &j;
      from[j.index] = p;
    }
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i])
      out.jobs.push_back(*slots[i]);
    else
      missing.push_back(first.job_ids[i]);
  }
  if (!missing.empty()) {
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 10; ++i) names += (i ? ", " : "") + missing[i];
    if (missing.size() > 10) names += ", ...";
    throw UsageError("report merge: " + std::to_string(missing.size()) + " of " +
                     std::to_string(slots.size()) + " jobs are in none of the summaries (" + names +
                     "); pass the summary of every shard (" + std::to_string(first.shard.count) +
                     " shards)");
  }
  return out;
}

std::string write_batch_outputs(const BatchSummary& s, const std::string& out_dir,
                                const std::string& junit_path) {
  namespace fs = std::filesystem;
  const std::string base = s.shard.sharded()
                               ? "batch_summary.shard-" + std::to_string(s.shard.index) + "-of-" +
                                     std::to_string(s.shard.count)
                               : "batch_summary";
  const std::string json_path = (fs::path(out_dir) / (base + ".json")).string();
  write_text_atomic(
      json_path,
      summary_to_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_text_atomic((fs::path(out_dir) / (base + ".md")).string(), summary_to_markdown(s));
  if (!junit_path.empty()) write_text_atomic(junit_path, summary_to_junit(s));
  return json_path;
}

}  // namespace tq
