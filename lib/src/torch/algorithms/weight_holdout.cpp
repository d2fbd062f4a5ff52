// The held-out checks of the weight-only algorithm stage (issue 30): each
// layer's output on the held-out calibration batch with nearest rounding,
// GPTQ's rounding and the bias shift; a result that makes it worse is not
// applied.
#include <ATen/ATen.h>

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/weight_quant.h"
#include "torch/algorithms/pair_ops.h"
#include "torch/algorithms/weight_jobs.h"

namespace tq::detail {

namespace {

// `b` plus a bias shift; a shift applied to the BatchNorm after the layer
// acts as a bias.
at::Tensor with_shift(const at::Tensor& b, const at::Tensor& shift) {
  return b.defined() ? b + shift.to(at::kFloat) : shift.to(at::kFloat);
}

// The held-out checks of the layer alone: its float output on held-out
// inputs `x` against the outputs with nearest rounding, with GPTQ's
// rounding (on `xq`, its inputs in the rounded model, for sequential GPTQ)
// and with the bias shift. An algorithm that makes the output worse is
// dropped (detail::holdout_verdict); without GPTQ, the shift is recomputed
// for the nearest rounding first.
void decide_on_holdout(const QuantizeContext& ctx, Job& j, Outcome& o, const at::Tensor& x,
                       const at::Tensor& xq, StageResult& result) {
  auto layer = find_submodule(ctx.model, j.lp->info.name);
  const at::Tensor w = layer.attr("weight").toTensor().detach().to(at::kFloat).contiguous();
  at::Tensor b = layer.hasattr("bias") && layer.attr("bias").isTensor()
                     ? layer.attr("bias").toTensor().detach().to(at::kFloat)
                     : at::Tensor();
  const at::Tensor wn = values_of(round_planned_weight(ctx, ctx.model, *j.lp), w);
  const at::Tensor xf = x.to(at::kFloat), y = layer_forward(j.g, xf, w, b);
  at::Tensor wq = wn;
  if (o.rounded) {
    const at::Tensor xg = xq.defined() ? xq.to(at::kFloat) : xf, wg = values_of(*o.rounded, w);
    const bool kept =
        detail::holdout_verdict(j.facts["gptq"], tensor_sqnr_db(y, layer_forward(j.g, xg, wn, b)),
                                tensor_sqnr_db(y, layer_forward(j.g, xg, wg, b)), "GPTQ");
    if (kept) wq = wg;
    if (!kept) o.rounded = nullptr;
    if (!kept) result.reject("gptq", j.lp->info.name);
    if (!kept && o.bias_shift.defined())  // the shift was for GPTQ's weights
      o.bias_shift = bias_correction_shift(j.g, j.sum / static_cast<double>(j.count), wn - w);
  }
  if (o.bias_shift.defined()) {
    auto& f = j.facts["bias_correction"];
    if (!detail::holdout_verdict(
            f, tensor_sqnr_db(y, layer_forward(j.g, xf, wq, b)),
            tensor_sqnr_db(y, layer_forward(j.g, xf, wq, with_shift(b, o.bias_shift))),
            "bias correction")) {
      o.bias_shift = at::Tensor();
      f.erase("applied_to");
      result.reject("bias_correction", j.lp->info.name);
    }
  }
  const at::Tensor ba = o.bias_shift.defined() ? with_shift(b, o.bias_shift) : b;
  j.facts["holdout_output_sqnr_db"] = {
      {"nearest", tensor_sqnr_db(y, layer_forward(j.g, xf, wn, b))},
      {"after", tensor_sqnr_db(y, layer_forward(j.g, xf, wq, ba))},
      {"samples", x.size(0)}};
}

// Each layer's output inside the rounded model against the float model's,
// on the held-out batch: with every quantized layer rounded to nearest, and
// with the algorithms' results. Unlike holdout_output_sqnr_db (the layer
// alone, on float inputs), this includes the error coming in from the
// layers before. Returns the float model's capture and the rounded
// model's (inputs and outputs).
struct HeldOut {
  LayerCapture fl, after;
};
HeldOut holdout_in_model(const QuantizeContext& ctx, CalibrationData& data, std::vector<Job>& jobs,
                         Results& r) {
  if (!r.rounded) {
    r.rounded = rounded_shadow(ctx, jobs);
    for (auto& j : jobs) apply_outcome(ctx, *r.rounded, j, r.outcomes[j.lp->info.name]);
  }
  CaptureOptions o = detail::holdout_capture();
  o.outputs = true;
  auto fl = capture_layers(ctx.model, data.holdout(), o);
  auto near = capture_layers(rounded_shadow(ctx, {}), data.holdout(), o);
  auto after = capture_layers(*r.rounded, data.holdout(), o);
  for (auto& j : jobs) {
    const std::string& name = j.lp->info.name;
    const auto &fo = fl.outputs, &no = near.outputs, &ao = after.outputs;
    auto y = fo.find(name), n = no.find(name), a = ao.find(name);
    if (y == fo.end() || n == no.end() || a == ao.end()) continue;
    j.facts["holdout_model_output_sqnr_db"] = {{"nearest", tensor_sqnr_db(y->second, n->second)},
                                               {"after", tensor_sqnr_db(y->second, a->second)},
                                               {"samples", y->second.size(0)}};
  }
  return {std::move(fl), std::move(after)};
}

}  // namespace

// The held-out checks of every job (decide_on_holdout), then the results
// that pass them into the context: GPTQ's weights for the backend, the
// bias shifts into the float model (last: the statistics above are of the
// float model, and of the rounded copy for sequential GPTQ).
void apply_results(QuantizeContext& ctx, CalibrationData& data, std::vector<Job>& jobs, Results& r,
                   bool gptq, bool sequential, StageResult& result) {
  result.declare({"gptq", "bias_correction"});
  // With GPTQ, also each layer's output inside the rounded model (bias
  // correction alone changes too little to be worth the two more runs).
  HeldOut held;
  if (gptq)
    held = holdout_in_model(ctx, data, jobs, r);
  else
    held.fl = capture_layers(ctx.model, data.holdout(), detail::holdout_capture());
  for (auto& j : jobs) {
    const std::string& name = j.lp->info.name;
    Outcome& o = r.outcomes[name];
    auto x = held.fl.inputs.find(name), xq = held.after.inputs.find(name);
    const bool paired = sequential && j.gptq && xq != held.after.inputs.end();
    if (x != held.fl.inputs.end() && j.g.why.empty())
      decide_on_holdout(ctx, j, o, x->second, paired ? xq->second : at::Tensor(), result);
    if (o.rounded) ctx.weight_overrides[name] = o.rounded;
    result.layers[name] = j.facts;
  }
  for (const auto& j : jobs) {
    const Outcome& o = r.outcomes[j.lp->info.name];
    if (o.bias_shift.defined()) apply_bias_shift(ctx, ctx.model, j, o.bias_shift);
  }
}

}  // namespace tq::detail
