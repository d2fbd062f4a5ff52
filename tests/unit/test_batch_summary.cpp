// Batch summaries: JSON round trip, the markdown table, JUnit XML (validated
// with libxml2 against tests/data/batch/junit.xsd), merging shards, exit codes.
#include <catch2/catch.hpp>

#include <functional>
#include <regex>
#include <utility>
#include <vector>

#include "batch_junit.h"
#include "taoquant/batch.h"

using Catch::Matchers::Contains;

namespace {

const std::string kXsd = std::string(TQ_SOURCE_DIR) + "/tests/data/batch/junit.xsd";

tq::JobResult job(size_t index, const std::string& id, tq::JobStatus status,
                  const std::string& failure = "") {
  tq::JobResult r;
  r.id = id;
  r.index = index;
  r.spec = "specs/zoo/" + id + ".yaml";
  r.model = "models/" + id + ".pt";
  r.backend = "libtorch";
  r.mode = index % 2 ? "static_ptq" : "weight_only_ptq";
  r.status = status;
  r.failure = failure;
  r.stage = failure == "gate" ? "evaluate" : "quantize";
  r.duration_s = 1.5 + double(index);
  if (status == tq::JobStatus::kPassed) {
    r.size_ratio = 0.25 + 0.01 * double(index);
    r.fp32_top1 = 91.0;
    r.quant_top1 = 90.5 - double(index) / 10;
    r.top1_drop = *r.fp32_top1 - *r.quant_top1;
    r.speedup = 1.8;
  }
  if (status == tq::JobStatus::kFailed) {
    r.exit_code = failure == "signal" ? -1 : failure == "gate" ? 3 : 1;
    r.signal = failure == "signal" ? 11 : 0;
    r.message = "it broke: <b> & \"quoted\" | piped \x01 bell";
    r.log_tail = {"line one", "tao-quant: error: it broke <here> & there", "\ttabbed ]]> end"};
  }
  if (status == tq::JobStatus::kSkipped) {
    r.failure = "not_run";
    r.exit_code = -1;
    r.message = "not run: job 'a' failed and --keep-going is off";
  }
  return r;
}

tq::BatchSummary summary() {
  tq::BatchSummary s;
  s.manifest_path = "specs/zoo/manifest.yaml";
  s.manifest_name = "manifest";
  s.manifest_hash = "0123456789abcdef";
  s.job_ids = {"cnn-w8", "cnn-s8", "vit-w8", "vit-s8", "trunc", "hang", "gated"};
  s.jobs = {job(0, "cnn-w8", tq::JobStatus::kPassed),
            job(1, "cnn-s8", tq::JobStatus::kPassed),
            job(2, "vit-w8", tq::JobStatus::kPassed),
            job(3, "vit-s8", tq::JobStatus::kSkipped),
            job(4, "trunc", tq::JobStatus::kFailed, "exit"),
            job(5, "hang", tq::JobStatus::kFailed, "timeout"),
            job(6, "gated", tq::JobStatus::kFailed, "gate")};
  s.wall_s = 12.5;
  return s;
}

// Cells of a markdown table row (split on unescaped pipes).
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cur += "\\|";
      ++i;
    } else if (row[i] == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += row[i];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("batch summary: JSON round trip and totals", "[batch]") {
  const tq::BatchSummary s = summary();
  const auto t = s.totals();
  CHECK(t.jobs == 7);
  CHECK(t.passed == 3);
  CHECK(t.failed == 3);
  CHECK(t.gate_failures == 1);
  CHECK(t.skipped == 1);
  const nlohmann::json j = tq::summary_to_json(s);
  CHECK(j["schema_version"] == tq::kBatchSummarySchema);
  CHECK(j["totals"]["failed"] == 3);
  CHECK(j["manifest"]["jobs"] == 7);
  CHECK(j["jobs"][0]["size_ratio"] == Approx(0.25));
  CHECK(j["jobs"][4]["size_ratio"].is_null());
  CHECK(j["jobs"][4]["log_tail"].size() == 3);
  const tq::BatchSummary back = tq::summary_from_json(j, "s.json");
  CHECK(tq::summary_to_json(back) == j);

  nlohmann::json broken = j;
  broken["jobs"][1]["status"] = "fine";
  CHECK_THROWS_WITH(tq::summary_from_json(broken, "s.json"),
                    Contains("s.json: job 'cnn-s8': status: expected passed, failed or skipped"));
  broken = j;
  broken["jobs"][1]["index"] = 5;
  CHECK_THROWS_WITH(tq::summary_from_json(broken, "s.json"),
                    Contains("does not match manifest.job_ids"));
  broken = j;
  broken.erase("command");
  CHECK_THROWS_WITH(tq::summary_from_json(broken, "s.json"), Contains("not a batch summary"));
}

TEST_CASE("batch summary: exit codes", "[batch]") {
  tq::BatchSummary s = summary();
  CHECK(tq::summary_exit_code(s) == tq::ExitCode::kRuntime);
  s.jobs.erase(s.jobs.begin() + 3, s.jobs.begin() + 6);  // keep the gate failure only
  CHECK(tq::summary_exit_code(s) == tq::ExitCode::kGate);
  s.jobs.pop_back();
  CHECK(tq::summary_exit_code(s) == tq::ExitCode::kOk);
  tq::JobResult interrupted = job(3, "vit-s8", tq::JobStatus::kSkipped);
  interrupted.failure = "interrupted";
  s.jobs.push_back(interrupted);
  CHECK(tq::summary_exit_code(s) == tq::ExitCode::kRuntime);
}

TEST_CASE("batch summary: the markdown table", "[batch]") {
  const tq::BatchSummary s = summary();
  const std::string md = tq::summary_to_markdown(s);
  std::vector<std::string> lines;
  std::istringstream is(md);
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  REQUIRE(lines.size() > 2 + s.jobs.size());
  const auto header = cells(lines[0]);
  CHECK(header.size() == 12);
  for (const char* col : {"model", "backend", "mode", "status", "size ratio", "fp32 top-1",
                          "quant top-1", "top-1 drop", "speedup", "wall time", "exports"}) {
    bool found = false;
    for (const auto& h : header) found = found || h.find(col) != std::string::npos;
    CHECK(found);
  }
  CHECK(std::regex_match(lines[1], std::regex(R"(\|(\s*:?-{3,}:?\s*\|){12})")));
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    INFO(lines[2 + i]);
    const auto row = cells(lines[2 + i]);
    REQUIRE(row.size() == header.size());
    CHECK(row[0] == " " + s.jobs[i].id + " ");
  }
  CHECK(lines[2 + s.jobs.size()].empty());  // the table ends
  CHECK_THAT(cells(lines[2])[5], Contains("0.250"));
  CHECK_THAT(cells(lines[2])[9], Contains("1.80x"));
  CHECK_THAT(cells(lines[6])[4], Contains("FAILED"));
  CHECK_THAT(md, Contains("7 jobs**: 3 passed, 3 failed (1 quality gate), 1 skipped"));
  CHECK_THAT(md, Contains("\\| piped"));  // a pipe in a message cannot break the table
}

