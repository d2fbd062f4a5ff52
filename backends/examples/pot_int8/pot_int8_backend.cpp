// pot_int8: symmetric int8 fake quantization with power-of-two scales, the
// scheme of Vitis-style accelerators (MQBench's "Vitis" backend), written as
// an out-of-tree tao-quant plugin: it builds against an installed tao-quant
// with find_package(TaoQuant) and is loaded with `tao-quant --plugin`.
//
// Weight-only PTQ: each planned layer's weight is observed by an observer
// ("pot_mse" by default, this plugin's own), the qparams go through the
// backend's declared constraints (tq::apply_constraints), and the weight is
// replaced by its fake-quantized values (float, exactly on the int8 grid
// k * 2^e). The artifact runs on plain PyTorch/LibTorch.
//
// backend_kwargs: observer (default pot_mse): any registered observer; a
// non-power-of-two observer (e.g. minmax) gets its scales rounded up to
// powers of two by the constraints.
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <taoquant/backend.h>
#include <taoquant/calibration.h>
#include <taoquant/model.h>
#include <taoquant/observer.h>
#include <taoquant/plugin.h>
#include <taoquant/qparams.h>
#include <taoquant/record.h>

TAOQUANT_PLUGIN();

namespace pot_int8 {

namespace {

tq::BackendInfo info();

class PotInt8Backend : public tq::QuantizerBase {
 public:
  // The option schema (info()) has already checked the type; the observer
  // name is checked here, against the observers registered now.
  void prepare(tq::QuantizeContext& ctx) override {
    const auto& opts = ctx.options();
    observer_ = opts.get_string("observer");
    const auto& reg = tq::ObserverRegistry::instance();
    if (!reg.find(observer_)) {
      throw tq::SpecError(opts.loc("observer"), tq::BackendOptions::key("observer") +
                                                    ": unknown observer '" + observer_ + "'" +
                                                    tq::did_you_mean(observer_, reg.names()) +
                                                    " (available: " + tq::join(reg.names()) + ")");
    }
  }

  void quantize(tq::QuantizeContext& ctx) override {
    ctx.backend_meta["storage"] = "float weights on the int8 power-of-two grid (fake quantization)";
    ctx.backend_meta["scheme"] = "symmetric int8, scale = 2^k";
    ctx.backend_meta["weight_observer"] = observer_;
    const tq::QParamConstraints constraints = info().caps.constraints;
    tq::record_model(ctx, ctx.model);  // the float weights, before they are rounded
    for (const auto& lp : ctx.plan.layers)
      ctx.add_layer_result(quantize_layer(ctx, lp, constraints));
  }

 private:
  tq::LayerResult quantize_layer(tq::QuantizeContext& ctx, const tq::LayerPlan& lp,
                                 const tq::QParamConstraints& constraints) const {
    auto layer = tq::find_submodule(ctx.model, lp.info.name);
    const at::Tensor w = layer.attr("weight").toTensor();
    const size_t bytes = static_cast<size_t>(w.numel()) * w.element_size();
    if (!lp.quantized() || !lp.weights.quantized()) {
      tq::record_float(ctx, lp.info.name, lp.why_float());
      return tq::kept_float_result(lp, bytes);
    }
    tq::LayerResult r = tq::layer_result(lp);
    r.bytes_before = r.bytes_after = bytes;

    // Observe, then apply the declared constraints to what the observer says.
    tq::ObserverConfig cfg;
    cfg.dtype = lp.weights.dtype;
    cfg.symmetric = true;
    cfg.per_channel = lp.weights.granularity == tq::Granularity::kPerChannel;
    cfg.axis = lp.weights.axis;
    cfg.kwargs = lp.weights.observer_kwargs;
    const tq::SourceLoc loc = lp.rule_index >= 0 ? lp.weights.loc : ctx.options().loc("observer");
    auto obs = tq::ObserverRegistry::instance().create(observer_, cfg, loc);
    const at::Tensor wf = w.detach().to(at::kFloat);
    obs->observe(wf);
    const tq::QParams qp = tq::apply_constraints(obs->finalize(), constraints);
    const auto violations = tq::constraint_violations(qp, constraints);
    if (!violations.empty())
      throw tq::RuntimeError("layer '" + lp.info.name +
                             "': qparams break the constraints: " + violations.front());

    // Fake quantization: round(w / 2^k) clamped to [qmin, qmax], times 2^k.
    at::Tensor fq;
    if (qp.per_channel) {
      auto scale = at::tensor(at::ArrayRef<float>(qp.scale), at::kFloat);
      auto zp = at::zeros({static_cast<int64_t>(qp.scale.size())}, at::kInt);
      fq = at::fake_quantize_per_channel_affine(wf, scale, zp, qp.axis, qp.quant_min, qp.quant_max);
    } else {
      fq = at::fake_quantize_per_tensor_affine(wf, qp.scale[0], 0, qp.quant_min, qp.quant_max);
    }
    layer.setattr("weight", fq.to(w.scalar_type()));
    tq::record_weight(ctx, lp.info.name, wf, qp);  // the codes, for the report and exporters

    const auto [mn, mx] = std::minmax_element(qp.scale.begin(), qp.scale.end());
    r.weight_format = lp.weights.str();
    r.scale_min = *mn;
    r.scale_max = *mx;
    r.weight_sqnr_db = tq::tensor_sqnr_db(wf, fq);
    r.extra["scale_exponents"] = {static_cast<int>(std::log2(*mn)),
                                  static_cast<int>(std::log2(*mx))};
    r.extra["observer"] = observer_;
    r.extra["symmetric"] = true;
    return r;
  }

  std::string observer_ = "pot_mse";
};

tq::BackendInfo info() {
  tq::BackendInfo b;
  b.name = "pot_int8";
  b.description =
      "symmetric int8 fake quantization with power-of-two scales (Vitis-style), example plugin";
  b.caps.modes = {tq::Mode::kWeightOnly};
  b.caps.weight_dtypes = {tq::DType::kInt8};
  b.caps.granularities = {tq::Granularity::kPerTensor, tq::Granularity::kPerChannel};
  for (const auto& e : tq::layer_kind_table().entries) b.caps.layer_kinds.push_back(e.value);
  b.caps.constraints.symmetric_only = true;
  b.caps.constraints.power_of_two_scale = true;
  b.caps.constraints.quant_min = -128;
  b.caps.constraints.quant_max = 127;
  b.caps.options = {{"observer",
                     tq::OptionType::kString,
                     "pot_mse",
                     {},
                     std::nullopt,
                     "weight observer (a registered observer name)",
                     {}}};
  return b;
}

}  // namespace

}  // namespace pot_int8

TAOQUANT_REGISTER_BACKEND(pot_int8::PotInt8Backend, pot_int8::info);
