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

class StaticFakeQuant {
 public:
  StaticFakeQuant();
  ~StaticFakeQuant();
  void calibrate(QuantizeContext& ctx, CalibrationData& data);
  void convert(QuantizeContext& ctx);

  struct Session;  // the calibrated state (static_fakequant.cpp)

 private:
  std::unique_ptr<Session> s_;
};

}  // namespace tq::fakequant
