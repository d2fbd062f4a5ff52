// Quality gates: one table that `evaluate.gates` and `quantize.tune` read
// (the spec reader, the checks, the reports and the docs). Torch-free.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tq {

enum class Gate {
  kMaxTop1Drop,
  kMinTop1,
  kMinCosine,
  kMinSqnrDb,
  kMinTop1Agreement,
  kMinSpeedup,
  kMaxSizeRatio,
  kEffectiveBits,
};

// Where a gate may be set (bit flags).
enum GateUse : unsigned { kEvaluateGate = 1u, kTuneGate = 2u };

struct GateDef {
  Gate gate;
  const char* name;      // the spec key
  bool at_most;          // the limit is an upper bound (<=); else a lower bound (>=)
  double lo, hi;         // the limits a spec may set (inclusive)
  const char* unit;      // appended to values in messages: " pp", "%", " dB", "x", ""
  int digits;            // decimals of the measured value in messages
  double scale;          // how far off a failing value is, per unit of this (tune's ranking)
  unsigned uses;         // kEvaluateGate | kTuneGate
  bool needs_labels;     // measured against the data's labels
  bool needs_reference;  // evaluate: compares the quantized model with the float one
  const char* help;
};

const std::vector<GateDef>& gate_table();
const GateDef& gate_def(Gate g);
// The names of the gates usable in `use`, in table order.
std::vector<std::string> gate_names(unsigned use);

// The gates a spec section sets, with their limits.
struct GatesSpec {
  std::map<Gate, double> limits;

  std::optional<double> get(Gate g) const;
  bool has(Gate g) const { return limits.count(g) != 0; }
  bool empty() const { return limits.empty(); }
  // Whether `value` meets gate g's limit (which must be set).
  bool holds(Gate g, double value) const;
  // "min_sqnr_db 30.00: measured 27.41 dB"
  std::string describe(Gate g, double value) const;
};

}  // namespace tq
