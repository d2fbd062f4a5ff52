#include "static_fakequant.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/jit.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/formats.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/record.h"
#include "taoquant/report.h"
#include "taoquant/weight_algorithms.h"
#include "taoquant/weight_quant.h"

namespace tq::fakequant {

namespace {

using torch::jit::Node;

// Quantize -> dequantize of an activation, in plain TorchScript ops so that
// the artifact needs nothing but LibTorch. fp8: the value is scaled by its
// amax-based scale, saturated, and rounded to the nearest fp8 value (ties to
// even) with the exponent taken from the value itself.
const char* kFakeQuantSource = R"JIT(
def fq_int(x: Tensor, scale: float, zero_point: int, qmin: int, qmax: int) -> Tensor:
    return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, qmin, qmax)

def fq_fp8(x: Tensor, scale: float, fmax: float, min_normal: float, step_div: float) -> Tensor:
    v = torch.clamp(x / scale, -fmax, fmax)
    e = torch.floor(torch.log2(torch.clamp(torch.abs(v), min=min_normal)))
    step = torch.exp2(e) / step_div
    return torch.round(v / step) * step * scale
)JIT";

std::shared_ptr<torch::jit::Graph> snippet(const std::string& name) {
  static std::shared_ptr<torch::jit::CompilationUnit> cu = torch::jit::compile(kFakeQuantSource);
  return torch::jit::toGraphFunction(cu->get_function(name)).graph();
}

bool is_fp8(DType d) {
  return d == DType::kFp8E4M3 || d == DType::kFp8E5M2;
}

// (largest value, smallest normal, 2^mantissa bits) of an fp8 format.
std::tuple<double, double, double> fp8_params(DType d) {
  if (d == DType::kFp8E5M2) return {57344.0, std::ldexp(1.0, -14), 4.0};
  return {448.0, std::ldexp(1.0, -6), 8.0};
}

std::string act_format(const TensorQuant& t) {
  return std::string(to_string(t.dtype)) + "/per_tensor";
}

}  // namespace

struct FakeQuantSession {
  std::unique_ptr<ObserverTable> table;
  torch::jit::Module work;                  // specialized, inlined copy with observe calls
  std::map<std::string, int64_t> slot_of;   // layer -> observer slot of its input
  std::map<std::string, Node*> observe_of;  // layer -> the observe node
  std::vector<at::Tensor> holdout;
};

namespace {

// Static bias correction (quantize.bias_correction): from the weights
// convert() stores and each layer's input qparams (integer formats; an fp8
// input counts as float here), into the biases of s.work.
void correct_static_biases(QuantizeContext& ctx, FakeQuantSession& s, CalibrationData& data) {
  const auto layers =
      static_bias_layers(ctx.plan, [&](const LayerPlan& lp) -> std::optional<StaticBiasLayer> {
        const wformat::QuantizedWeight q = quantize_planned_weight(ctx, s.work, lp);
        const at::Tensor w = find_submodule(s.work, lp.info.name).attr("weight").toTensor();
        StaticBiasLayer b;
        b.weight = at::tensor(q.dequant).reshape(w.sizes());
        auto slot = s.slot_of.find(lp.info.name);
        if (slot == s.slot_of.end()) return b;
        const ObserverSlot& os = *s.table->slots().at(static_cast<size_t>(slot->second));
        const QParams& aq = s.table->qparams(os.id);
        if (os.calls > 0 && !is_fp8(aq.dtype)) b.set_input(aq);
        return b;
      });
  (void)correct_biases(ctx, ctx.model, s.work, data, layers);
}

}  // namespace

