// The weight algorithms the library runs before a backend stores weights
// (weight-only mode): GPTQ rounding and empirical bias correction. Each is
// one file under lib/src/torch/algorithms/; the table of spec keys is
// algorithms.h. The functions below are the algorithms' cores, public so
// that plugins and tests can call them on their own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "taoquant/algorithms.h"
#include "taoquant/formats.h"

namespace torch::jit {
struct Module;
}

namespace tq {

class QuantizeContext;
class CalibrationData;

// How a conv/linear layer's aten op is called (read from the constants of
// the op in the inlined graph, so padding modes and 'same' are what the op
// sees): what GPTQ's im2col and bias correction need. `why` is set when
// the layer is not supported.
struct LayerGeometry {
  bool conv = false;
  int spatial_dims = 0;  // 1, 2, 3 for convs
  std::vector<int64_t> kernel, stride, padding, dilation;
  int64_t groups = 1;
  // A BatchNorm that alone reads the op's output (module path), or "": bias
  // correction of a layer without a bias moves that BN's running mean.
  std::string batch_norm_after;
  std::string why;  // non-empty: unsupported, and why
};
// Each layer's geometry, by module path (its first call).
std::map<std::string, LayerGeometry> layer_geometries(const torch::jit::Module& model);

// The layer's op on `x` with the given weight and bias (bias may be undefined).
at::Tensor layer_forward(const LayerGeometry& g, const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& bias);

// Adds x's im2col columns to `h` ([groups, K, K], float64): sum of x x^T
// over every input position, K = in_channels / groups * kernel elements.
void accumulate_hessian(const LayerGeometry& g, const at::Tensor& x, at::Tensor& h);

// GPTQ (Frantar et al. 2022) on `weight` seen as [rows, K] (the weight's
// row-major order; a conv [O, I/g, k...] is [O, I/g * prod(k)]), with the
// Hessian `h` [groups, K, K] of its inputs; rows of group j use h[j].
// Every value is rounded on `grid` (the qparams of the nearest rounding).
// Returns the rounded values in the weight's order.
std::vector<float> gptq_round(const at::Tensor& weight, const at::Tensor& h,
                              const fmt::WeightGrid& grid, const GptqSettings& s);

// Empirical bias correction: the shift to add to the bias so that the
// layer's mean output over the calibration data is unchanged by weight
// quantization, -mean(op(x; Wq) - op(x; W)). The layer is linear in x, so
// the mean over samples of the output error is the output error of the mean
// input `mean_input` (one sample, without the batch dimension).
at::Tensor bias_correction_shift(const LayerGeometry& g, const at::Tensor& mean_input,
                                 const at::Tensor& weight_delta);

// Cross-layer equalization: a pair of layers whose channels can be scaled
// against each other without changing the function.
struct EqualizationPair {
  std::string first, second;  // module paths, in graph order
  std::string batch_norm;     // a BatchNorm right after `first`, or ""
  double bn_eps = 1e-5;
  std::vector<std::string> through;  // the ops between: "relu", "max_pool2d", ...
  bool flattened = false;            // conv -> flatten -> linear
  double clip = 0;                   // > 0: a ReLU6-like clip at this value between them
  std::string clip_module;           // the module that clips (its forward is the clip)
};
// The pairs of the model's forward graph: conv -> [BatchNorm] -> ops that
// commute with a positive per-channel scale, and at most one ReLU6 -> conv
// (or linear after flatten), linear -> ... -> linear; each value used by
// that path alone, each layer called once.
std::vector<EqualizationPair> equalization_pairs(const torch::jit::Module& model);
// Equalizes the pairs in place (up to `iterations` sweeps, until the scales
// converge); a ReLU6 between a pair becomes a per-channel clip, so the
// forward graph is rewritten (inlined) when there is one. Returns {"pairs": [...per-channel range
// spreads before/after], "sweeps": n}.
nlohmann::json equalize(torch::jit::Module& model, const std::vector<EqualizationPair>& pairs,
                        int iterations);

// The library's algorithm stage (weight-only mode): streams the calibration
// data over the float model, gathers each planned layer's statistics in
// passes of bounded memory (stats_budget_bytes), then runs GPTQ and bias
// correction layer by layer. Sets ctx.weight_overrides (read by
// quantize_planned_weight), corrects biases in ctx.model, and records what
// it did per layer in ctx.algorithm_facts.
void run_weight_algorithms(QuantizeContext& ctx, CalibrationData& data,
                           size_t stats_budget_bytes = size_t{512} << 20);

}  // namespace tq