TEST_CASE("batch summary: JUnit XML validates against the JUnit schema", "[batch]") {
  const tq::BatchSummary s = summary();
  const std::string xml = tq::summary_to_junit(s);
  const tqtest::JUnitDoc doc = tqtest::parse_junit(xml, kXsd);
  for (const auto& e : doc.errors) UNSCOPED_INFO(e);
  CHECK(doc.errors.empty());
  CHECK(doc.root_name == "testsuites");
  CHECK(doc.root_attrs.at("tests") == "7");
  CHECK(doc.root_attrs.at("failures") == "3");
  CHECK(doc.root_attrs.at("errors") == "0");
  REQUIRE(doc.suites.size() == 1);
  const auto& suite = doc.suites[0];
  CHECK(suite.attrs.at("name") == "tao-quant.batch.manifest");
  CHECK(suite.attrs.at("tests") == "7");
  CHECK(suite.attrs.at("failures") == "3");
  CHECK(suite.attrs.at("skipped") == "1");
  CHECK(std::stod(suite.attrs.at("time")) == Approx(1.5 * 7 + 21).epsilon(1e-3));
  REQUIRE(suite.cases.size() == 7);
  for (size_t i = 0; i < 7; ++i) {
    const auto& c = suite.cases[i];
    CHECK(c.attrs.at("name") == s.jobs[i].id);
    CHECK(c.attrs.at("classname") == "tao-quant.batch.manifest");
    CHECK(std::stod(c.attrs.at("time")) == Approx(s.jobs[i].duration_s));
    CHECK(c.failure.has_value() == (s.jobs[i].status == tq::JobStatus::kFailed));
    CHECK(c.skipped.has_value() == (s.jobs[i].status == tq::JobStatus::kSkipped));
  }
  const auto& trunc = suite.cases[4];
  // Escaped on the way out, intact on the way in (the control char becomes '?').
  CHECK(trunc.failure->at("message") == "it broke: <b> & \"quoted\" | piped ? bell");
  CHECK(trunc.failure->at("type") == "exit");
  CHECK_THAT(trunc.failure_text, Contains("tao-quant: error: it broke <here> & there"));
  CHECK_THAT(trunc.failure_text, Contains("\ttabbed ]]> end"));
  CHECK(suite.cases[5].failure->at("type") == "timeout");
  CHECK(suite.cases[6].failure->at("type") == "gate");
  CHECK_THAT(*suite.cases[3].skipped, Contains("--keep-going is off"));

  // The validator is not a rubber stamp: a testcase without a name fails.
  std::string bad = xml;
  const size_t at = bad.find("<testcase name=");
  bad.replace(at, std::string("<testcase name=").size(), "<testcase nom=");
  CHECK_FALSE(tqtest::parse_junit(bad, kXsd).errors.empty());
  CHECK_FALSE(tqtest::parse_junit(xml.substr(0, xml.size() / 2), kXsd).errors.empty());
}

