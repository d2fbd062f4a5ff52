// Test plugin: a working weight-only fake-quant backend that declares qparam
// constraints (symmetric, power-of-two scales, a minimum scale, a narrowed
// int8 range) and relies on the core to apply them, plus an observer of its
// own. Loaded by tests/torch/test_plugins*.cpp.
#include <torch/script.h>

#include <algorithm>
#include <cmath>

#include "taoquant/backend.h"
#include "taoquant/model.h"
#include "taoquant/observer.h"
#include "taoquant/plugin.h"
#include "taoquant/weight_quant.h"

TAOQUANT_PLUGIN();

namespace {

class GoodBackend : public tq::QuantizerBase {
 public:
  void quantize(tq::QuantizeContext& ctx) override {
    ctx.backend_meta["storage"] = "float weights on a power-of-two grid";
    tq::quantize_weights(ctx,
                         [&](const tq::LayerPlan& lp, const tq::wformat::QuantizedWeight& q,
                             std::string&) -> size_t {
                           auto layer = tq::find_submodule(ctx.model, lp.info.name);
                           tq::set_weight_values(layer, q.dequant);
                           return q.dequant.size() * sizeof(float);
                         });
  }
};

tq::BackendInfo good_info() {
  tq::BackendInfo b;
  b.name = "plugin_good";
  b.description = "test plugin: int8 weight-only fake quantization with power-of-two scales";
  b.aliases = {{"plugin_good_alias", {}, "another name"}};
  b.caps.modes = {tq::Mode::kWeightOnly};
  b.caps.weight_dtypes = {tq::DType::kInt8};
  b.caps.granularities = {tq::Granularity::kPerTensor, tq::Granularity::kPerChannel};
  b.caps.layer_kinds = {tq::LayerKind::kLinear, tq::LayerKind::kConv2d};
  b.caps.constraints.symmetric_only = true;
  b.caps.constraints.power_of_two_scale = true;
  b.caps.constraints.min_scale = std::ldexp(1.0, -10);
  b.caps.constraints.quant_min = -127;
  b.caps.constraints.quant_max = 127;
  return b;
}

// Symmetric amax observer (per-tensor only), to test that plugins can
// register observers.
class AbsMaxObserver : public tq::Observer {
 public:
  explicit AbsMaxObserver(const tq::ObserverConfig& cfg) : cfg_(cfg) {
    if (cfg.per_channel)
      throw tq::SpecError({}, "observer 'plugin_good_absmax' is per-tensor only");
  }
  void observe(const at::Tensor& x) override {
    if (x.numel() == 0) return;
    amax_ = std::max(amax_, x.detach().abs().max().item<double>());
  }
  tq::QParams finalize() override {
    tq::QParams q;
    q.dtype = cfg_.dtype;
    tq::quant_range(cfg_.dtype, cfg_.reduce_range, q.quant_min, q.quant_max);
    q.scale = {static_cast<float>(amax_ > 0 ? amax_ / q.quant_max : 1.0)};
    q.zero_point = {0};
    q.min_val = q.clip_min = -amax_;
    q.max_val = q.clip_max = amax_;
    return q;
  }
  std::string name() const override { return "plugin_good_absmax"; }

 private:
  tq::ObserverConfig cfg_;
  double amax_ = 0;
};

}  // namespace

TAOQUANT_REGISTER_BACKEND(GoodBackend, good_info);
TAOQUANT_REGISTER_OBSERVER(AbsMaxObserver, "plugin_good_absmax", "test plugin: symmetric amax");
