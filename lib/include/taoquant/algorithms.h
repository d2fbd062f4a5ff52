// Error-correcting algorithms: the pass table that the spec reader,
// validation, the plan, the pipeline, `backends --json`, `--help` and the
// report all iterate, and the settings the plan carries. Torch-free.
//
// Adding an algorithm: its row in algorithm_passes()
// (lib/src/core/algorithms.cpp), its settings here, and its code under
// lib/src/torch/algorithms/, run by the library stage its row names
// (lib/src/torch/algorithms/stages.cpp: a row there when it needs a stage
// of its own). A pass added from outside (a test, a plugin) keeps its
// settings in AlgorithmSettings::other and registers with ScopedAlgorithmPass.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "taoquant/json.h"

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
  // A pass registered from outside the built-in rows: its key's value as
  // written (true, or its map of settings), and where.
  struct Other {
    nlohmann::json value;
    SourceLoc loc;
  };
  std::map<std::string, Other, std::less<>> other;
  // Whether an algorithm that is on needs calibration data.
  bool needs_data() const;
};

namespace spec_detail {
struct Node;
}
struct LayerPlan;
struct Plan;

// One row of the pass table: an error-correcting algorithm, from its spec
// key to the stage that runs it.
struct AlgorithmPass {
  std::string_view key;  // quantize.<key>
  std::string_view help;
  std::vector<Mode> modes;  // the modes it applies to in this version
  // The library stage that runs it in a mode (a row of algorithm_stages(),
  // lib/src/torch/algorithms/stages.cpp); "" where the backend runs it
  // (static bias correction: ModeCaps::bias_correction).
  std::function<std::string(Mode mode)> stage;
  bool needs_data;   // reads calibration data
  bool whole_model;  // its stage runs whenever it is on, not only when a layer gets it
  // Reads quantize.<key> (present and set) into `a`, keeping its location.
  std::function<void(const spec_detail::Node& n, const std::string& path, AlgorithmSettings& a)>
      read;
  std::function<bool(const AlgorithmSettings& a)> on;
  std::function<SourceLoc(const AlgorithmSettings& a)> loc;
  // Its entries in the plan's and the report's `algorithms` object.
  std::function<void(const AlgorithmSettings& a, nlohmann::json& j)> to_json;
  // The name it has on a layer it changes ("gptq", "bias_correction"); ""
  // for a layer it leaves alone.
  std::function<std::string(const LayerPlan& layer, const Plan& plan)> on_layer;
  // The setting as an error names it ("quantize.weight_rounding gptq").
  std::function<std::string(const AlgorithmSettings& a)> setting;
};
// The rows, in the order their stages run.
const std::vector<AlgorithmPass>& algorithm_passes();
const AlgorithmPass* find_algorithm(std::string_view key);

// Adds a row for the scope's life (tests; a plugin's pass), after the
// built-in ones; removed again on destruction.
class ScopedAlgorithmPass {
 public:
  explicit ScopedAlgorithmPass(AlgorithmPass pass);
  ~ScopedAlgorithmPass();
  ScopedAlgorithmPass(const ScopedAlgorithmPass&) = delete;
  ScopedAlgorithmPass& operator=(const ScopedAlgorithmPass&) = delete;

 private:
  std::string key_;
};

// A row for a pass added from outside: its value lives in
// AlgorithmSettings::other (true, or a map of settings), it runs in the
// library stage named after its key, and it changes each quantized layer
// with weights (set on_layer for fewer).
AlgorithmPass other_pass(std::string_view key, std::string_view help, std::vector<Mode> modes,
                         bool needs_data);

// Throws SpecError at the key's location when an enabled algorithm does not
// apply to `mode`.
void check_algorithm_modes(const AlgorithmSettings& a, Mode mode);

nlohmann::json algorithms_to_json(const AlgorithmSettings& a);

// The names of the passes that change `layer`, in table order.
std::vector<std::string> layer_algorithms(const LayerPlan& layer, const Plan& plan);

}  // namespace tq
