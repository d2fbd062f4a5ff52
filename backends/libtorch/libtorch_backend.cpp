// The `libtorch` backend: artifacts that run on plain LibTorch/PyTorch.
// Weight-only: compact codes + scales in the archive, decoded at load.
#include <torch/script.h>

#include <algorithm>

#include "compact_weights.h"
#include "static_ptq.h"
#include "taoquant/backend.h"
#include "taoquant/model.h"
#include "taoquant/weight_quant.h"

namespace tq::libtorch {

namespace {

// The quantize.backend_kwargs keys this backend reads (docs/spec.md).
const std::vector<std::string>& known_kwargs() {
  static const std::vector<std::string> k = {"engine", "latency_check", "latency_batch_sizes"};
  return k;
}

class LibTorchBackend : public QuantizerBase, public Calibratable {
 public:
  void prepare(QuantizeContext& ctx) override {
    std::string list;
    for (const auto& k : known_kwargs()) list += (list.empty() ? "" : ", ") + k;
    for (const auto& [key, v] : ctx.backend_kwargs().items()) {
      if (std::find(known_kwargs().begin(), known_kwargs().end(), key) != known_kwargs().end())
        continue;
      const std::string k = "quantize.backend_kwargs." + key;
      throw SpecError(ctx.spec.loc(k), k + ": unknown key for backend 'libtorch' (accepted: " +
                                           list + ")" + did_you_mean(key, known_kwargs()));
    }
  }

  void calibrate(QuantizeContext& ctx, DataLoader& loader) override { ptq_.calibrate(ctx, loader); }

  void quantize(QuantizeContext& ctx) override {
    switch (ctx.spec.quantize.mode) {
      case Mode::kWeightOnly:
        return weight_only(ctx);
      case Mode::kStatic:
        return ptq_.convert(ctx);
      case Mode::kDynamic:
        return ptq_.dynamic(ctx);
    }
  }

 private:
  StaticPtq ptq_;

  static void weight_only(QuantizeContext& ctx) {
    ctx.backend_meta["storage"] =
        "compact codes + scales, decoded by TorchScript __setstate__ at load";
    quantize_weights(
        ctx, [&](const LayerPlan& lp, const fmt::QuantizedWeight& q, std::string& note) -> size_t {
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
  b.caps.dtype_configs = {
      {Mode::kWeightOnly,
       {DType::kInt8, DType::kUInt8, DType::kInt4, DType::kFp8E4M3, DType::kFp8E5M2},
       {}},
      {Mode::kStatic, {DType::kInt8}, {DType::kInt8, DType::kUInt8}},
      {Mode::kDynamic, {DType::kInt8}, {DType::kInt8, DType::kUInt8}}};
  b.caps.fusion_patterns = {"conv-bn", "conv-bn-relu", "conv-relu", "linear-relu", "add-relu"};
  b.caps.granularities = {Granularity::kPerTensor, Granularity::kPerChannel,
                          Granularity::kPerGroup};
  for (const auto& e : layer_kind_table().entries) b.caps.layer_kinds.push_back(e.value);
  return b;
}

}  // namespace

}  // namespace tq::libtorch

TAOQUANT_REGISTER_BACKEND(tq::libtorch::LibTorchBackend, tq::libtorch::info);