std::shared_ptr<FakeQuantSession> calibrate_fake_quant(QuantizeContext& ctx,
                                                       CalibrationData& data) {
  auto session = std::make_shared<FakeQuantSession>();
  auto& s = *session;
  const Batch& first = data.first();
  check_input_fits(ctx.model, first, "calibration data");

  // Straight-line inference graph: branches specialized (fused fast paths
  // that bypass Linear modules are not taken), everything inlined.
  s.work = ctx.model.clone();
  s.work.eval();
  std::vector<at::Tensor> sample;
  for (const auto& t : first.inputs)
    sample.push_back(t.slice(0, 0, std::min<int64_t>(2, t.size(0))));
  const auto br = specialize_branches(s.work, sample);
  ctx.backend_meta["specialized_branches"] = {{"removed", br.removed}, {"kept", br.kept}};
  s.work = s.work.clone();  // specialization ran the model: start from a fresh plan
  auto g = s.work.get_method("forward").graph();
  jit::inline_calls(*g);

  s.table = std::make_unique<ObserverTable>();
  std::map<std::string, const LayerPlan*> plan;
  for (const auto& lp : ctx.plan.layers) plan[lp.info.name] = &lp;
  for (const jit::LayerSite& site : jit::layer_sites(*g)) {
    auto it = plan.find(site.layer);
    if (it == plan.end() || !it->second->quantized() || !it->second->activations.quantized())
      continue;
    const LayerPlan& lp = *it->second;
    ObserverTemplate t;
    t.observer = lp.activations.observer.empty() ? ctx.plan.algorithm : lp.activations.observer;
    t.cfg.dtype = lp.activations.dtype;
    t.cfg.symmetric = is_fp8(lp.activations.dtype) || lp.activations.symmetric;
    t.cfg.kwargs = lp.activations.observer_kwargs;
    t.loc = lp.activations.loc;
    const int64_t id =
        s.table->add_slot(s.table->add_template(std::move(t)), site.layer + ":input");
    s.slot_of[site.layer] = id;
    s.observe_of[site.layer] = jit::insert_call_on_input(site.op, 0, "taoquant::observe", id);
  }

  // All batches but the last observe; the last is held out for fidelity.
  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;
  data.pass([&](const std::vector<at::Tensor>& in, bool) {
    std::vector<c10::IValue> iv(in.begin(), in.end());
    s.work.forward(iv);
  });
  s.holdout = data.holdout();
  if (ctx.plan.algorithms.bias_correction) correct_static_biases(ctx, s, data);
  return session;
}

namespace {

// Each observe call becomes a quantize -> dequantize with its qparams (an
// observer the data never reached is removed: that input stays float).
// Returns the activation qparams by layer.
std::map<std::string, QParams> insert_fake_quant(FakeQuantSession& s) {
  std::map<std::string, QParams> act;
  for (const auto& [layer, obs] : s.observe_of) {
    const ObserverSlot& slot = *s.table->slots().at(static_cast<size_t>(s.slot_of[layer]));
    if (slot.calls == 0) {
      jit::remove_call(obs);
      continue;
    }
    const QParams& q = s.table->qparams(slot.id);
    act[layer] = q;
    std::vector<c10::IValue> args = {static_cast<double>(q.scale.at(0))};
    if (is_fp8(q.dtype)) {
      auto [fmax, min_normal, step_div] = fp8_params(q.dtype);
      args.insert(args.end(), {fmax, min_normal, step_div});
    } else {
      args.insert(args.end(),
                  {static_cast<int64_t>(q.zero_point.at(0)), static_cast<int64_t>(q.quant_min),
                   static_cast<int64_t>(q.quant_max)});
    }
    jit::replace_call_with_graph(obs, *snippet(is_fp8(q.dtype) ? "fq_fp8" : "fq_int"), args);
  }
  jit::fold_constants(s.work.get_method("forward").graph());
  return act;
}

struct LayerTaps {
  std::map<std::string, at::Tensor> float_inputs, fq_inputs;
};

// One layer's result: weight format and SQNR, activation range and
// histogram, output SQNR of the layer alone (float layer on its float input
// vs fake-quant layer on its fake-quant input).
LayerResult fake_quant_result(const QuantizeContext& ctx, FakeQuantSession& s, const LayerPlan& lp,
                              torch::jit::Module result, const LayerTaps& taps,
                              const std::map<std::string, QParams>& act,
                              const std::map<std::string, wformat::QuantizedWeight>& weights) {
  auto layer = find_submodule(result, lp.info.name);
  auto w = layer.attr("weight").toTensor();
  const size_t bytes = static_cast<size_t>(w.numel()) * w.element_size();
  auto wq = weights.find(lp.info.name);
  auto a = act.find(lp.info.name);
  LayerResult r = wq != weights.end() ? weight_layer_result(lp, wq->second, bytes, bytes)
                  : a == act.end()    ? kept_float_result(lp, bytes)
                                      : layer_result(lp);
  r.bytes_before = r.bytes_after = bytes;
  auto fi = taps.float_inputs.find(lp.info.name);
  if (a != act.end()) {
    r.activation_format = act_format(lp.activations);
    r.extra["activation"] = activation_stats(
        a->second, s.table->slots().at(static_cast<size_t>(s.slot_of[lp.info.name]))->obs->name());
    if (fi != taps.float_inputs.end())
      r.extra["activation"]["histogram"] = activation_histogram(fi->second, a->second);
  } else if (lp.activations.quantized() && !r.kept_float) {
    r.reason = "activations left float: the calibration data never reached this layer";
  }
  auto qi = taps.fq_inputs.find(lp.info.name);
  if (fi != taps.float_inputs.end() && qi != taps.fq_inputs.end()) {
    auto ref_y = find_submodule(ctx.model, lp.info.name).forward({fi->second}).toTensor();
    r.extra["output_sqnr_db"] =
        json_number(tensor_sqnr_db(ref_y, layer.forward({qi->second}).toTensor()));
  }
  return r;
}

}  // namespace

