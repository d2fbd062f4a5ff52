// libFuzzer harness: the timing cache reader (TimingCache::parse), a file a
// user may hand over (quantize.timing_cache). Every refusal must be a
// tq::SpecError; an accepted cache must write back to JSON that reads back
// to the same cache (same entries, same bytes).
#include <cstddef>
#include <cstdint>
#include <string>

#include "taoquant/error.h"
#include "taoquant/timing_cache.h"

namespace {

tq::TimingEnv here() {
  tq::TimingEnv e;
  e.libtorch = "1.13.0";
  e.cpu = "Fuzz CPU";
  e.isa = "avx2 fma";
  e.threads = 2;
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const tq::SourceLoc loc{"fuzz.yaml", 1, 1};
  std::string json;
  try {
    json = tq::TimingCache::parse(text, "fuzz.json", here(), loc).to_json().dump(2);
  } catch (const tq::SpecError&) {
    return 0;
  }
  // Accepted: what it writes is a cache this reader accepts, unchanged.
  try {
    if (tq::TimingCache::parse(json, "again.json", here(), loc).to_json().dump(2) != json)
      __builtin_trap();
  } catch (const tq::SpecError&) {
    __builtin_trap();
  }
  return 0;
}
