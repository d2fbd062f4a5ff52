// The report reader of a result pair (result_files.h): what evaluate and
// batch --resume accept, and the sentence for each report they refuse.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include "taoquant/result_files.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A folder with an artifact and the report quantize would write for it.
struct ResultDir {
  fs::path dir = fs::temp_directory_path() / ("tq_pair_" + std::to_string(::getpid()));
  fs::path artifact = dir / tq::artifact_name("libtorch");
  fs::path report = dir / "quantize_report.json";
  json good;
  ResultDir() {
    fs::create_directories(dir);
    std::ofstream(artifact) << "PK an artifact's bytes";
    good = {
        {"backend", {{"requested", "libtorch"}}},
        {"artifact", tq::artifact_fingerprint(artifact.string(), artifact.filename().string())}};
    write(good);
  }
  ~ResultDir() { fs::remove_all(dir); }
  void write(const json& j) const { std::ofstream(report) << j.dump(2); }
  std::string problem() const {
    return tq::result_pair_problem(artifact.string(), report.string());
  }
};

}  // namespace

TEST_CASE("result pair: the report's record of its artifact is checked field by field",
          "[result_files]") {
  ResultDir r;
  CHECK(r.problem() == "");
  CHECK(tq::reported_artifact_file(r.report.string()) == "quantized_model_libtorch.pth");
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["artifact"]["xxh64"] = 123; },
       "artifact.xxh64: expected 16 hex digits, found '123'"},
      {[](json& j) { j["artifact"]["xxh64"] = "XYZ"; },
       "artifact.xxh64: expected 16 hex digits, found '\"XYZ\"'"},
      {[](json& j) { j["artifact"].erase("xxh64"); },
       "artifact.xxh64: expected 16 hex digits, found nothing"},
      {[](json& j) { j["artifact"]["bytes"] = -5; },
       "artifact.bytes: expected a size in bytes, found '-5'"},
      {[](json& j) { j["artifact"]["file"] = 7; },
       "artifact.file: expected a file name, found '7'"},
      {[](json& j) { j.erase("artifact"); },
       "records no artifact (expected artifact: {file, bytes, xxh64})"},
      {[](json& j) {
         j = json::array({1, 2});
       },
       "is not a JSON object"},
  };
  for (const auto& [edit, expected] : cases) {
    json j = r.good;
    edit(j);
    r.write(j);
    const std::string p = r.problem();
    INFO(p);
    CHECK_THAT(p, StartsWith("unusable result: the report '" + r.report.string() + "'") &&
                      Contains(expected));
    CHECK(tq::refused_result(p));
    CHECK(tq::reported_artifact_file(r.report.string()).empty());
  }
}

TEST_CASE("result pair: a report that is not a regular JSON file, or none at all",
          "[result_files]") {
  ResultDir r;
  std::ofstream(r.report) << "{\"artifact\": ";
  CHECK_THAT(r.problem(), StartsWith("unusable result: the report '" + r.report.string() +
                                     "' is not valid JSON"));
  fs::remove(r.report);
  CHECK_THAT(r.problem(), StartsWith("incomplete result: '" + r.artifact.string() +
                                     "' has no report beside it"));
  fs::create_directory(r.report);
  CHECK(r.problem() ==
        "unusable result: the report '" + r.report.string() + "' is a folder, not a file");
  fs::remove(r.report);
  REQUIRE(::mkfifo(r.report.c_str(), 0600) == 0);  // nobody writes it: a read would block
  CHECK(r.problem() == "unusable result: the report '" + r.report.string() +
                           "' is a FIFO (named pipe), not a regular file");
  CHECK(tq::reported_artifact_file(r.report.string()).empty());
}

TEST_CASE("result pair: a missing or changed artifact, and another backend's report",
          "[result_files]") {
  ResultDir r;
  std::ofstream(r.artifact, std::ios::app) << "!";
  CHECK_THAT(r.problem(), StartsWith("incomplete result: '" + r.artifact.string() + "' (") &&
                              Contains("is not the artifact its report"));
  fs::remove(r.artifact);
  CHECK_THAT(r.problem(),
             StartsWith("incomplete result: the report '" + r.report.string() + "' describes '" +
                        r.artifact.string() + "', which does not exist"));
  // fakequant quantized into the same folder later: its report replaced ours.
  std::ofstream(r.artifact) << "PK an artifact's bytes";
  const fs::path other = r.dir / tq::artifact_name("fakequant");
  std::ofstream(other) << "PK another artifact";
  CHECK_THAT(tq::replaced_result_warning(r.dir.string(), "fakequant"),
             Contains("holds another backend's result ('quantized_model_libtorch.pth' and its "
                      "report); this run (backend 'fakequant') writes "
                      "'quantized_model_fakequant.pth' and replaces that report"));
  CHECK(tq::replaced_result_warning(r.dir.string(), "libtorch").empty());
  r.write({{"backend", {{"requested", "fakequant"}}},
           {"artifact", tq::artifact_fingerprint(other.string(), other.filename().string())}});
  CHECK(r.problem() == "no result: '" + r.artifact.string() + "' has no report; '" +
                           r.report.string() +
                           "' is the report of 'quantized_model_fakequant.pth' (backend "
                           "'fakequant'), a later quantize into the same results_dir with another "
                           "backend, which replaced this artifact's report (quantize again, or "
                           "give each backend its own results_dir)");
  CHECK(tq::result_pair_problem(other.string(), r.report.string()) == "");
}