void convert_fake_quant(QuantizeContext& ctx, FakeQuantSession& s) {
  LayerTaps taps;
  taps.float_inputs = capture_layer_inputs(ctx.model, s.holdout);
  record_model(ctx, s.work);  // with its observe calls: the record's marks
  ctx.record().notes.push_back(
      "fakequant simulates: each quantized layer's input is quantized and dequantized, and the "
      "layer computes in float; runtimes run its Q/DQ form with float kernels");
  const auto act = insert_fake_quant(s);
  // Weights: rounded to the grid in place.
  std::map<std::string, wformat::QuantizedWeight> weights;
  for (const auto& lp : ctx.plan.layers) {
    if (!lp.quantized() || !lp.weights.quantized()) continue;
    auto layer = find_submodule(s.work, lp.info.name);
    wformat::QuantizedWeight q = quantize_planned_weight(ctx, s.work, lp);
    set_weight_values(layer, q.dequant);
    record_weight(ctx, lp, q);
    weights[lp.info.name] = std::move(q);
  }
  for (const auto& lp : ctx.plan.layers) {
    auto a = act.find(lp.info.name);
    if (a != act.end()) {
      const ObserverSlot& slot = *s.table->slots().at(static_cast<size_t>(s.slot_of[lp.info.name]));
      const int i = record_activation(ctx, slot.id, lp.info.name, a->second, slot.obs->name());
      ctx.record().tensors[static_cast<size_t>(i)].name = lp.info.name + ".input";
      ctx.record().layer(lp.info.name).quantized = true;
    } else if (!ctx.record().find_layer(lp.info.name)) {
      record_float(ctx, lp.info.name, lp.why_float());
    }
  }
  // A fresh copy: the calibrated module has run, and LibTorch keeps the
  // execution plan it made from the graph as it was then.
  torch::jit::Module result = s.work.clone();
  result.eval();
  // Fidelity on the held-out batch: the whole model, then each layer alone.
  taps.fq_inputs = capture_layer_inputs(result, s.holdout);
  torch::NoGradGuard ng;
  NoGraphOptimization no_opt;
  std::vector<c10::IValue> in(s.holdout.begin(), s.holdout.end());
  auto ref = ctx.model.forward(in), out = result.forward(in);
  if (ref.isTensor() && out.isTensor())
    ctx.backend_meta["holdout_output_sqnr_db"] =
        json_number(tensor_sqnr_db(ref.toTensor(), out.toTensor()));
  for (const auto& lp : ctx.plan.layers)
    ctx.add_layer_result(fake_quant_result(ctx, s, lp, result, taps, act, weights));
  ctx.model = result;
}

}  // namespace tq::fakequant
