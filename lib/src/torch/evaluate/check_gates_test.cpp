// evaluate's gates: a gate whose value was not measured (null) fails; it
// never passes.
#include <catch2/catch.hpp>

#include <limits>

#include "eval_impl.h"

TEST_CASE("evaluate gates: a value that is null or NaN fails, never passes", "[evaluate][gates]") {
  tq::GatesSpec g;
  for (const auto& d : tq::gate_table())
    if (d.uses & tq::kEvaluateGate) g.limits[d.gate] = d.at_most ? 1e9 : -1e9;
  tq::EvaluateOutcome nothing;  // nothing measured
  nothing.models.resize(1);
  const auto results = tq::eval::check_gates(g, nothing);
  REQUIRE(results.size() == g.limits.size());
  for (const auto& r : results) {
    INFO(r.name);
    CHECK_FALSE(r.value.has_value());
    CHECK_FALSE(r.passed);
  }
  tq::EvaluateOutcome nan = nothing;
  nan.top1_drop = std::numeric_limits<double>::quiet_NaN();
  nan.size_ratio = std::numeric_limits<double>::quiet_NaN();
  nan.latency_batch_sizes = {1};
  nan.speedup = {std::numeric_limits<double>::quiet_NaN()};
  for (const auto& r : tq::eval::check_gates(g, nan)) {
    INFO(r.name);
    CHECK_FALSE(r.passed);
  }
}
