// libFuzzer harness: the batch manifest parser (YAML, interpolation, job
// templates, brace expansion). Relative paths are taken from a directory
// that does not exist, so model patterns match nothing; inputs that could
// glob the real file system (an absolute or ~ pattern with wildcards) are
// skipped so that a run's speed does not depend on the machine's files.
#include <cstddef>
#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

#include "taoquant/batch.h"
#include "taoquant/error.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool wild = text.find_first_of("*?[") != std::string::npos;
  if (text.find('~') != std::string::npos || (wild && text.find('/') != std::string::npos))
    return 0;
  try {
    tq::parse_manifest_text(text, "/nonexistent-tq-fuzz/manifest.yaml", "/nonexistent-tq-fuzz");
  } catch (const tq::Error&) {
  }
  return 0;
}
