// SmoothQuant (Xiao et al. 2022) and AWQ (Lin et al. 2023): the groups of
// Linear layers whose input a per-channel scale can move into their
// weights, the scales, and the smoothing stage. lib/src/torch/algorithms/
// smoothing.cpp, smoothquant.cpp, awq.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include "taoquant/json.h"

#include "taoquant/stage_result.h"

#include "taoquant/equalization.h"

namespace tq {

class QuantizeContext;
class CalibrationData;

// SmoothQuant and AWQ: a group of Linear layers that read the same input,
// and the op that produces it, which absorbs a per-channel scale: a
// LayerNorm with an affine (its weight and bias are divided), or a layer
// whose output reaches the consumer through ops that commute with a
// positive per-channel scale (`pair`, as equalization scales it).
struct SmoothingGroup {
  std::string producer;                // module path
  bool layer_norm = false;             // else `pair` says how
  EqualizationPair pair;               // producer -> consumers[0]
  std::vector<std::string> consumers;  // Linear layers, in graph order
};
// The groups of the model's forward graph. A consumer is called once and
// reads the producer's output alone (dropout in eval mode between them is
// allowed); every reader of the output is a consumer.
std::vector<SmoothingGroup> smoothing_groups(const torch::jit::Module& model);

// Divides the producer's output channel j by s_j and multiplies column j of
// each consumer's weight by it; the float model computes the same.
void apply_smoothing(torch::jit::Module& model, const SmoothingGroup& g, const at::Tensor& s);

// SmoothQuant's scale: s_j = max|X_j|^alpha / max_c max_i |W_c[i, j]|^(1 - alpha),
// from the input's per-channel absolute maximum over the calibration data;
// 1 where either is 0.
at::Tensor smoothquant_scales(const at::Tensor& input_absmax,
                              const std::vector<at::Tensor>& weights, double alpha);

// AWQ's search: for a = 0, 1/grid, ..., the scale s = m^a (m: the input's
// per-channel mean |x|), normalized by sqrt(max(s) min(s)); the loss is the
// output error energy sum_c tr(E_c H E_c^T) with E_c = Q_c(W_c diag(s))
// diag(s)^-1 - W_c, from the inputs' second moment `h` [K, K]. `quantize`
// returns a weight's dequantized values in the consumer's planned format.
// With `h_holdout` (the second moment of held-out inputs), the winner must
// also have a smaller loss there than a = 0, else a = 0 is kept: a scale
// fitted to few calibration samples is not trusted on its own.
struct AwqResult {
  double alpha = 0;
  at::Tensor scale;                                   // [K], float64; all ones when a = 0 wins
  std::vector<double> loss;                           // per grid point
  double holdout_loss_nearest = 0, holdout_loss = 0;  // with h_holdout
  bool rejected_on_holdout = false;
};
using AwqQuantizeFn = std::function<at::Tensor(size_t consumer, const at::Tensor& w)>;
AwqResult awq_search(const std::vector<at::Tensor>& weights, const at::Tensor& mean_abs,
                     const at::Tensor& h, int grid, const AwqQuantizeFn& quantize,
                     const at::Tensor& h_holdout = {});

// The smoothing stage (SmoothQuant in static and dynamic modes, AWQ in
// weight-only mode): per-channel statistics of each group's input over the
// calibration data, then the scales, folded into the float model
// (ctx.model). Returns what it did to each consumer layer, the groups the
// held-out batch refused, and the number of groups.
StageResult run_smoothing(QuantizeContext& ctx, CalibrationData& data);

}  // namespace tq