TEST_CASE("batch summary: shards merge into the unsharded summary", "[batch]") {
  const tq::BatchSummary full = summary();
  for (int n : {2, 3, 7}) {
    std::vector<tq::BatchSummary> parts;
    std::vector<std::string> names;
    for (int i = n; i >= 1; --i) {  // any order
      tq::BatchSummary p = full;
      p.shard = {i, n};
      p.jobs.clear();
      for (const auto& j : full.jobs)
        if (p.shard.contains(j.index)) p.jobs.push_back(j);
      p.wall_s = 3;
      parts.push_back(p);
      names.push_back("shard" + std::to_string(i) + ".json");
    }
    const tq::BatchSummary merged = tq::merge_summaries(parts, names);
    nlohmann::json a = tq::summary_to_json(merged), b = tq::summary_to_json(full);
    a.erase("wall_s");
    b.erase("wall_s");
    CHECK(a == b);
  }

  tq::BatchSummary left = full, right = full;
  left.shard = {1, 2};
  right.shard = {2, 2};
  left.jobs.assign(full.jobs.begin(), full.jobs.begin() + 4);
  right.jobs.assign(full.jobs.begin() + 3, full.jobs.end());
  CHECK_THROWS_WITH(tq::merge_summaries({left, right}, {"L.json", "R.json"}),
                    Contains("job 'vit-s8' is in both L.json and R.json"));
  right.jobs.erase(right.jobs.begin());
  right.manifest_hash = "fedcba9876543210";
  CHECK_THROWS_WITH(tq::merge_summaries({left, right}, {"L.json", "R.json"}),
                    Contains("R.json is from a different manifest than L.json"));
  right.manifest_hash = left.manifest_hash;
  right.jobs.pop_back();
  try {
    tq::merge_summaries({left, right}, {"L.json", "R.json"});
    FAIL("merged");
  } catch (const tq::UsageError& e) {
    CHECK(e.code() == tq::ExitCode::kUsage);
    CHECK_THAT(e.what(), Contains("1 of 7 jobs are in none of the summaries (gated)"));
  }
}

TEST_CASE("batch summary: the markdown escapes what a user wrote as the HTML summary does",
          "[batch]") {
  tq::BatchSummary s = summary();
  s.manifest_path = "m<script>alert(1)</script>.yaml";
  s.jobs[4].model = "models/<img src=x onerror=alert(7)>.pt";
  s.jobs[4].message = "model '<img src=x onerror=alert(7)>' does not exist `code` | & \"q\" 'a'";
  const std::string md = tq::summary_to_markdown(s);
  INFO(md);
  CHECK_THAT(md, !Contains("<img") && !Contains("<script") && !Contains("`"));
  CHECK_THAT(md, Contains("&lt;img src=x onerror=alert(7)&gt;.pt"));
  CHECK_THAT(md, Contains("- trunc: model &apos;&lt;img src=x onerror=alert(7)&gt;&apos; does "
                          "not exist &#96;code&#96; \\| &amp; &quot;q&quot;"));
  CHECK_THAT(md, Contains("Manifest m&lt;script&gt;alert(1)&lt;/script&gt;.yaml"));
  // The table keeps its 11 cells per row.
  std::istringstream is(md);
  std::string line;
  for (int i = 0; i < 2 + 5; ++i) std::getline(is, line);
  CHECK(cells(line).size() == 12);
}

TEST_CASE("batch summary: a summary file of the wrong types is refused naming the key", "[batch]") {
  const nlohmann::json good = tq::summary_to_json(summary());
  CHECK_NOTHROW(tq::summary_from_text(good.dump(), "s.json"));
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["command"] = 5; }, "s.json: command: this is not a batch summary"},
      {[](nlohmann::json& j) { j["wall_s"] = "long"; },
       "s.json: wall_s: expected a number or null, found '\"long\"'"},
      {[](nlohmann::json& j) { j["jobs"][0]["resumed"] = "yes"; },
       "s.json: job 'cnn-w8': resumed: expected true or false, found '\"yes\"'"},
      {[](nlohmann::json& j) { j["jobs"][0]["id"] = std::string(1000, 'x'); },
       "(1,000 characters): index 0 does not match manifest.job_ids"},
  };
  for (const auto& [edit, expected] : cases) {
    nlohmann::json j = good;
    edit(j);
    try {
      tq::summary_from_text(j.dump(), "s.json");
      FAIL("accepted");
    } catch (const tq::UsageError& e) {
      CHECK_THAT(std::string(e.what()), Contains(expected));
    }
  }
  CHECK_THROWS_WITH(tq::summary_from_text("{\"jobs\": [", "s.json"),
                    Contains("s.json: not a batch summary (not valid JSON)"));
}
