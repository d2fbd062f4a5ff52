// The weight algorithms the library runs before a backend stores weights
// (weight-only mode): GPTQ rounding and empirical bias correction, and the
// static bias correction backends call. Each is one file under
// lib/src/torch/algorithms/; the pass table is algorithms.h; equalization
// and smoothing have their own headers (equalization.h, smoothing.h). The functions below are the
// algorithms' cores, public so that plugins and tests can call them on their own.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include "taoquant/json.h"

#include "taoquant/algorithms.h"
#include "taoquant/formats.h"
#include "taoquant/stage_result.h"

namespace torch::jit {
struct Module;
}

namespace tq {

class QuantizeContext;
class CalibrationData;
struct QParams;

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

// Sequential GPTQ, for the layer's input x in the float model and x~ in the
// partly rounded one (same shape): adds x~'s Hessian to `h` (as
// accumulate_hessian) and sum W (x - x~) x~^T over the same columns to `r`
// ([groups, rows / groups, K], float64); W is the layer's weight.
void accumulate_paired(const LayerGeometry& g, const at::Tensor& weight, const at::Tensor& x,
                       const at::Tensor& xq, at::Tensor& h, at::Tensor& r);

// Sequential GPTQ's target for a layer whose inputs in the partly rounded
// model are x~ while the float model's are x: W + R (H~ + lambda I)^-1 per
// group, R = sum W (x - x~) x~^T (accumulate_correction), H~ = sum x~ x~^T
// ([groups, K, K]), lambda = damp * mean(diag H~): the least-squares weight
// that maps x~ to W x, kept near W. Equal to W when x~ = x.
at::Tensor gptq_corrected_target(const at::Tensor& weight, const at::Tensor& h, const at::Tensor& r,
                                 double damp);

// GPTQ (Frantar et al. 2022) on `weight` seen as [rows, K] (the weight's
// row-major order; a conv [O, I/g, k...] is [O, I/g * prod(k)]), with the
// Hessian `h` [groups, K, K] of its inputs; rows of group j use h[j].
// Every value is rounded on `grid` (the qparams of the nearest rounding).
// Returns the rounded values in the weight's order.
std::vector<float> gptq_round(const at::Tensor& weight, const at::Tensor& h,
                              const wformat::WeightGrid& grid, const GptqSettings& s);

// The grid GPTQ rounds on: the nearest rounding's scales, each slice's
// (channel's or group's) shrunk by the factor in {1, 0.95, ..., 0.5} whose
// nearest rounding of `w` has the least error weighted by the diagonal of
// the Hessian `h` [groups, K, K] (GPTQ's scale_search).
wformat::QuantizedWeight gptq_searched_grid(const wformat::QuantizedWeight& nearest,
                                            const at::Tensor& w, const at::Tensor& h);

// Empirical bias correction: the shift to add to the bias so that the
// layer's mean output over the calibration data is unchanged by weight
// quantization, -mean(op(x; Wq) - op(x; W)). The layer is linear in x, so
// the mean over samples of the output error is the output error of the mean
// input `mean_input` (one sample, without the batch dimension).
at::Tensor bias_correction_shift(const LayerGeometry& g, const at::Tensor& mean_input,
                                 const at::Tensor& weight_delta);

// Bias correction for a backend that rounds the weights itself (static
// mode): per layer, the weight values it stores and the fake-quantization
// of the layer's input (input_scale 0: the input stays float).
struct StaticBiasLayer {
  at::Tensor weight;  // dequantized, shaped as the layer's weight
  double input_scale = 0;
  int64_t input_zero_point = 0, input_qmin = 0, input_qmax = 255;
  // The input quantized with `q` (per-tensor integer qparams).
  void set_input(const QParams& q);
};
// The layers static bias correction changes (its row of the pass table),
// each as `describe` gives it (nullopt: the backend leaves that layer out).
std::map<std::string, StaticBiasLayer> static_bias_layers(
    const Plan& plan,
    const std::function<std::optional<StaticBiasLayer>(const LayerPlan&)>& describe);
// A correction as applied: the tensor attribute that moved (a layer's
// "bias", or a BatchNorm's "running_mean", which moves the other way) and
// the shift added to the output.
struct BiasShift {
  std::string target;  // module path + "." + attribute
  at::Tensor shift;    // [out_channels], float64
};
// The static correction: the shift to add to the bias so that the layer's
// mean output is unchanged when both its input (mean `mean_quantized_input`
// instead of `mean_input`, one sample each) and its weight (`wq` instead of
// `w`) are quantized: -mean(op(Q(x); Wq) - op(x; W)) per output channel.
at::Tensor static_bias_shift(const LayerGeometry& g, const at::Tensor& mean_input,
                             const at::Tensor& mean_quantized_input, const at::Tensor& w,
                             const at::Tensor& wq);
// Streams `reference` (the float model the backend quantizes) over the
// calibration data for each layer's mean input x and mean quantized input
// Q(x), and adds -mean(op(Q(x); Wq) - op(x; W)) per output channel to the
// layer's bias in `target` (else the running mean of the BatchNorm that
// alone reads its output), in place: shallow copies sharing the tensors
// see it. The layer is linear in x, so the mean output error is that of
// the mean inputs (padding included). What it did to each layer, and the
// held-out batch's refusals, go to ctx.record_algorithms.
std::map<std::string, BiasShift> correct_biases(
    QuantizeContext& ctx, const torch::jit::Module& reference, torch::jit::Module& target,
    CalibrationData& data, const std::map<std::string, StaticBiasLayer>& layers);
// Adds sign * the shift to the output of its layer in `target` (sign -1
// undoes a correction, for a layer the backend then keeps float).
void shift_bias(torch::jit::Module& target, const BiasShift& b, double sign);

// The library's algorithm stage (weight-only mode): streams the calibration
// data over the float model, gathers each planned layer's statistics in
// passes of bounded memory (stats_budget_bytes), then runs GPTQ and bias
// correction layer by layer. Sets ctx.weight_overrides (read by
// quantize_planned_weight) and corrects biases in ctx.model. Returns what
// it did to each layer, the layers the held-out batch refused, and its
// counts (none when no layer is planned for it).
StageResult run_weight_algorithms(QuantizeContext& ctx, CalibrationData& data,
                                  size_t stats_budget_bytes = size_t{512} << 20);

}  // namespace tq
