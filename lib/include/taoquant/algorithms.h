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
inline const EnumTable<Rounding>& rounding_table() {
  return enum_table<Rounding>();
}
inline std::string_view to_string(Rounding r) {
  return rounding_table().name(r);
}

struct GptqSettings {
  double damp = 0.01;    // added to the Hessian's diagonal, times its mean
  int block_size = 128;  // columns updated together (lazy batch updates)
  // Round columns in order of decreasing Hessian diagonal (the default: on
  // the trained nets it never lost to nearest where plain order once did).
  bool act_order = true;
  // Each channel's (group's) scale shrunk by the factor in {1, 0.95, ..., 0.5}
  // with the least input-weighted rounding error before GPTQ rounds on it.
  bool scale_search = true;
  // Layers rounded in order, each against the inputs of the model whose
  // earlier layers are already rounded, toward the float model's outputs.
  bool sequential = true;
};

// Cross-layer equalization (Nagel et al. 2019): rescales the channels
// between consecutive layers so that both weights' per-channel ranges are
// balanced; the float model computes the same function.
struct EqualizationSettings {
  bool enabled = false;
  int iterations = 20;       // sweeps over the chain of pairs (stops early when converged)
  bool absorb_bias = false;  // DFQ's high-bias absorption after the sweeps
};

// SmoothQuant (Xiao et al. 2022): for a Linear layer whose input has outlier
// channels, input channel j is divided by s_j = max|X_j|^alpha /
// max|W_j|^(1 - alpha) and the weight's column j multiplied by it; the
// division is folded into the op that produces the input (a LayerNorm's
// affine, or the output channels of a layer before it).
struct SmoothQuantSettings {
  bool enabled = false;
  double alpha = 0.5;  // migration strength, in [0, 1]
};

// AWQ (Lin et al. 2023): the same per-input-channel scale, searched for the
// weight quantization: s = mean|X_j|^a, a on a grid over [0, 1), the one
// whose quantized layer's output error on the calibration inputs is least.
struct AwqSettings {
  bool enabled = false;
  int grid = 20;  // values of a tried: 0, 1/grid, ..., (grid - 1)/grid
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
  SmoothQuantSettings smoothquant;
  SourceLoc smoothquant_loc;
  AwqSettings awq;
  SourceLoc awq_loc;
  // Whether any algorithm needs calibration data.
  bool needs_data() const {
    return bias_correction || weight_rounding != Rounding::kNearest || smoothquant.enabled ||
           awq.enabled;
  }
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
