// Dynamic int8 PTQ for the libtorch backend: Linear layers through
// quantized::linear_dynamic (activation qparams chosen at run time), on
// LibTorch's JIT passes with tao-quant's weight observers.
#include <torch/script.h>

#include "ptq_common.h"
#include "static_ptq.h"
#include "taoquant/calibration.h"
#include "taoquant/model.h"
#include "taoquant/record.h"
#include "taoquant/report.h"

namespace tq::libtorch {

using torch::jit::Module;
using QuantType = jit::QuantMode;

namespace {

constexpr const char* kNotReachedDynamic =
    "LibTorch's dynamic pass does not reach this layer: a function reads its weight "
    "(nn.MultiheadAttention's out_proj); it stays float";

// The qconfigs: activations observed at run time; each quantized layer's
// weight observer, the most common settings at the root (ptq_common.h);
// float layers none, with their reason in `reasons`.
jit::QConfigs dynamic_qconfigs(const QuantizeContext& ctx, ObserverTable& table,
                               std::map<std::string, std::string>& reasons) {
  ObserverTemplate act;  // activations: qparams are chosen at run time
  act.observer = "minmax";
  act.cfg.dtype = DType::kUInt8;
  const int ai = table.add_template(act);
  jit::QConfigs qd;
  std::vector<std::pair<std::string, ObserverTemplate>> layers;
  std::vector<ObserverTemplate> all;
  for (const auto& lp : ctx.plan.layers) {
    if (!lp.quantized()) {
      reasons[lp.info.name] = lp.why_float();
      qd[lp.info.name] = std::nullopt;
      continue;
    }
    all.push_back(weight_template(ctx.plan, &lp));
    layers.emplace_back(lp.info.name, all.back());
  }
  const ObserverTemplate root = most_common(all, same_settings, weight_template(ctx.plan, nullptr));
  qd[""] = std::make_tuple(table.make_module(ai), table.make_module(table.add_template(root)));
  for (const auto& [name, wt] : layers)
    if (!same_settings(wt, root))
      qd[name] = std::make_tuple(table.make_module(ai), table.make_module(table.add_template(wt)));
  return qd;
}

// The model with observers, each having seen what it needs. No data is
// needed: weight observers see the weights directly; activation observers
// only need to exist (their qparams are chosen at run time).
Module observe_dynamic(Module& work, const jit::QConfigs& qd, ObserverTable& table) {
  Module observed;
  try {
    observed = jit::insert_observers(work, qd, QuantType::kDynamic, /*inplace=*/false);
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    throw RuntimeError("dynamic_ptq: LibTorch could not place observers in this model: " +
                       msg.substr(0, msg.find('\n')));
  }
  table.bind(observed);
  for (const auto& slot : table.slots()) {
    auto colon = slot->label.rfind(':');
    std::string owner = slot->label.substr(0, colon);
    if (slot->label.compare(colon, std::string::npos, ":weight") == 0)
      table.observe(slot->id, find_submodule(observed, owner).attr("weight").toTensor());
    else
      table.observe(slot->id, torch::tensor({0.0f, 1.0f}));
  }
  return observed;
}

// Each layer's result and record entry: its int8 weight, or why it stays float.
void report_dynamic(QuantizeContext& ctx, const Module& work, ObserverTable& table,
                    const std::map<std::string, std::string>& reasons) {
  for (const auto& lp : ctx.plan.layers) {
    auto w = find_submodule(work, lp.info.name).attr("weight").toTensor();
    const size_t bytes = static_cast<size_t>(w.numel()) * w.element_size();
    const ObserverSlot* ws = table.find_label(lp.info.name + ":weight");
    auto it = reasons.find(lp.info.name);
    if (it != reasons.end() || !ws) {  // !ws: the pass never saw the layer called
      const bool planned = it != reasons.end();
      ctx.add_layer_result(kept_float_result(lp, bytes, planned ? it->second : kNotReachedDynamic));
      record_float(ctx, lp.info.name, ctx.layer_results().back().reason);
      continue;
    }
    record_weight(ctx, lp.info.name, w, table.qparams(ws->id));
    ctx.record().layer(lp.info.name).dynamic_input = true;
    LayerResult r = layer_result(lp);
    r.bytes_before = bytes;
    r.weight_format =
        lp.weights.granularity == Granularity::kPerTensor ? "int8/per_tensor" : "int8/per_channel";
    r.activation_format = "uint8/dynamic";
    weight_result(r, w, table.qparams(ws->id));
    ctx.add_layer_result(std::move(r));
  }
}

}  // namespace

void quantize_dynamic(QuantizeContext& ctx) {
  ctx.backend_meta["engine"] = select_engine(ctx);
  ObserverTable table;
  std::map<std::string, std::string> reasons;
  const jit::QConfigs qd = dynamic_qconfigs(ctx, table, reasons);
  Module work = ctx.model.clone();
  work.eval();
  if (const size_t n = drop_fused_fast_paths(work))
    ctx.backend_meta["fused_fast_paths_dropped"] = n;
  record_model(ctx, work);
  ctx.record().notes.push_back(
      "activations are quantized at run time from each input's own range (uint8); LibTorch's "
      "kernel and ONNX's DynamicQuantizeLinear may choose scales one step apart");
  Module observed = observe_dynamic(work, qd, table);
  Module q =
      finish_quantized(jit::insert_quant_dequant(observed, QuantType::kDynamic, /*inplace=*/false),
                       QuantType::kDynamic);
  report_dynamic(ctx, work, table, reasons);
  ctx.model = q;
}

}  // namespace tq::libtorch
