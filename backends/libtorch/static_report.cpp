// What a static run reports: the model's output against float on the
// held-out batch, and each layer's result (kept float with its reason, or
// its int8 formats, scales, weight SQNR, activation range and output SQNR).
#include "static_session.h"

#include <torch/script.h>

#include "ptq_common.h"
#include "taoquant/calibration.h"
#include "taoquant/jit.h"
#include "taoquant/report.h"
#include "taoquant/sqnr.h"
#include "taoquant/steps.h"
#include "taoquant/weight_algorithms.h"

namespace tq::libtorch {

using torch::jit::Module;

namespace {

// Output SQNR of one layer alone, float vs int8-simulated (weights on their
// grid `fq`, input through the activation qparams), on leading samples of
// the held-out batch. With `shift` (its bias correction, in `root`), the
// float reference has the float bias, and the SQNR before and after the
// correction goes to `bias_facts` (the layer's bias_correction facts).
void layer_output_sqnr(LayerResult& r, Module layer, const at::Tensor& w, const at::Tensor& fq,
                       const QParams& aq, const LayerCapture& cap, Module root,
                       const BiasShift* shift, nlohmann::json* bias_facts) {
  auto xi = cap.inputs.find(r.name);
  if (xi == cap.inputs.end()) return;
  torch::NoGradGuard ng;
  NoGraphOptimization no_opt;
  const at::Tensor& x = xi->second;
  r.extra["activation"]["histogram"] = activation_histogram(x, aq);
  if (shift) shift_bias(root, *shift, -1.0);
  auto yi = cap.outputs.find(r.name);
  const at::Tensor ref = yi != cap.outputs.end() && yi->second.dim() > 0 && x.dim() > 0 &&
                                 yi->second.size(0) == x.size(0)
                             ? yi->second
                             : layer.forward({x}).toTensor();
  auto xq = at::fake_quantize_per_tensor_affine(x, aq.scale[0], aq.zero_point[0], 0, 255);
  layer.setattr("weight", fq);
  double before = 0;
  if (shift) {
    before = tensor_sqnr_db(ref, layer.forward({xq}).toTensor());
    shift_bias(root, *shift, 1.0);
  }
  auto y = layer.forward({xq}).toTensor();
  layer.setattr("weight", w);
  r.extra["output_sqnr_db"] = json_number(tensor_sqnr_db(ref, y));
  r.extra["output_sqnr_samples"] = x.size(0);
  if (shift && bias_facts)
    (*bias_facts)["holdout_output_sqnr_db"] = {{"before", json_number(before)},
                                               {"after", r.extra["output_sqnr_db"]}};
}

// One layer's result: kept float with its reason, or its int8 formats,
// scales, weight SQNR, activation range and output SQNR.
LayerResult static_layer_result(QuantizeContext& ctx, const LayerPlan& lp, StaticSession& s,
                                const std::map<std::string, std::string>& input_observers) {
  auto layer = find_submodule(s.folded, lp.info.name);
  auto w = layer.attr("weight").toTensor();
  const size_t bytes = static_cast<size_t>(w.numel()) * w.element_size();
  auto it = s.reasons.find(lp.info.name);
  if (it != s.reasons.end()) return kept_float_result(lp, bytes, it->second);
  LayerResult r = layer_result(lp);
  r.bytes_before = bytes;
  r.weight_format =
      lp.weights.granularity == Granularity::kPerTensor ? "int8/per_tensor" : "int8/per_channel";
  r.activation_format = "uint8/per_tensor";
  const ObserverSlot* ws = s.table->find_label(lp.info.name + ":weight");
  const ObserverSlot* as = input_slot(*s.table, input_observers, lp.info.name);
  if (!ws) return r;
  const at::Tensor fq = weight_result(r, w, s.table->qparams(ws->id));
  if (!as) return r;
  const QParams& aq = s.table->qparams(as->id);
  r.extra["activation"] = activation_stats(aq, as->obs->name());
  auto sh = s.shifts.find(lp.info.name);
  const bool corrected = sh != s.shifts.end();
  layer_output_sqnr(r, layer, w, fq, aq, s.capture(), s.folded, corrected ? &sh->second : nullptr,
                    corrected ? &ctx.algorithm_facts[lp.info.name]["bias_correction"] : nullptr);
  return r;
}

}  // namespace

void report_static(QuantizeContext& ctx, StaticSession& s) {
  const auto& cap = s.capture();
  const auto& input_observers = s.linears.layer_inputs;
  // The model's output SQNR comes from the saved artifact's run on the
  // held-out batch, which publishing makes anyway (QuantizeContext).
  if (cap.model_output.isTensor())
    ctx.holdout_reference = std::make_shared<const at::Tensor>(cap.model_output.toTensor());
  for (const auto& lp : ctx.plan.layers) {
    ctx.add_layer_result(static_layer_result(ctx, lp, s, input_observers));
  }
  s.steps->step("layer SQNR");
}

}  // namespace tq::libtorch
