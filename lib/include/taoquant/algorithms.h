// Error-correcting algorithms: the one table that the spec parser,
// validation, `inspect`, `--help` and docs/spec.md read, and the settings
// the plan carries to the library's algorithm stage. Torch-free.
//
// Adding an algorithm: a row in algorithm_defs() (lib/src/core/algorithms.cpp),
// its settings here, and one file under lib/src/torch/algorithms/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "taoquant/enums.h"
#include "taoquant/error.h"

namespace tq {

// How quantized weights are rounded: to the nearest grid value, or by GPTQ
// (Frantar et al. 2022), which rounds column by column and moves each
// column's error onto the columns not yet rounded, weighted by the inverse
// Hessian of the layer's inputs.
enum class Rounding { kNearest, kGptq };
const EnumTable<Rounding>& rounding_table();
inline std::string_view to_string(Rounding r) {
  return rounding_table().name(r);
}

struct GptqSettings {
  double damp = 0.01;      // added to the Hessian's diagonal, times its mean
  int block_size = 128;    // columns updated together (lazy batch updates)
  // Round columns in order of decreasing Hessian diagonal. The spec parser
  // turns it on unless a spec says otherwise (sections.cpp, docs/spec.md).
  bool act_order = false;
};

// Cross-layer equalization (Nagel et al. 2019): rescales the channels
// between consecutive layers so that both weights' per-channel ranges are
// balanced; the float model computes the same function.
struct EqualizationSettings {
  bool enabled = false;
  int iterations = 20;  // sweeps over the chain of pairs (stops early when converged)
};

// The spec's algorithm keys, resolved. Each key's location is kept for errors.
struct AlgorithmSettings {
  EqualizationSettings equalization;
  SourceLoc equalization_loc;
  Rounding weight_rounding = Rounding::kNearest;
  GptqSettings gptq;
  SourceLoc weight_rounding_loc;
  bool bias_correction = false;
  SourceLoc bias_correction_loc;
  // Whether any algorithm needs calibration data.
  bool needs_data() const { return bias_correction || weight_rounding != Rounding::kNearest; }
};

// One row of the table: the spec key, what it does, and the modes it
// applies to in this version.
struct AlgorithmDef {
  std::string_view key;  // quantize.<key>
  std::string_view help;
  std::vector<Mode> modes;
};
const std::vector<AlgorithmDef>& algorithm_defs();
const AlgorithmDef* find_algorithm(std::string_view key);

// Throws SpecError at the key's location when an enabled algorithm does not
// apply to `mode`.
void check_algorithm_modes(const AlgorithmSettings& a, Mode mode);

nlohmann::json algorithms_to_json(const AlgorithmSettings& a);

}  // namespace tq
