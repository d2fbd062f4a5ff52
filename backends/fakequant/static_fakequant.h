// Static PTQ for the `fakequant` backend: quantize -> dequantize of each
// quantized layer's input is inserted into the (specialized, inlined)
// TorchScript graph, with qparams from calibration (amax-based scales for
// fp8, as ModelOpt does), and weights are rounded to their grid. The artifact
// is a float TorchScript model that needs nothing but LibTorch.
#pragma once

#include <memory>

#include "taoquant/backend.h"

namespace tq {
class CalibrationData;
}

namespace tq::fakequant {

struct FakeQuantSession;  // the calibrated state (static_fakequant.cpp)

// Specializes the model's graph and collects each layer input's range.
std::shared_ptr<FakeQuantSession> calibrate_fake_quant(QuantizeContext& ctx, CalibrationData& data);
// Inserts quantize -> dequantize at each layer input and rounds the weights.
void convert_fake_quant(QuantizeContext& ctx, FakeQuantSession& s);

}  // namespace tq::fakequant
