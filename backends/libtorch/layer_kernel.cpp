#include "layer_kernel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>

#include <optional>

#include <spdlog/spdlog.h>

#include "latency.h"
#include "taoquant/latency.h"

namespace tq::libtorch {

namespace {

c10::IValue type_constant(const torch::jit::Module& m, const char* name) {
  auto t = m.type();
  if (!t->hasConstant(name)) return c10::IValue();
  return t->getConstant(name);
}

std::vector<int64_t> int_list(const c10::IValue& v) {
  std::vector<int64_t> l;
  if (v.isTuple())
    for (const auto& e : v.toTupleRef().elements()) l.push_back(e.toInt());
  else
    l = v.toIntVector();
  return l;
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

std::vector<c10::IValue> call_op(const char* name, const char* overload,
                                 std::vector<c10::IValue> args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  torch::jit::Stack stack(std::move(args));
  op.callBoxed(&stack);
  return stack;
}

namespace {

// A convolution's geometry, as its prepack takes it.
struct ConvGeometry {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};

ConvGeometry conv_geometry(const torch::jit::Module& layer) {
  auto stride = type_constant(layer, "stride"), padding = type_constant(layer, "padding"),
       dilation = type_constant(layer, "dilation"), groups = type_constant(layer, "groups");
  if (!stride.isTuple() && !stride.isIntList()) throw Untimed("stride is not a list of ints");
  if (!padding.isTuple() && !padding.isIntList())
    throw Untimed("padding is not a list of ints ('same'/'valid')");
  return {int_list(stride), int_list(padding), int_list(dilation), groups.toInt()};
}

// The layer kind's int8 op; throws Untimed when it has none.
jit::QuantizedOp int8_op(LayerKind kind) {
  const auto op = jit::quantized_op(kind);
  if (!op) throw Untimed(std::string(to_string(kind)) + " has no static int8 kernel");
  return *op;
}

}  // namespace

std::string kernel_key(const torch::jit::Module& layer, LayerKind kind, const QParams& wq) {
  (void)int8_op(kind);
  const at::Tensor w = layer.attr("weight").toTensor();
  std::string key = "layer/" + std::string(to_string(kind)) + "/w=" + shape_text(w, 0) +
                    (layer.hasattr("bias") && layer.attr("bias").isTensor() ? "/bias" : "") +
                    (wq.per_channel ? "/per_channel" : "/per_tensor");
  if (kind == LayerKind::kLinear) return key;
  const ConvGeometry g = conv_geometry(layer);
  return key + "/s=" + ints_text(g.stride) + "/p=" + ints_text(g.padding) +
         "/d=" + ints_text(g.dilation) + "/g=" + std::to_string(g.groups);
}

LayerKernel pack_layer(const torch::jit::Module& layer, LayerKind kind, const QParams& wq,
                       std::string key) {
  const jit::QuantizedOp op = int8_op(kind);
  at::Tensor w = layer.attr("weight").toTensor().detach();
  c10::IValue bias = layer.hasattr("bias") ? layer.attr("bias") : c10::IValue();
  // Symmetric int8 along dim 0, as LibTorch's quantize_per_channel stores it.
  QParams sym = wq;
  sym.dtype = DType::kInt8;
  sym.axis = 0;
  sym.zero_point.assign(sym.scale.size(), 0);
  const at::Tensor codes = quantize_codes(w, sym);
  auto scales = torch::tensor(wq.scale, torch::kDouble);
  at::Tensor qw = wq.per_channel
                      ? at::_make_per_channel_quantized_tensor(
                            codes, scales, torch::zeros({scales.numel()}, torch::kLong), 0)
                      : at::_make_per_tensor_quantized_tensor(codes, wq.scale[0], 0);
  if (kind == LayerKind::kLinear)
    return {op, call_op(op.prepack, "", {qw, bias}).at(0), kind, std::move(key)};
  const ConvGeometry g = conv_geometry(layer);
  auto packed =
      call_op(op.prepack, "", {qw, bias, g.stride, g.padding, g.dilation, g.groups}).at(0);
  return {op, packed, kind, std::move(key)};
}

at::Tensor quantize_input(const at::Tensor& x, const QParams& aq) {
  return at::quantize_per_tensor(x, aq.scale[0], aq.zero_point[0], c10::kQUInt8);
}

at::Tensor run_quantized(const LayerKernel& k, const at::Tensor& xq, const QParams& aq) {
  return call_op(k.op.op, k.op.overload,
                 {xq, k.packed, aq.scale[0], static_cast<int64_t>(aq.zero_point[0])})
      .at(0)
      .toTensor();
}

at::Tensor run_kernel(const LayerKernel& k, const at::Tensor& x, const QParams& aq) {
  return run_quantized(k, quantize_input(x, aq), aq);
}

at::Tensor resize_quantized_batch(const at::Tensor& xq, int64_t bs) {
  return at::_make_per_tensor_quantized_tensor(resize_batch(xq.int_repr(), bs), xq.q_scale(),
                                               xq.q_zero_point());
}

void for_each_int8_layer(const Plan& plan, const torch::jit::Module& folded,
                         const std::map<std::string, std::string>& input_observers,
                         ObserverTable& table, const std::map<std::string, at::Tensor>& inputs,
                         const std::function<void(const Int8Layer&)>& fn,
                         std::vector<std::pair<std::string, std::string>>* skipped) {
  torch::NoGradGuard ng;
  for (const auto& lp : plan.layers) {
    const ObserverSlot* ws = table.find_label(lp.info.name + ":weight");
    if (!ws) continue;  // not int8
    try {
      auto xi = inputs.find(lp.info.name);
      if (xi == inputs.end())
        throw Untimed("no input captured (not reached by the held-out batch)");
      auto oi = input_observers.find(lp.info.name);
      const ObserverSlot* as = oi == input_observers.end() ? nullptr : table.find_path(oi->second);
      if (!as) throw Untimed("no observer found for its input");
      const auto layer = find_submodule(folded, lp.info.name);
      const QParams wq = table.qparams(ws->id);
      const std::string key = kernel_key(layer, lp.info.kind, wq);
      std::optional<LayerKernel> packed;
      auto kernel = [&]() -> const LayerKernel& {
        if (!packed) packed = pack_layer(layer, lp.info.kind, wq, key);
        return *packed;
      };
      fn({lp.info.name, layer, key, table.qparams(as->id), xi->second, kernel});
    } catch (const std::exception& e) {
      spdlog::info("static_ptq: layer {} not run alone: {}", lp.info.name, e.what());
      if (skipped) skipped->emplace_back(lp.info.name, e.what());
    }
  }
}

}  // namespace tq::libtorch
