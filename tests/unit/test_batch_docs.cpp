// The scale-out recipes in docs/batch.md: each snippet parses (YAML or
// shell), the `--shard` argument it computes for every index its engine hands
// out gives exactly the shards 1..N, and the recipe merges.
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>

#include "taoquant/json.h"

#include "batch_test_util.h"
#include "doc_snippets.h"
#include "spec/node.h"
#include "taoquant/batch.h"

using Catch::Matchers::Contains;
using tqtest::ScratchDir;

namespace {

using nlohmann::json;

// A snippet read with tao-quant's own YAML reader.
json load_yaml(const std::string& text) {
  return tq::spec_detail::to_json(*tq::spec_detail::parse_yaml(text, "snippet"));
}

// A scalar as text (numbers as written).
std::string str(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

using tqtest::doc_section;
using tqtest::doc_snippet;

// The words bash makes of `command` with `env` set, e.g. to see what
// `--shard $((JOB_COMPLETION_INDEX + 1))/4` becomes.
std::vector<std::string> bash_words(const std::string& command, const std::string& env) {
  ScratchDir d("docs");
  tqtest::write(d / "words.sh", "set -- " + command + "\nprintf '%s\\n' \"$@\"\n");
  FILE* p = ::popen(("env " + env + " bash " + (d / "words.sh")).c_str(), "r");
  REQUIRE(p);
  std::vector<std::string> words;
  std::string cur;
  for (int c; (c = std::fgetc(p)) != EOF;) {
    if (c == '\n') {
      words.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(c);
    }
  }
  CHECK(::pclose(p) == 0);
  return words;
}

std::string shard_arg(const std::vector<std::string>& words) {
  for (size_t i = 0; i + 1 < words.size(); ++i)
    if (words[i] == "--shard") return words[i + 1];
  FAIL("no --shard in the command");
  return "";
}

// The shards must be exactly 1..n, once each.
void check_partition(const std::vector<std::string>& shards, int n) {
  REQUIRE(shards.size() == static_cast<size_t>(n));
  std::set<int> seen;
  for (const auto& s : shards) {
    INFO(s);
    const tq::Shard sh = tq::parse_shard(s);
    CHECK(sh.count == n);
    seen.insert(sh.index);
  }
  CHECK(seen.size() == static_cast<size_t>(n));
  CHECK(*seen.begin() == 1);
  CHECK(*seen.rbegin() == n);
}

// The command line that runs `tao-quant batch` (continuations joined).
std::string batch_command(const std::string& text) {
  std::string joined;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) {
    if (!line.empty() && line.back() == '\\') {
      joined += line.substr(0, line.size() - 1);
      continue;
    }
    joined += line + "\n";
  }
  std::istringstream js(joined);
  for (std::string line; std::getline(js, line);)
    if (line.find("tao-quant batch") != std::string::npos && line.rfind('#', 0) != 0) return line;
  FAIL("no tao-quant batch command in:\n" << text);
  return "";
}

}  // namespace

TEST_CASE("batch docs: GitHub Actions matrix recipe", "[batch][docs]") {
  json y = load_yaml(doc_snippet("github"));
  const json shards = y["jobs"]["zoo"]["strategy"]["matrix"]["shard"];
  REQUIRE(shards.is_array());
  std::string run;
  for (const auto& step : y["jobs"]["zoo"]["steps"])
    if (step.contains("run") && str(step["run"]).find("tao-quant batch") != std::string::npos)
      run = str(step["run"]);
  REQUIRE_FALSE(run.empty());
  std::vector<std::string> got;
  for (const auto& v : shards) {
    std::string cmd = run;
    const std::string expr = "${{ matrix.shard }}";
    for (size_t at; (at = cmd.find(expr)) != std::string::npos;)
      cmd.replace(at, expr.size(), str(v));
    got.push_back(shard_arg(bash_words(batch_command(cmd), "")));
  }
  check_partition(got, 4);
  std::string merge;
  for (const auto& step : y["jobs"]["merge"]["steps"])
    if (step.contains("run")) merge += str(step["run"]);
  CHECK_THAT(merge, Contains("tao-quant report merge"));
  CHECK(str(y["jobs"]["merge"]["needs"]) == "zoo");
}

TEST_CASE("batch docs: GitLab parallel recipe", "[batch][docs]") {
  json y = load_yaml(doc_snippet("gitlab"));
  const int n = y["zoo"]["parallel"].get<int>();
  std::string script;
  for (const auto& line : y["zoo"]["script"]) script += str(line) + "\n";
  std::vector<std::string> got;
  for (int i = 1; i <= n; ++i)
    got.push_back(
        shard_arg(bash_words(batch_command(script), "CI_NODE_INDEX=" + std::to_string(i) +
                                                        " CI_NODE_TOTAL=" + std::to_string(n))));
  check_partition(got, 4);
  std::string merge;
  for (const auto& line : y["zoo-merge"]["script"]) merge += str(line);
  CHECK_THAT(merge, Contains("tao-quant report merge"));
}

TEST_CASE("batch docs: Slurm array recipe", "[batch][docs]") {
  const std::string text = doc_snippet("slurm");
  CHECK(text.rfind("#!/bin/bash\n", 0) == 0);
  const size_t at = text.find("#SBATCH --array=");
  REQUIRE(at != std::string::npos);
  int first = 0, last = 0;
  REQUIRE(std::sscanf(text.c_str() + at, "#SBATCH --array=%d-%d", &first, &last) == 2);
  std::vector<std::string> got;
  for (int i = first; i <= last; ++i)
    got.push_back(
        shard_arg(bash_words(batch_command(text), "SLURM_ARRAY_TASK_ID=" + std::to_string(i))));
  check_partition(got, 4);
  CHECK_THAT(text, Contains("--dependency=afterany"));
  CHECK_THAT(text, Contains("tao-quant report merge"));
  // Slurm sets no CI=true: without --keep-going one failed job would skip the
  // rest of its task. --resume: a resubmitted task redoes only what is missing.
  CHECK_THAT(batch_command(text), Contains("--keep-going") && Contains("--resume"));
  // tests/slurm/test_slurm_recipe.cpp runs this snippet on a real cluster.
  CHECK_THAT(doc_section("slurm"), Contains("run by the test suite on a one-node Slurm 22.05"));
}

TEST_CASE("batch docs: Kubernetes Indexed Job recipe", "[batch][docs]") {
  json y = load_yaml(doc_snippet("kubernetes"));
  CHECK(str(y["kind"]) == "Job");
  CHECK(str(y["spec"]["completionMode"]) == "Indexed");
  const int n = y["spec"]["completions"].get<int>();
  const json c = y["spec"]["template"]["spec"]["containers"][0];
  const std::string cmd = str(c["args"][0]);
  std::vector<std::string> got;
  for (int i = 0; i < n; ++i)  // 0-based completion indexes
    got.push_back(
        shard_arg(bash_words(batch_command(cmd), "JOB_COMPLETION_INDEX=" + std::to_string(i))));
  check_partition(got, 4);
  CHECK_THAT(cmd, Contains("--keep-going") && Contains("--resume"));  // as for Slurm
  CHECK_THAT(doc_section("kubernetes"), Contains("tao-quant report merge"));
  CHECK_THAT(doc_section("kubernetes"), Contains("Not run here"));
}
