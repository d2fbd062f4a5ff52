// The `libtorch` backend: artifacts that run on plain LibTorch/PyTorch.
// Weight-only: compact codes + scales in the archive, decoded at load.
#include <torch/script.h>

#include <algorithm>
#include <optional>

#include "../staged_backend.h"
#include "compact_weights.h"
#include "static_ptq.h"
#include "taoquant/backend.h"
#include "taoquant/model.h"
#include "taoquant/weight_quant.h"

namespace tq::libtorch {

namespace {

class LibTorchBackend : public StagedBackend<StaticSession, calibrate_static> {
 public:
  void quantize(QuantizeContext& ctx) override {
    switch (ctx.plan.mode) {
      case Mode::kWeightOnly:
        return weight_only(ctx);
      case Mode::kStatic:
        return convert_static(ctx, *take_session("static_ptq"));
      case Mode::kDynamic:
        return quantize_dynamic(ctx);
    }
  }

 private:
  static void weight_only(QuantizeContext& ctx) {
    ctx.backend_meta["storage"] =
        "compact codes + scales, decoded by TorchScript __setstate__ at load";
    quantize_weights(
        ctx,
        [&](const LayerPlan& lp, const wformat::QuantizedWeight& q, std::string& note) -> size_t {
          std::string blocker = compact_blocker(ctx.model, lp.info.name);
          if (blocker.empty()) return install_compact_weight(ctx.model, lp.info.name, q);
          // Still quantized (values on the grid), but stored as float.
          auto layer = find_submodule(ctx.model, lp.info.name);
          set_weight_values(layer, q.dequant);
          note = "stored as float: " + blocker;
          ctx.warn("layer '" + lp.info.name + "': " + note);
          auto w = layer.attr("weight").toTensor();
          return static_cast<size_t>(w.numel()) * w.element_size();
        });
  }
};

std::vector<OptionDef> options() {
  const std::vector<Mode> static_only{Mode::kStatic};
  return {{"engine",
           OptionType::kString,
           nullptr,
           {"onednn", "qnnpack", "fbgemm"},
           std::nullopt,
           "quantized engine for the int8 kernels (default: onednn on x86, qnnpack on ARM)",
           {}},
          {"latency_check",
           OptionType::kBool,
           true,
           {},
           std::nullopt,
           "keep layers (or the whole model) float where int8 is slower than fp32 on this machine",
           static_only},
          {"latency_batch_sizes",
           OptionType::kIntList,
           nlohmann::json::array({1, 32}),
           {},
           1.0,
           "batch sizes of the never-slower check, measured in ascending order",
           static_only},
          {"activation_range",
           OptionType::kString,
           "auto",
           {"auto", "full", "reduced"},
           std::nullopt,
           "uint8 activations in 8 bits (full) or 7 (reduced, PyTorch's reduce_range); auto: "
           "reduced where onednn or fbgemm run on an x86 CPU without VNNI, whose int8 kernels "
           "saturate 8-bit activations",
           static_only}};
}

std::vector<ModeCaps> mode_tables() {
  const std::vector<DType> int8{DType::kInt8}, acts{DType::kInt8, DType::kUInt8};
  const std::vector<Granularity> grans{Granularity::kPerTensor, Granularity::kPerChannel};
  const std::vector<std::pair<Granularity, Granularity>> group_as_channel{
      {Granularity::kPerGroup, Granularity::kPerChannel}};
  ModeCaps weight_only;
  weight_only.mode = Mode::kWeightOnly;
  weight_only.kernel = "compact weight storage";
  ModeCaps st{Mode::kStatic,
              int8,
              acts,
              {LayerKind::kLinear, LayerKind::kConv1d, LayerKind::kConv2d, LayerKind::kConv3d},
              grans,
              "static int8 kernel in LibTorch",
              true,
              true,
              {{DType::kInt8, DType::kUInt8}},
              group_as_channel,
              /*bias_correction=*/true,
              /*times_model=*/true,
              /*folds_batchnorm=*/true,
              /*quantizes_unowned_calls=*/true};
  ModeCaps dyn{Mode::kDynamic,
               int8,
               acts,
               {LayerKind::kLinear},
               grans,
               "dynamic int8 kernel in LibTorch (quantized::linear_dynamic)",
               true,
               false,
               {},
               group_as_channel};
  return {weight_only, st, dyn};
}

BackendInfo info() {
  BackendInfo b;
  b.name = "libtorch";
  b.description =
      "real LibTorch artifacts: int8 kernels (static/dynamic PTQ, onednn/qnnpack) or compact "
      "weight-only storage";
  b.aliases = {{"torchao", {Mode::kWeightOnly}, "TAO's torchao backend (weight-only PTQ)"}};
  b.caps.modes = {Mode::kWeightOnly, Mode::kStatic, Mode::kDynamic};
  b.caps.weight_dtypes = {DType::kInt8, DType::kUInt8, DType::kInt4, DType::kFp8E4M3,
                          DType::kFp8E5M2};
  b.caps.activation_dtypes = {DType::kInt8, DType::kUInt8};
  b.caps.granularities = {Granularity::kPerTensor, Granularity::kPerChannel,
                          Granularity::kPerGroup};
  for (const auto& e : layer_kind_table().entries) b.caps.layer_kinds.push_back(e.value);
  b.caps.per_mode = mode_tables();
  b.caps.options = options();
  return b;
}

}  // namespace

}  // namespace tq::libtorch

TAOQUANT_REGISTER_BACKEND(tq::libtorch::LibTorchBackend, tq::libtorch::info);
