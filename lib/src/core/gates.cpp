#include "taoquant/gates.h"

#include <limits>

#include "taoquant/error.h"
#include "taoquant/strings.h"

namespace tq {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPositive = std::numeric_limits<double>::min();  // "> 0"
constexpr unsigned kBoth = kEvaluateGate | kTuneGate;

}  // namespace

const std::vector<GateDef>& gate_table() {
  // clang-format off
  static const std::vector<GateDef> t = {
      {Gate::kMaxTop1Drop, "max_top1_drop", true, -100, 100, " pp", 2, 100, kBoth, true, true,
       "float top-1 minus quantized top-1, in percentage points"},
      {Gate::kMinTop1, "min_top1", false, 0, 100, "%", 2, 100, kEvaluateGate, true, false,
       "the quantized model's top-1 accuracy"},
      {Gate::kMinCosine, "min_cosine", false, -kInf, kInf, "", 4, 1, kEvaluateGate, false, true,
       "cosine similarity of the quantized model's outputs to the float model's"},
      {Gate::kMinSqnrDb, "min_sqnr_db", false, -kInf, kInf, " dB", 2, 10, kBoth, false, true,
       "signal-to-quantization-noise ratio of the outputs against the float model's"},
      {Gate::kMinTop1Agreement, "min_top1_agreement", false, 0, 100, "%", 2, 100, kBoth, false,
       true, "share of samples whose top-1 class is the float model's"},
      {Gate::kMinSpeedup, "min_speedup", false, kPositive, kInf, "x", 2, 1, kBoth, false, true,
       "float latency / quantized latency (evaluate: at every latency batch size)"},
      {Gate::kMaxSizeRatio, "max_size_ratio", true, kPositive, kInf, "", 3, 1, kEvaluateGate,
       false, true, "quantized file size / float file size"},
      {Gate::kEffectiveBits, "effective_bits", true, 1, 32, "", 3, 32, kTuneGate, false, false,
       "mean bits per weight over the quantizable layers (float layers count 32)"},
  };
  // clang-format on
  return t;
}

const GateDef& gate_def(Gate g) {
  for (const auto& d : gate_table())
    if (d.gate == g) return d;
  throw RuntimeError("gate_def: a gate without a row in the gate table");
}

std::vector<std::string> gate_names(unsigned use) {
  std::vector<std::string> out;
  for (const auto& d : gate_table())
    if (d.uses & use) out.emplace_back(d.name);
  return out;
}

std::optional<double> GatesSpec::get(Gate g) const {
  auto it = limits.find(g);
  return it == limits.end() ? std::nullopt : std::optional<double>(it->second);
}

bool GatesSpec::holds(Gate g, double value) const {
  const double limit = limits.at(g);
  // Effective bits are a sum of fractions: a hair of slack for rounding.
  const double slack = g == Gate::kEffectiveBits ? 1e-9 : 0.0;
  return gate_def(g).at_most ? value <= limit + slack : value >= limit - slack;
}

std::string GatesSpec::describe(Gate g, double value) const {
  const GateDef& d = gate_def(g);
  return std::string(d.name) + " " + format_fixed(limits.at(g), 2) + ": measured " +
         format_fixed(value, d.digits) + d.unit;
}

}  // namespace tq
