// Static int8 PTQ for the libtorch backend, on LibTorch's JIT quantization
// passes: BN folding, branch specialization, observers backed by tao-quant's
// observer registry, InsertQuantDeQuant and Finalize, which emit
// quantized::conv2d_relu, quantized::linear, quantized::add_relu, ...
// Dynamic PTQ is dynamic_ptq.cpp.
#pragma once

#include <memory>
#include <string>

#include "taoquant/backend.h"

namespace tq {
class CalibrationData;
}

namespace tq::libtorch {

// The calibrated state (static_ptq.cpp).
struct StaticSession;

// Specializes and observes the model, then runs the calibration data.
std::shared_ptr<StaticSession> calibrate_static(QuantizeContext& ctx, CalibrationData& data);
// Converts the calibrated model to int8 and reports each layer.
void convert_static(QuantizeContext& ctx, StaticSession& s);
// Dynamic PTQ: Linear layers through quantized::linear_dynamic; no data.
void quantize_dynamic(QuantizeContext& ctx);

// The quantized engine named by backend_kwargs.engine (default: onednn on
// x86, qnnpack on ARM); sets it for this process and returns its name.
std::string select_engine(const QuantizeContext& ctx);  // engine.cpp

// Whether the CPU has VNNI (AVX512_VNNI or AVX_VNNI); true off x86.
bool cpu_has_vnni();

// The range static uint8 activations are observed in: 7-bit (PyTorch's
// reduce_range) where the engine's int8 kernels would saturate 8-bit ones on
// this CPU, or as backend_kwargs.activation_range says.
struct ActivationRange {
  bool reduced = false;
  bool automatic = false;  // chosen by `auto`, not written in the spec
  std::string why;
};
ActivationRange activation_range(const QuantizeContext& ctx, const std::string& engine);

}  // namespace tq::libtorch
