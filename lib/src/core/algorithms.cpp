#include "taoquant/algorithms.h"

#include <algorithm>

#include "taoquant/strings.h"

namespace tq {

const std::vector<AlgorithmDef>& algorithm_defs() {
  static const std::vector<AlgorithmDef> defs{
      {"equalization",
       "true, or {iterations: 20, absorb_bias: false}: cross-layer equalization of conv/linear "
       "pairs joined by "
       "ReLU, ReLU6, max-pooling or nothing (after BatchNorm); the float model computes the same; "
       "absorb_bias: DFQ's high-bias absorption",
       {Mode::kWeightOnly, Mode::kStatic, Mode::kDynamic}},
      {"smoothquant",
       "true, or {alpha: 0.5}: Linear layers whose input comes from a LayerNorm or a layer: "
       "moves the input's outlier channels into the weights with a per-channel scale folded "
       "into the op before (SmoothQuant)",
       {Mode::kStatic, Mode::kDynamic}},
      {"awq",
       "true, or {grid: 20}: Linear layers whose input comes from a LayerNorm or a layer: "
       "searches the per-input-channel scale that least changes the quantized layer's output on "
       "the calibration data, folded into the op before (AWQ)",
       {Mode::kWeightOnly}},
      {"weight_rounding",
       "nearest (default) | gptq, or {method: gptq, damp: 0.01, block_size: 128, act_order: "
       "true, scale_search: true, sequential: true}: how quantized weights are rounded "
       "(sequential: each layer against the partly rounded model's inputs); per layer: "
       "weights.rounding",
       {Mode::kWeightOnly}},
      {"bias_correction",
       "true: subtract each quantized layer's mean output error, measured on the calibration "
       "data, from its bias (static_ptq: from the weights and input quantization the backend "
       "chose, after BatchNorm folding)",
       {Mode::kWeightOnly, Mode::kStatic}},
  };
  return defs;
}

const AlgorithmDef* find_algorithm(std::string_view key) {
  for (const auto& d : algorithm_defs())
    if (d.key == key) return &d;
  return nullptr;
}

namespace {

void check_mode(std::string_view key, const SourceLoc& loc, Mode mode) {
  const AlgorithmDef* d = find_algorithm(key);
  if (!d || std::find(d->modes.begin(), d->modes.end(), mode) != d->modes.end()) return;
  throw SpecError(loc, "quantize." + std::string(key) + " applies to mode " +
                           join(names_of(d->modes)) + " in this version, not " +
                           std::string(to_string(mode)) +
                           " (set quantize.mode, or remove the key)");
}

}  // namespace

void check_algorithm_modes(const AlgorithmSettings& a, Mode mode) {
  if (a.equalization.enabled) check_mode("equalization", a.equalization_loc, mode);
  if (a.weight_rounding != Rounding::kNearest)
    check_mode("weight_rounding", a.weight_rounding_loc, mode);
  if (a.bias_correction) check_mode("bias_correction", a.bias_correction_loc, mode);
  if (a.smoothquant.enabled) check_mode("smoothquant", a.smoothquant_loc, mode);
  if (a.awq.enabled) check_mode("awq", a.awq_loc, mode);
}

nlohmann::json algorithms_to_json(const AlgorithmSettings& a) {
  nlohmann::json j{{"equalization", a.equalization.enabled},
                   {"weight_rounding", std::string(to_string(a.weight_rounding))},
                   {"bias_correction", a.bias_correction},
                   {"smoothquant", a.smoothquant.enabled},
                   {"awq", a.awq.enabled}};
  if (a.equalization.enabled) j["equalization_iterations"] = a.equalization.iterations;
  if (a.weight_rounding == Rounding::kGptq)
    j["gptq"] = {{"damp", a.gptq.damp},
                 {"block_size", a.gptq.block_size},
                 {"act_order", a.gptq.act_order},
                 {"scale_search", a.gptq.scale_search},
                 {"sequential", a.gptq.sequential}};
  if (a.smoothquant.enabled) j["smoothquant_alpha"] = a.smoothquant.alpha;
  if (a.awq.enabled) j["awq_grid"] = a.awq.grid;
  return j;
}

}  // namespace tq
