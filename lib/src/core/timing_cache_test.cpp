// The timing cache file: round trip, what a foreign cache is told, engines.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include "taoquant/timing_cache.h"

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;

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

namespace {

// The message of the SpecError that loading `text` as a cache throws (exit 2).
std::string refusal(const std::string& text) {
  const std::string p = tmp_path("schema.json");
  std::ofstream(p) << text;
  try {
    tq::TimingCache::load(p, env(), {"s.yaml", 4, 3});
  } catch (const tq::SpecError& e) {
    std::filesystem::remove(p);
    CHECK(e.code() == tq::ExitCode::kUsage);
    return e.what();
  }
  std::filesystem::remove(p);
  return "<accepted>";
}

// A valid cache's JSON with `edit` applied.
std::string edited(const std::function<void(nlohmann::json&)>& edit) {
  tq::TimingCache c(env());
  c.bind_engine("onednn");
  c.put("model/a/bs=1/fp32", 0.25);
  c.put("model/a/bs=1/int8", 0.125);
  nlohmann::json j = c.to_json();
  edit(j);
  return j.dump();
}

}  // namespace

TEST_CASE("timing cache: what its schema does not allow is refused at the field", "[timing]") {
  CHECK(refusal(edited([](nlohmann::json&) {})) == "<accepted>");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) {
         j["entries"] = {0.25, 0.125};
       },
       "entries: expected a map of {key: milliseconds}, found a list"},
      {[](nlohmann::json& j) {
         for (auto& [k, v] : j["entries"].items()) v = 0;
       },
       "entries: entry 'model/a/bs=1/fp32' is not a time in ms (expected a number > 0, found "
       "'0')"},
      {[](nlohmann::json& j) { j["entries"]["model/a/bs=1/int8"] = -1e-3; },
       "entry 'model/a/bs=1/int8' is not a time in ms"},
      {[](nlohmann::json& j) { j["machine"]["schema"] = 7; },
       "machine.schema: 7 where the cache's schema is 1"},
      {[](nlohmann::json& j) { j["machine"].erase("schema"); }, "machine.schema: is missing"},
      {[](nlohmann::json& j) { j["machine"]["threads"] = "2"; },
       "machine.threads: expected an integer >= 1, found '\"2\"'"},
      {[](nlohmann::json& j) { j["machine"]["threads"] = 2.5; },
       "machine.threads: expected an integer >= 1, found '2.5'"},
      {[](nlohmann::json& j) { j["machine"]["cpu"] = nullptr; },
       "machine.cpu: expected a string, found 'null'"},
      {[](nlohmann::json& j) { j["schema"] = 1.5; }, "schema: expected an integer >= 1"},
      {[](nlohmann::json& j) { j["engine"] = 3; }, "engine: expected a string, found '3'"},
      {[](nlohmann::json& j) { j["machine"] = "x86"; }, "machine: expected a map, found"},
      {[](nlohmann::json& j) { j["entires"] = j["entries"]; },
       "entires: unknown field (expected: format, schema, machine, engine, entries) (did you "
       "mean 'entries'?)"},
      {[](nlohmann::json& j) { j.erase("engine"); }, "engine: is missing"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string msg = refusal(edited(edit));
    INFO(msg);
    CHECK_THAT(msg, Contains("s.yaml:4:3: timing cache '") && Contains(expected));
  }
}

TEST_CASE("timing cache: only a regular file is read, and only up to the cap", "[timing]") {
  const std::string fifo = tmp_path("fifo.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // nobody writes it: a read would block forever
  auto refused = [](const std::string& path) {
    try {
      tq::TimingCache::load(path, env(), {"s.yaml", 2, 0});
    } catch (const tq::SpecError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  CHECK(refused(fifo) ==
        "s.yaml:2: timing cache '" + fifo + "' is a FIFO (named pipe), not a regular file");
  std::filesystem::remove(fifo);
  CHECK(refused("/dev/zero") ==
        "s.yaml:2: timing cache '/dev/zero' is a character device, not a regular file");
  CHECK_THAT(refused("/tmp"), EndsWith("timing cache '/tmp' is a folder, not a file"));
  CHECK_THAT(refused(tmp_path("missing.json")), EndsWith("missing.json' does not exist"));
}
