// The gate table: its rows, the checks, and the spec reader that reads it for
// evaluate.gates and quantize.tune.
#include <catch2/catch.hpp>

#include <set>

#include "taoquant/gates.h"
#include "taoquant/spec.h"

using Catch::Matchers::Contains;
using tq::Gate;

namespace {

std::string spec_error(const std::string& text) {
  try {
    tq::parse_spec_text(text, "spec.yaml");
  } catch (const tq::SpecError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("gate table: one row per gate, unique names, sane ranges", "[gates]") {
  std::set<std::string> names;
  for (const auto& d : tq::gate_table()) {
    INFO(d.name);
    CHECK(names.insert(d.name).second);
    CHECK(&tq::gate_def(d.gate) == &d);
    CHECK(d.lo < d.hi);
    CHECK(d.scale > 0);
    CHECK(d.uses != 0u);
    CHECK(std::string(d.help).size() > 10);
  }
  CHECK(names.size() == 8);
  CHECK(tq::gate_names(tq::kTuneGate) == std::vector<std::string>{"max_top1_drop", "min_sqnr_db",
                                                                  "min_top1_agreement",
                                                                  "min_speedup", "effective_bits"});
  CHECK(tq::gate_names(tq::kEvaluateGate).size() == 7);
}

TEST_CASE("GatesSpec: bounds in the table's direction, messages with units", "[gates]") {
  tq::GatesSpec g;
  CHECK(g.empty());
  g.limits[Gate::kMaxTop1Drop] = 0.5;
  g.limits[Gate::kMinSqnrDb] = 30;
  g.limits[Gate::kEffectiveBits] = 4.25;
  CHECK(g.holds(Gate::kMaxTop1Drop, 0.5));
  CHECK_FALSE(g.holds(Gate::kMaxTop1Drop, 0.51));
  CHECK(g.holds(Gate::kMinSqnrDb, 30));
  CHECK_FALSE(g.holds(Gate::kMinSqnrDb, 29.99));
  CHECK(g.holds(Gate::kEffectiveBits, 4.25 + 1e-12));  // a sum of fractions
  CHECK_FALSE(g.holds(Gate::kEffectiveBits, 4.26));
  CHECK_FALSE(g.get(Gate::kMinTop1).has_value());
  CHECK(g.describe(Gate::kMaxTop1Drop, 0.812) == "max_top1_drop 0.50: measured 0.81 pp");
  CHECK(g.describe(Gate::kEffectiveBits, 4.5) == "effective_bits 4.25: measured 4.500");
}

TEST_CASE("gates in a spec: the table's keys, ranges and uses", "[gates][spec]") {
  auto s =
      tq::parse_spec_text("evaluate:\n  gates: {min_top1: 80, max_size_ratio: 0.3}\n", "spec.yaml");
  CHECK(s.evaluate.gates.get(Gate::kMinTop1) == 80.0);
  CHECK(s.evaluate.gates.get(Gate::kMaxSizeRatio) == 0.3);
  CHECK(s.evaluate.gates.limits.size() == 2);
  // Out of the row's range, with the range.
  CHECK_THAT(
      spec_error("evaluate:\n  gates: {min_top1: 150}\n"),
      Contains("spec.yaml:2:21: evaluate.gates.min_top1: expected a number in [0.0, 100.0]"));
  CHECK_THAT(spec_error("evaluate:\n  gates: {max_size_ratio: 0}\n"),
             Contains("expected a number > 0"));
  CHECK_THAT(spec_error("evaluate:\n  gates: {min_cosine: .nan}\n"), Contains("min_cosine"));
  // A tune-only gate in evaluate, with the allowed keys.
  CHECK_THAT(spec_error("evaluate:\n  gates: {effective_bits: 4}\n"),
             Contains("unknown key 'effective_bits'") && Contains("min_top1"));
  // An evaluate-only gate in tune.
  CHECK_THAT(spec_error("quantize:\n  tune: {min_cosine: 0.9}\n"),
             Contains("unknown key 'min_cosine'"));
  CHECK_THAT(spec_error("quantize:\n  tune: {effective_bits: 40}\n"),
             Contains("expected a number in [1.0, 32.0]"));
  CHECK_THAT(spec_error("quantize:\n  tune: {min_speedup: 1.2}\n"),
             Contains("no gate to tune for") && Contains("effective_bits"));
  CHECK(spec_error("quantize:\n  tune: {max_top1_drop: 0.5, min_speedup: 1.2}\n").empty());
}
