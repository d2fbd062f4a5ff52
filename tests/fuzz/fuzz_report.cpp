// libFuzzer harness: the report readers, files a user may hand over. The
// input is read as a quantize report beside an artifact (result_pair's
// check, as evaluate and batch --resume make it) and as a batch summary
// (report merge). A refusal of a summary must be a tq::Error, of a report a
// sentence; an accepted summary must write back to JSON that reads back the
// same, and render as markdown and JUnit.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "taoquant/batch.h"
#include "taoquant/error.h"
#include "taoquant/result_files.h"

namespace {

// An artifact file for the reports to describe, made once, removed at exit.
struct ArtifactFile {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tq_fuzz_report_" + std::to_string(::getpid()));
  std::string path = (dir / "quantized_model_libtorch.pth").string();
  ArtifactFile() {
    std::filesystem::create_directories(dir);
    std::ofstream(path) << "PK fuzz artifact";
  }
  ~ArtifactFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::string& artifact() {
  static const ArtifactFile file;
  return file.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string problem = tq::report_pair_problem(text, "fuzz_report.json", artifact());
  if (!problem.empty() && !tq::refused_result(problem)) __builtin_trap();
  tq::BatchSummary s;
  try {
    s = tq::summary_from_text(text, "fuzz_summary.json");
  } catch (const tq::Error&) {
    return 0;
  }
  const std::string json =
      tq::summary_to_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  try {
    const auto again = tq::summary_from_text(json, "again.json");
    if (tq::summary_to_json(again).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) !=
        json)
      __builtin_trap();
  } catch (const tq::Error&) {
    __builtin_trap();
  }
  (void)tq::summary_to_markdown(s);
  (void)tq::summary_to_junit(s);
  return 0;
}
