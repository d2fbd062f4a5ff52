// Cross-layer equalization (Nagel et al. 2019) and DFQ's high-bias
// absorption: the pairs of the float model's graph whose channels scale
// against each other, and the rewrites. lib/src/torch/algorithms/
// equalization.cpp, bias_absorption.cpp; the stage is stages.cpp.
#pragma once

#include <string>
#include <vector>

#include "taoquant/json.h"

namespace torch::jit {
struct Module;
}

namespace tq {

// Cross-layer equalization: a pair of layers whose channels can be scaled
// against each other without changing the function.
struct EqualizationPair {
  std::string first, second;  // module paths, in graph order
  std::string batch_norm;     // a BatchNorm right after `first`, or ""
  double bn_eps = 1e-5;
  std::vector<std::string> through;  // the ops between: "relu", "max_pool2d", ...
  bool flattened = false;            // conv -> flatten -> linear
  // > 0: a ReLU6-like clip at this value between them; < 0: a per-channel
  // clip already in the model (relu, then minimum with the clip module's
  // `_tq_clip` buffer: an earlier equalization, or a model built that way).
  double clip = 0;
  std::string clip_module;  // the module that clips (its forward is the clip)
};
// The pairs of the model's forward graph: conv -> [BatchNorm] -> ops that
// commute with a positive per-channel scale, and at most one ReLU6 -> conv
// (or linear after flatten), linear -> ... -> linear; each value used by
// that path alone, each layer called once.
std::vector<EqualizationPair> equalization_pairs(const torch::jit::Module& model);
// What equalize did to one pair: the spread (largest over smallest) of the
// first layer's per-output-channel ranges and of the second layer's
// per-input-channel weight ranges, before and after.
struct EqualizedPair {
  std::string first, second, batch_norm;
  std::vector<std::string> through;
  double first_spread_before = 0, first_spread_after = 0;
  double second_spread_before = 0, second_spread_after = 0;
};
struct Equalization {
  std::vector<EqualizedPair> pairs;
  int sweeps = 0;
  // {"pairs": [{first, second, batch_norm, through, first_range_spread:
  // {before, after}, second_range_spread}], "sweeps": n}
  nlohmann::json to_json() const;
};
// Equalizes the pairs in place (up to `iterations` sweeps, until the scales
// converge); a ReLU6 between a pair becomes a per-channel clip, so the
// forward graph is rewritten (inlined) when there is one.
Equalization equalize(torch::jit::Module& model, const std::vector<EqualizationPair>& pairs,
                      int iterations);

// What high-bias absorption did to one pair: `skipped` says why it could
// not, else how many channels moved, the largest shift and where the
// second layer's compensation went.
struct AbsorbedPair {
  std::string first, second;
  std::string skipped;
  int64_t channels = 0;
  double max_shift = 0;
  std::string compensated_in;
  nlohmann::json to_json() const;  // {first, second, skipped} or {..., channels, ...}
};
struct BiasAbsorption {
  std::vector<AbsorbedPair> pairs;
  size_t absorbed = 0;             // pairs with a shift moved
  nlohmann::json to_json() const;  // {"pairs": [...], "absorbed": n}
};
// DFQ's high-bias absorption, after equalize: for each pair through a ReLU
// (or a per-channel clip) with a BatchNorm after the first layer, c_i =
// max(0, beta_i - 3|gamma_i|) moves from the BatchNorm's shift (and the
// clip) into the second layer's bias, or the running mean of the BatchNorm
// after it. Changes the float model slightly (values below c_i, padded
// borders).
BiasAbsorption absorb_high_biases(torch::jit::Module& model,
                                  const std::vector<EqualizationPair>& pairs);

}  // namespace tq
