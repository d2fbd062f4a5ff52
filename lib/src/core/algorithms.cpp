#include "taoquant/algorithms.h"

#include <algorithm>

#include "taoquant/strings.h"

namespace tq {

const std::vector<AlgorithmDef>& algorithm_defs() {
  static const std::vector<AlgorithmDef> defs{
      {"equalization",
       "true, or {iterations: 20}: cross-layer equalization of conv/linear pairs joined by "
       "ReLU, ReLU6, max-pooling or nothing (after BatchNorm); the float model computes the same",
       {Mode::kWeightOnly, Mode::kStatic, Mode::kDynamic}},
      {"weight_rounding",
       "nearest (default) | gptq, or {method: gptq, damp: 0.01, block_size: 128, act_order: "
       "false}: how quantized weights are rounded; per layer: weights.rounding",
       {Mode::kWeightOnly}},
      {"bias_correction",
       "true: subtract each quantized layer's mean output error, measured on the calibration "
       "data, from its bias",
       {Mode::kWeightOnly}},
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
}

nlohmann::json algorithms_to_json(const AlgorithmSettings& a) {
  nlohmann::json j{{"equalization", a.equalization.enabled},
                   {"weight_rounding", std::string(to_string(a.weight_rounding))},
                   {"bias_correction", a.bias_correction}};
  if (a.equalization.enabled) j["equalization_iterations"] = a.equalization.iterations;
  if (a.weight_rounding == Rounding::kGptq)
    j["gptq"] = {
        {"damp", a.gptq.damp}, {"block_size", a.gptq.block_size}, {"act_order", a.gptq.act_order}};
  return j;
}

}  // namespace tq
