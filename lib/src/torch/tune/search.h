// The search of `tao-quant tune`: its settings (quantize.tune), its gates,
// and the moves from one assignment of formats to the next. Not installed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "session.h"

namespace tq::tune {

struct TuneSettings {
  std::vector<DType> formats;  // quantized candidates, in the spec's order
  bool allow_float = false;    // `native` is a candidate
  GatesSpec gates;             // the tune gates of the gate table (gates.h)
  double time_budget_s = 600;
  std::string data;               // "test", "calibration" or "" (test when set)
  std::string search = "greedy";  // or "revert_worst" (the baseline)
  size_t samples = 2000;
};

// quantize.tune from the resolved spec (checked by the spec reader).
TuneSettings read_settings(const Spec& spec);

// A gate the spec's backend and mode cannot measure is a SpecError at its
// key (exit 2) before any work: min_speedup needs a backend that times the
// quantized model (ModeCaps::times_model) with its latency check on.
void check_gates_measurable(const Spec& spec, const TuneSettings& t);

// What one candidate measured: the output metrics, the effective bits, the
// float layers and (real runs of a backend that times itself) the speedup.
struct Measured {
  Metrics m;
  double bits = 32;
  size_t float_layers = 0;
  std::optional<double> speedup;
};

// The first gate `x` fails ("max_top1_drop 0.5: measured 0.81 pt"), "" when
// all hold. How far off it is, for ranking failing candidates: `shortfall`.
// A gate without a value fails ("min_speedup 2.00: not measured"), but in a
// simulation (`simulated`), which measures no speedup: that gate waits for
// the real runs.
std::string failed_gate(const TuneSettings& t, const Measured& x, std::optional<double> float_top1,
                        double* shortfall = nullptr, bool simulated = false);

// The float layers, effective bits and speedup of a real run (`out`, its
// plan and report as run) with the metrics `m` of its artifact.
Measured measured_run(const Session& s, const QuantizeOutcome& out, const Metrics& m);

// Each layer's format in `a` ("native" where it has none), for the report.
nlohmann::json formats_json(const Assignment& a, const std::vector<SimLayer>& layers);
// The settings as the report shows them.
nlohmann::json settings_json(const TuneSettings& t);

// When tune took longer than its budget (`elapsed_s` > `budget_s`): the
// report's budget_cut, warned. Setup, the sensitivity table and one real
// run cannot be cut, so a budget smaller than those still ends in a result,
// and says so. "" within the budget.
std::string overrun_note(double budget_s, double elapsed_s);

// Whether candidate a is better than b (both measured).
bool better(const Measured& a, const std::string& a_failed, double a_short, const Measured& b,
            const std::string& b_failed, double b_short);

// One change of format.
struct Move {
  std::string layer;
  DType from = DType::kNative, to = DType::kNative;
};

// `a` after the move; "layer int4 -> int8".
void apply_move(Assignment& a, const Move& m);
std::string describe(const Move& m);

// The formats a layer may take, cheapest first (native last when allowed).
std::vector<DType> ladder(const SimLayer& l, const TuneSettings& t);

// The start of the search: every layer in its cheapest format.
Assignment cheapest(const std::vector<SimLayer>& layers, const TuneSettings& t);

// The next move of the search, from the sensitivity table (each layer's
// output noise-to-signal ratio alone in each format): greedy takes the
// largest noise reduction per added weight bit that the effective_bits
// budget allows; revert_worst sends the layer with the worst SQNR in its
// current format to float. nullopt: no move left.
using NoiseTable = std::map<std::string, std::map<DType, double>>;
std::optional<Move> next_move(const std::vector<SimLayer>& layers, const Assignment& a,
                              const NoiseTable& nsr, const TuneSettings& t);

// Noise-to-signal ratios from a sensitivity report (native: 0).
NoiseTable noise_table(const SensitivityReport& r);

}  // namespace tq::tune
