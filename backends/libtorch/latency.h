// Latency measurements used by the libtorch backend to keep int8 from being
// slower than float: interleaved runs, medians.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "taoquant/backend.h"

namespace tq {
class ObserverTable;
}

namespace tq::libtorch {

struct LatencyPair {
  int64_t batch_size = 0;
  double fp32_ms = 0, int8_ms = 0;
};

// Float model vs int8 model on `sample` resized to each batch size.
std::vector<LatencyPair> compare_model_latency(const torch::jit::Module& fp32,
                                               const torch::jit::Module& int8,
                                               const std::vector<at::Tensor>& sample,
                                               const std::vector<int64_t>& batch_sizes);

// Each quantized layer alone: its float op vs quantize + int8 op + dequantize
// on its held-out input. Returns (layer, reason) for layers where int8 is
// slower at any batch size.
std::vector<std::pair<std::string, std::string>> slower_int8_layers(
    const QuantizeContext& ctx, const torch::jit::Module& folded,
    const torch::jit::Module& observed, ObserverTable& table,
    const std::vector<at::Tensor>& holdout, const std::vector<int64_t>& batch_sizes);

std::string format_ms(double ms);

}  // namespace tq::libtorch
