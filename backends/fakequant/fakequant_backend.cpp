// The `fakequant` backend: float artifacts whose values are already rounded
// to the target grid (quantize -> dequantize), to simulate the accuracy of
// any format, fp8 included, on any runtime.
#include <torch/script.h>

#include "../staged_backend.h"
#include "static_fakequant.h"
#include "taoquant/backend.h"
#include "taoquant/model.h"
#include "taoquant/weight_quant.h"

namespace tq::fakequant {

namespace {

class FakeQuantBackend : public StagedBackend<FakeQuantSession, calibrate_fake_quant> {
 public:
  void quantize(QuantizeContext& ctx) override {
    if (ctx.plan.mode == Mode::kStatic) {
      ctx.backend_meta["storage"] =
          "float weights rounded to the quantization grid; quantize->dequantize of layer inputs in "
          "the graph";
      return convert_fake_quant(ctx, *take_session("fakequant static_ptq"));
    }
    ctx.backend_meta["storage"] = "float weights rounded to the quantization grid";
    quantize_weights(
        ctx, [&](const LayerPlan& lp, const wformat::QuantizedWeight& q, std::string&) -> size_t {
          auto layer = find_submodule(ctx.model, lp.info.name);
          set_weight_values(layer, q.dequant);
          auto w = layer.attr("weight").toTensor();
          return static_cast<size_t>(w.numel()) * w.element_size();
        });
  }
};

BackendInfo info() {
  BackendInfo b;
  b.name = "fakequant";
  b.description =
      "float artifacts with quantize->dequantize values, for accuracy simulation of any format";
  b.aliases = {{"modelopt", {}, "ModelOpt-style fake quantization"},
               {"modelopt.pytorch", {}, "ModelOpt-style fake quantization"}};
  b.caps.modes = {Mode::kWeightOnly, Mode::kStatic};
  b.caps.weight_dtypes = {DType::kInt8, DType::kUInt8, DType::kInt4, DType::kFp8E4M3,
                          DType::kFp8E5M2};
  b.caps.activation_dtypes = {DType::kInt8, DType::kUInt8, DType::kFp8E4M3, DType::kFp8E5M2};
  b.caps.granularities = {Granularity::kPerTensor, Granularity::kPerChannel,
                          Granularity::kPerGroup};
  for (const auto& e : layer_kind_table().entries) b.caps.layer_kinds.push_back(e.value);
  ModeCaps wo, st;
  wo.mode = Mode::kWeightOnly;
  wo.kernel = "float weights on the quantization grid";
  st.mode = Mode::kStatic;
  st.kernel = "quantize->dequantize in the float graph";
  st.bias_correction = true;
  b.caps.per_mode = {wo, st};
  return b;
}

}  // namespace

}  // namespace tq::fakequant

TAOQUANT_REGISTER_BACKEND(tq::fakequant::FakeQuantBackend, tq::fakequant::info);
