// Helpers for backends that quantize layer weights: read a layer's weight,
// quantize it with the planned format, and describe the result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "taoquant/backend.h"
#include "taoquant/formats.h"
#include "taoquant/plan.h"

namespace tq {

// The format that a planned weight setting asks for.
wformat::WeightFormat weight_format_of(const TensorQuant& t);

// Reads `layer.weight` (any float dtype) as float32 values.
std::vector<float> read_weight(const torch::jit::Module& layer,
                               std::vector<int64_t>* shape = nullptr);

// Quantizes the weight of a planned layer of `model`.
wformat::QuantizedWeight quantize_layer_weight(const torch::jit::Module& model,
                                               const LayerPlan& lp);

// The weight a backend stores for a planned layer: the algorithm stage's
// result (GPTQ) when there is one, else round_planned_weight.
wformat::QuantizedWeight quantize_planned_weight(const QuantizeContext& ctx,
                                                 const torch::jit::Module& model,
                                                 const LayerPlan& lp);
// Round to nearest in the planned format, with the qparam constraints that
// the backend `ctx` runs declares (power-of-two scales, minimum scale, ...)
// applied to its scales.
wformat::QuantizedWeight round_planned_weight(const QuantizeContext& ctx,
                                              const torch::jit::Module& model, const LayerPlan& lp);

// round_planned_weight on other values of the layer's weight shape (what
// AWQ tries), with the same format and constraints.
wformat::QuantizedWeight round_planned_values(const QuantizeContext& ctx, const LayerPlan& lp,
                                              const std::vector<float>& values,
                                              const std::vector<int64_t>& shape);

// Replaces `layer.weight` with the decoded values (keeping its dtype).
void set_weight_values(torch::jit::Module& layer, const std::vector<float>& values);

// A LayerResult filled from a quantized weight; `bytes_after` is what the
// backend stores for it.
LayerResult weight_layer_result(const LayerPlan& lp, const wformat::QuantizedWeight& q,
                                size_t bytes_before, size_t bytes_after);

}  // namespace tq

namespace tq {

// Visits every planned layer in order. Quantized layers are quantized and
// handed to `store`, which keeps the result however the backend does and
// returns the bytes it stores (it may set `note`); the others are reported
// as kept float with the rule that decided it.
using WeightStoreFn = std::function<size_t(const LayerPlan& lp, const wformat::QuantizedWeight& q,
                                           std::string& note)>;
void quantize_weights(QuantizeContext& ctx, const WeightStoreFn& store);

}  // namespace tq
