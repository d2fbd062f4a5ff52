// What the libtorch backend's static and dynamic PTQ share (private to
// backends/libtorch/): the weight observers' settings, the int8 weight as
// LibTorch stores it, and the last steps of LibTorch's quantization passes.
#pragma once

#include <ATen/core/Tensor.h>

#include "taoquant/backend.h"
#include "taoquant/calibration.h"
#include "taoquant/jit.h"
#include "taoquant/observer.h"

namespace torch::jit {
struct Module;
}

namespace tq::libtorch {

// Weights: symmetric int8, per channel (axis 0) unless the layer's plan says
// per_tensor; minmax unless a `layers` rule names an observer.
ObserverTemplate weight_template(const Plan& plan, const LayerPlan* lp);

// Whether two observer templates make the same observer. Layers whose
// settings equal the defaults share the root qconfig: per-layer entries
// would give instances of one TorchScript type (the encoder layers' attention
// out_proj in ViT) different observers, which LibTorch's InsertObservers
// cannot express.
bool same_settings(const ObserverTemplate& a, const ObserverTemplate& b);

// The element of `v` that most others are the `same` as (the first such), or
// `fallback` when `v` is empty. The settings most quantized layers share
// become the root qconfig: a blanket rule (`layers: [{module_name: '*',
// weights: {granularity: per_tensor}}]`) is then one root entry, not one
// entry per layer, whose activation observers LibTorch cannot place on a
// value two layers read (a ResNet block's input: conv1 and downsample).
template <class T, class Same>
T most_common(const std::vector<T>& v, Same same, T fallback) {
  size_t best = 0, best_count = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    size_t count = 0;
    for (const auto& x : v) count += same(v[i], x) ? 1 : 0;
    if (count > best_count) best = i, best_count = count;
  }
  return v.empty() ? fallback : v[best];
}

// Fills a layer result from its int8 weight qparams: scale range, weight
// SQNR and stored bytes. Returns the weight rounded to its grid.
at::Tensor weight_result(LayerResult& r, const at::Tensor& w, const QParams& wq);

// InsertQuantDeQuant's output -> the final int8 module: completes or
// refuses instances it left without values, fixes tuple dequantization,
// then Finalize (fusion into quantized ops, packing, freezing).
torch::jit::Module finish_quantized(torch::jit::Module q, jit::QuantMode qt);

}  // namespace tq::libtorch
