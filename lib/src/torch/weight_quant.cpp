#include "taoquant/weight_quant.h"

#include "taoquant/record.h"

#include <algorithm>

#include <torch/script.h>

#include "taoquant/model.h"
#include "taoquant/qparams.h"

namespace tq {

wformat::WeightFormat weight_format_of(const TensorQuant& t) {
  wformat::WeightFormat f;
  f.dtype = t.dtype;
  f.granularity = t.granularity;
  f.axis = t.axis;
  f.group_size = t.group_size;
  f.symmetric = t.symmetric;
  return f;
}

std::vector<float> read_weight(const torch::jit::Module& layer, std::vector<int64_t>* shape) {
  auto w = layer.attr("weight").toTensor().detach().to(torch::kCPU, torch::kFloat).contiguous();
  if (shape) *shape = w.sizes().vec();
  const float* p = w.data_ptr<float>();
  return std::vector<float>(p, p + w.numel());
}

wformat::QuantizedWeight quantize_layer_weight(const torch::jit::Module& model,
                                               const LayerPlan& lp) {
  auto layer = find_submodule(model, lp.info.name);
  std::vector<int64_t> shape;
  auto w = read_weight(layer, &shape);
  return wformat::quantize_weight(w.data(), shape, weight_format_of(lp.weights));
}

void set_weight_values(torch::jit::Module& layer, const std::vector<float>& values) {
  auto old = layer.attr("weight").toTensor();
  auto t = torch::from_blob(const_cast<float*>(values.data()), old.sizes(), torch::kFloat)
               .to(old.device(), old.scalar_type())
               .clone();
  t.set_requires_grad(old.requires_grad());
  layer.setattr("weight", t);
}

LayerResult weight_layer_result(const LayerPlan& lp, const wformat::QuantizedWeight& q,
                                size_t bytes_before, size_t bytes_after) {
  LayerResult r;
  r.name = lp.info.name;
  r.class_name = lp.info.class_name;
  r.weight_shape = lp.info.weight_shape;
  TensorQuant t = lp.weights;
  if (q.group_size > 0) t.group_size = static_cast<int>(q.group_size);
  r.weight_format = t.str();
  if (!q.scales.empty()) {
    auto [mn, mx] = std::minmax_element(q.scales.begin(), q.scales.end());
    r.scale_min = *mn;
    r.scale_max = *mx;
  }
  r.weight_sqnr_db = q.sqnr_db;
  r.bytes_before = bytes_before;
  r.bytes_after = bytes_after;
  r.extra["symmetric"] = lp.weights.symmetric;
  if (q.group_size > 0) {
    r.extra["group_size"] = q.group_size;
    if (q.group_size != lp.weights.group_size)
      r.reason = "group_size " + std::to_string(lp.weights.group_size) + " > row length; used " +
                 std::to_string(q.group_size);
  }
  return r;
}

}  // namespace tq

namespace tq {

wformat::QuantizedWeight quantize_planned_weight(const QuantizeContext& ctx,
                                                 const torch::jit::Module& model,
                                                 const LayerPlan& lp) {
  auto o = ctx.weight_overrides.find(lp.info.name);
  if (o != ctx.weight_overrides.end() && o->second) return *o->second;
  return round_planned_weight(ctx, model, lp);
}

wformat::QuantizedWeight round_planned_values(const QuantizeContext& ctx, const LayerPlan& lp,
                                              const std::vector<float>& values,
                                              const std::vector<int64_t>& shape) {
  if (!constraints_active(ctx.plan.constraints))
    return wformat::quantize_weight(values.data(), shape, weight_format_of(lp.weights));
  return quantize_weight_constrained(values.data(), shape, weight_format_of(lp.weights),
                                     ctx.plan.constraints);
}

wformat::QuantizedWeight round_planned_weight(const QuantizeContext& ctx,
                                              const torch::jit::Module& model,
                                              const LayerPlan& lp) {
  std::vector<int64_t> shape;
  auto values = read_weight(find_submodule(model, lp.info.name), &shape);
  return round_planned_values(ctx, lp, values, shape);
}

void quantize_weights(QuantizeContext& ctx, const WeightStoreFn& store) {
  // The record's model: the float weights, before `store` replaces them.
  if (!ctx.record().model) record_model(ctx, ctx.model);
  for (const auto& lp : ctx.plan.layers) {
    auto layer = find_submodule(ctx.model, lp.info.name);
    auto w = layer.attr("weight").toTensor();
    size_t before = static_cast<size_t>(w.numel()) * w.element_size();
    if (!lp.quantized() || !lp.weights.quantized()) {
      ctx.add_layer_result(kept_float_result(lp, before));
      record_float(ctx, lp.info.name, ctx.layer_results().back().reason);
      continue;
    }
    // The backend's declared qparam constraints apply to the scales computed here.
    wformat::QuantizedWeight q = quantize_planned_weight(ctx, ctx.model, lp);
    std::string note;
    size_t after = store(lp, q, note);
    record_weight(ctx, lp, q);
    auto r = weight_layer_result(lp, q, before, after);
    if (!note.empty()) r.reason = r.reason.empty() ? note : r.reason + "; " + note;
    ctx.add_layer_result(std::move(r));
  }
}

}  // namespace tq
