// One quantized layer's int8 kernel, packed from its float weight and
// weight qparams, ready to call alone: the per-layer latency check
// (latency.cpp) and the batch-change probe (batch_change.cpp) run it.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/plan.h"

namespace torch::jit {
struct Module;
}

namespace tq::libtorch {

struct LayerKernel {
  jit::QuantizedOp op;
  c10::IValue packed;
  LayerKind kind = LayerKind::kLinear;
  std::string key;  // timing-cache key: op, weight shape, granularity, conv geometry
};

// A layer that cannot be run alone, and why.
struct Untimed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a layer's int8 kernel is chosen by: op, weight shape and
// granularity, bias, conv geometry (LayerKernel::key), without packing it;
// throws Untimed when the layer has no kernel to run alone.
std::string kernel_key(const torch::jit::Module& layer, LayerKind kind, const QParams& wq);

// Packs a layer's weight for its int8 kernel (a fresh packed object each
// call, as a fresh load of the artifact makes); `key` is its kernel_key.
// Throws Untimed with the reason when it cannot.
LayerKernel pack_layer(const torch::jit::Module& layer, LayerKind kind, const QParams& wq,
                       std::string key);

// quantize(x) -> the kernel -> the int8 output (not dequantized).
at::Tensor run_kernel(const LayerKernel& k, const at::Tensor& x, const QParams& aq);
// The two halves of run_kernel: `x` quantized to the layer's input qparams
// (quint8), and the kernel on it.
at::Tensor quantize_input(const at::Tensor& x, const QParams& aq);
at::Tensor run_quantized(const LayerKernel& k, const at::Tensor& xq, const QParams& aq);
// A quantized (per-tensor) batch at another batch size, from its codes:
// the same values as quantizing the float batch resized (resize_batch),
// without quantizing again (LibTorch 1.13's CPU quantize_per_tensor is a
// scalar loop).
at::Tensor resize_quantized_batch(const at::Tensor& xq, int64_t bs);

// An int8 layer of the plan, ready to run alone.
struct Int8Layer {
  const std::string& name;
  const torch::jit::Module& float_layer;  // in the folded float model
  const std::string& key;                 // kernel_key
  const QParams& input;                   // its input's qparams
  const at::Tensor& x;                    // its held-out float input
  // Its kernel, freshly packed on the first call (packing quantizes the
  // weight: a caller that only needs the key pays nothing for it).
  const std::function<const LayerKernel&()>& kernel;
};

// Calls `fn` on each int8 layer of `plan` (a weight observer in `table`)
// with its input captured in `inputs` (capture_layer_inputs on `folded`)
// and quantized by its observer in `input_observers` (ObservedLinears).
// A layer that cannot be run alone, or whose `fn` throws, is skipped: why
// is logged and, if `skipped` is given, added to it as (layer, reason).
void for_each_int8_layer(const Plan& plan, const torch::jit::Module& folded,
                         const std::map<std::string, std::string>& input_observers,
                         ObserverTable& table, const std::map<std::string, at::Tensor>& inputs,
                         const std::function<void(const Int8Layer&)>& fn,
                         std::vector<std::pair<std::string, std::string>>* skipped = nullptr);

// A registered operator, boxed.
std::vector<c10::IValue> call_op(const char* name, const char* overload,
                                 std::vector<c10::IValue> args);

}  // namespace tq::libtorch
