// Step timings and the process clock.
#include <catch2/catch.hpp>

#include <thread>

#include "taoquant/steps.h"

TEST_CASE("process_seconds counts from the process start and grows with it", "[steps]") {
  const double a = tq::process_seconds();
  REQUIRE(a > 0.0);
  REQUIRE(a < 7 * 24 * 3600.0);  // this process started less than a week ago
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double b = tq::process_seconds();
  CHECK(b >= a + 0.02);  // 10 ms clock ticks: at least 20 of the 50 ms show
}

TEST_CASE("StepTimer adds a repeated step to its first entry, in order", "[steps]") {
  tq::StepTimer t("test");
  t.step("load");
  t.step("run");
  t.step("load");
  const auto j = t.to_json();
  REQUIRE(j.size() == 2);
  CHECK(j[0]["step"] == "load");
  CHECK(j[1]["step"] == "run");
  CHECK(t.total_seconds() >= j[0]["seconds"].get<double>());
}
