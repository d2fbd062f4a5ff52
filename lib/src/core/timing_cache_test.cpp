// The timing cache file: round trip, what a foreign cache is told, engines.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "taoquant/timing_cache.h"

using Catch::Matchers::Contains;

namespace {

tq::TimingEnv env() {
  tq::TimingEnv e;
  e.libtorch = "1.13.0";
  e.cpu = "Test CPU";
  e.isa = "avx2 fma";
  e.threads = 2;
  return e;
}

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("tq_timing_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace

TEST_CASE("timing cache: saved entries load back exactly, and the same entries give the same bytes",
          "[timing]") {
  tq::TimingCache c(env());
  c.bind_engine("onednn");
  c.put("model/a/bs=32/int8", 0.1 + 0.2);  // not a short decimal: must round-trip exactly
  c.put("layer/Linear/w=10x256/x=256/bs=1/fp32", 1e-3 / 3);
  CHECK(c.measured_count() == 2);
  const std::string p = tmp_path("a.json");
  c.save(p);
  auto back = tq::TimingCache::load(p, env(), {"spec.yaml", 3, 3});
  CHECK(back.given());
  CHECK(back.engine() == "onednn");
  CHECK(back.find("model/a/bs=32/int8") == 0.1 + 0.2);
  CHECK(back.find("layer/Linear/w=10x256/x=256/bs=1/fp32") == 1e-3 / 3);
  CHECK_FALSE(back.find("model/b/bs=1/int8"));
  CHECK(back.read_count() == 2);
  CHECK(back.measured_count() == 0);
  CHECK(back.to_json().dump() == c.to_json().dump());
  back.bind_engine("onednn");
  CHECK_THROWS_WITH(back.bind_engine("qnnpack"),
                    Contains("spec.yaml:3:3: timing cache '" + p +
                             "' was measured with engine 'onednn'; this run uses 'qnnpack'"));
  std::filesystem::remove(p);
}

TEST_CASE("timing cache: every field that differs from this machine is named", "[timing]") {
  tq::TimingEnv here = env(), there = env();
  CHECK(there.differences(here).empty());
  there.cpu = "Other CPU";
  there.threads = 16;
  there.isa = "asimd";
  CHECK(there.differences(here) ==
        "cpu: 'Other CPU' in the cache, 'Test CPU' here; isa: 'asimd' in the cache, 'avx2 fma' "
        "here; threads: 16 in the cache, 2 here");
  tq::TimingCache c(there);
  const std::string p = tmp_path("b.json");
  c.save(p);
  try {
    tq::TimingCache::load(p, here, {"s.yaml", 7, 0});
    FAIL("a foreign cache was accepted");
  } catch (const tq::SpecError& e) {
    CHECK(e.code() == tq::ExitCode::kUsage);
    CHECK_THAT(std::string(e.what()), Contains("s.yaml:7: timing cache"));
    CHECK_THAT(std::string(e.what()), Contains("threads: 16 in the cache, 2 here"));
  }
  std::filesystem::remove(p);
}
