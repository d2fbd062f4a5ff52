// The YAML reader against PyYAML: every file of tests/data/yaml_corpus and
// specs/ gets the verdict PyYAML gives it (recorded in verdicts.json by
// scripts/ref/make_yaml_verdicts.py), and every refusal is a SpecError
// (exit 2) that names the file and the line.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "taoquant/json.h"

#include "spec/node.h"
#include "taoquant/spec.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using tq::ExitCode;
using tq::spec_detail::parse_yaml;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kRoot = TQ_SOURCE_DIR;

struct Verdict {
  bool accepted = true;
  tq::SourceLoc loc;
  std::string msg;
  ExitCode code = ExitCode::kOk;
};

Verdict ours(const std::string& file) {
  const std::string text = slurp(kRoot + "/" + file);
  try {
    parse_yaml(text, file);
  } catch (const tq::SpecError& e) {
    return {false, e.loc(), e.what(), e.code()};
  }
  return {};
}

Verdict ours_text(const std::string& text) {
  try {
    parse_yaml(text, "spec.yaml");
  } catch (const tq::SpecError& e) {
    return {false, e.loc(), e.what(), e.code()};
  }
  return {};
}

}  // namespace

TEST_CASE("yaml corpus: tao-quant agrees with PyYAML on every case", "[spec][yaml]") {
  const auto doc = nlohmann::json::parse(slurp(kRoot + "/tests/data/yaml_corpus/verdicts.json"));
  const auto& cases = doc.at("cases");
  size_t refused = 0, agreed = 0;
  for (const auto& c : cases) {
    const std::string file = c.at("file");
    const bool accept = c.at("verdict") == "accept";
    const Verdict v = ours(file);
    INFO(file << ": PyYAML " << c.dump() << "\ntao-quant: " << v.msg);
    CHECK(v.accepted == accept);
    if (!v.accepted) {
      CHECK(v.code == ExitCode::kUsage);
      CHECK(v.loc.file == file);
      CHECK(v.loc.line > 0);
      CHECK_THAT(v.msg, StartsWith(file + ":" + std::to_string(v.loc.line) + ":"));
      if (!accept && c.at("line").is_number()) CHECK(v.loc.line == c.at("line").get<int>());
    }
    refused += accept ? 0 : 1;
    agreed += v.accepted == accept ? 1 : 0;
  }
  CHECK(agreed == cases.size());
  CHECK(cases.size() >= 100);
  CHECK(refused >= 60);
}

// The three ways yaml-cpp read a broken spec as a good one (issue 14).
TEST_CASE("yaml: a second document is refused, not dropped", "[spec][yaml]") {
  auto v = ours_text("results_dir: out\n---\nresults_dir: other\n");
  CHECK_FALSE(v.accepted);
  CHECK(v.loc.line == 2);
  CHECK_THAT(v.msg, Contains("found another document"));
  CHECK(ours_text("results_dir: out\n...\n").accepted);
}

TEST_CASE("yaml: an unclosed quote on the last line is refused", "[spec][yaml]") {
  for (const char* text : {"results_dir: \"out\n", "results_dir: \"out", "results_dir: 'out\n"}) {
    auto v = ours_text(text);
    INFO(text);
    CHECK_FALSE(v.accepted);
    CHECK(v.code == ExitCode::kUsage);
    CHECK(v.loc.line >= 1);
    CHECK_THAT(v.msg, Contains("invalid YAML") && Contains("quoted scalar"));
  }
}

TEST_CASE("yaml: a last line without a colon is refused", "[spec][yaml]") {
  auto v = ours_text("results_dir: out\nfoo\n");
  CHECK_FALSE(v.accepted);
  CHECK(v.loc.line == 3);
  CHECK_THAT(v.msg, Contains("could not find expected ':'") && Contains("line 2"));
  v = ours_text("results_dir: out\nfoo");
  CHECK_FALSE(v.accepted);
  CHECK(v.loc.line == 2);
}

TEST_CASE("yaml: deep nesting is an error with the line, not a crash", "[spec][yaml]") {
  const std::string limit = std::to_string(tq::spec_detail::kMaxYamlDepth);
  for (size_t depth : {2000, 100000}) {
    INFO(depth);
    auto v = ours_text("a: 1\nb: " + std::string(depth, '[') + std::string(depth, ']') + "\n");
    CHECK_FALSE(v.accepted);
    CHECK(v.loc.line == 2);
    CHECK(v.loc.column == 4 + tq::spec_detail::kMaxYamlDepth - 1);
    CHECK_THAT(v.msg, Contains("nesting deeper than " + limit + " levels"));
    std::string maps = "a:\n";
    for (size_t i = 1; i < 2000; ++i) maps += std::string(2 * i, ' ') + "b:\n";
    v = ours_text(maps);
    CHECK_FALSE(v.accepted);
    CHECK(v.loc.line == tq::spec_detail::kMaxYamlDepth + 1);
  }
  // As deep as allowed is fine; aliases cannot build a deeper tree.
  const std::string ok(tq::spec_detail::kMaxYamlDepth - 1, '[');
  CHECK(ours_text("a: " + ok + std::string(ok.size(), ']') + "\n").accepted);
  auto v = ours_text("a: &x " + ok + std::string(ok.size(), ']') + "\nb: [*x]\n");
  CHECK_FALSE(v.accepted);
  CHECK(v.loc.line == 2);
  CHECK_THAT(v.msg, Contains("nesting deeper than"));
}

TEST_CASE("yaml: tabs are refused where PyYAML refuses them", "[spec][yaml]") {
  for (const char* text : {"a: 1\t# c\n", "a:\tb\n", "a: b\t\n", "a: [1,\t2]\n", "a: \"x\"\t\n"}) {
    INFO(text);
    auto v = ours_text(text);
    CHECK_FALSE(v.accepted);
    CHECK(v.loc.line == 1);
    CHECK_THAT(v.msg, Contains("tab character"));
  }
  for (const char* text : {"a: \"x\ty\"\n", "a: 'x\ty'\n", "a: b # c\td\n", "a: |\n  x\ty\n"})
    CHECK(ours_text(text).accepted);
}

TEST_CASE("yaml: anchors, tags and the core scalars", "[spec][yaml]") {
  auto root = parse_yaml("a: &x {b: 1}\nc: *x\nd: !!str 12\ne: !!int 7\nf: ~\n", "s.yaml");
  auto j = tq::spec_detail::to_json(*root);
  CHECK(j.dump() == R"({"a":{"b":1},"c":{"b":1},"d":"12","e":7,"f":null})");
  // An alias is a copy: editing one does not change the other.
  root->find("c")->value->entries[0].value->text = "2";
  CHECK(tq::spec_detail::to_json(*root)["a"]["b"] == 1);
  auto v = ours_text("a: &x [1]\nb: &x [2]\n");
  CHECK_FALSE(v.accepted);
  CHECK(v.loc.line == 2);
  CHECK_THAT(v.msg, Contains("'&x' is defined twice (first at spec.yaml:1:4)"));
  v = ours_text("a: !foo 1\n");
  CHECK(v.loc.line == 1);
  CHECK_THAT(v.msg, Contains("a: the tag '!foo' is not allowed"));
  v = ours_text("a: &x [*x]\n");
  CHECK_THAT(v.msg, Contains("recursive alias"));
}
