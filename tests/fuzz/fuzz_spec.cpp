// libFuzzer harness: the spec parser with overrides and interpolation.
// Input: the spec text, then (after a NUL byte) command-line overrides, one
// per line. Every refusal must be a tq::Error; anything else (another
// exception, a crash, a leak, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "taoquant/error.h"
#include "taoquant/spec.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // unknown-key warnings
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    size_t start = nul + 1;
    while (start <= input.size()) {
      size_t end = input.find('\n', start);
      if (end == std::string::npos) end = input.size();
      overrides.push_back(input.substr(start, end - start));
      start = end + 1;
    }
  }
  try {
    tq::parse_spec_text(text, "fuzz.yaml", overrides);
  } catch (const tq::Error&) {
  }
  return 0;
}
