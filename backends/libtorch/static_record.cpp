// The libtorch backend's static PTQ result in the neutral record: the
// observed model (its observer modules mark the values LibTorch quantizes),
// each observer's range, and each layer's int8 weight codes as LibTorch's
// quantize_per_channel stores them.
#include <cmath>
#include <optional>
#include <set>

#include "static_ptq.h"
#include "static_session.h"
#include "taoquant/record.h"

namespace tq::libtorch {

namespace {

// "layer1.0.conv1:input" -> "layer1.0.conv1.input", ":input" -> "input".
std::string tensor_name(const std::string& label, std::set<std::string>& used) {
  std::string name = label;
  if (const auto colon = name.rfind(':'); colon != std::string::npos)
    name = colon == 0 ? name.substr(1) : name.substr(0, colon) + "." + name.substr(colon + 1);
  std::string unique = name;
  for (int k = 1; !used.insert(unique).second; ++k) unique = name + "." + std::to_string(k);
  return unique;
}

// The module attribute a slot observes ("blocks.0.norm1:bias"), or nullopt
// for an activation.
std::optional<at::Tensor> observed_constant(const StaticSession& s, const ObserverSlot& slot) {
  const auto colon = slot.label.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string owner = slot.label.substr(0, colon), what = slot.label.substr(colon + 1);
  if (what == "input" || what == "output") return std::nullopt;
  try {
    auto m = owner.empty() ? s.observed : find_submodule(s.observed, owner);
    if (m.hasattr(what) && m.attr(what).isTensor()) return m.attr(what).toTensor();
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Each activation observer that saw data, as a record range, by slot id;
// each constant LibTorch quantizes that is no layer's weight (a LayerNorm's
// weight and bias), with its codes.
std::map<int64_t, int> record_ranges(QuantizeContext& ctx, StaticSession& s) {
  std::map<int64_t, int> index;
  std::set<std::string> used;
  std::set<std::string> layers;
  for (const auto& lp : ctx.plan.layers) layers.insert(lp.info.name + ":weight");
  for (const auto& slot : s.table->slots()) {
    if (layers.count(slot->label) || slot->calls == 0) continue;
    if (auto c = observed_constant(s, *slot)) {
      const std::string owner = slot->label.substr(0, slot->label.rfind(':'));
      record_constant(ctx, slot->id, tensor_name(slot->label, used), owner, *c,
                      s.table->qparams(slot->id));
      continue;
    }
    const int i =
        record_activation(ctx, slot->id, "", s.table->qparams(slot->id), slot->obs->name());
    ctx.record().tensors[static_cast<size_t>(i)].name = tensor_name(slot->label, used);
    index[slot->id] = i;
  }
  return index;
}

// `b` on the grid s_in * s_w[c] (as the exporter writes the step:
// float(s_in) * float(s_w[c])), in place; the largest move, in steps.
double snap_bias(at::Tensor b, const QParams& aq, const QParams& wq) {
  torch::NoGradGuard ng;
  at::Tensor bf = b.detach().to(at::kDouble).contiguous();
  double largest = 0;
  for (int64_t c = 0; c < bf.numel(); ++c) {
    const float step = aq.scale[0] * wq.scale[wq.scale.size() == 1 ? 0 : static_cast<size_t>(c)];
    double& v = bf.data_ptr<double>()[c];
    const double snapped = std::nearbyint(v / step) * double(step);
    largest = std::max(largest, std::abs(snapped - v) / step);
    v = snapped;
  }
  b.detach().copy_(bf.to(b.scalar_type()));  // in place: `observed` shares it
  return largest;
}

// The bias at attribute path `path` of `m`, or nullopt.
std::optional<at::Tensor> bias_at(const torch::jit::Module& m, const std::string& path) {
  const auto dot = path.rfind('.');
  const torch::jit::Module owner =
      dot == std::string::npos ? m : find_submodule(m, path.substr(0, dot));
  const std::string attr = dot == std::string::npos ? path : path.substr(dot + 1);
  if (!owner.hasattr(attr) || !owner.attr(attr).isTensor()) return std::nullopt;
  return owner.attr(attr).toTensor();
}

}  // namespace

void snap_biases(QuantizeContext& ctx, StaticSession& s) {
  const auto& inputs = s.linears.layer_inputs;
  size_t moved = 0, unplanned = 0;
  double largest = 0;  // in steps of the accumulator
  std::set<std::string> planned;
  for (const auto& lp : ctx.plan.layers) {
    const std::string& name = lp.info.name;
    planned.insert(name + ":weight");
    const ObserverSlot* ws = s.table->find_label(name + ":weight");
    auto in = inputs.find(name);
    const ObserverSlot* as = in == inputs.end() ? nullptr : s.table->find_path(in->second);
    if (!lp.quantized() || s.reasons.count(name) || !ws || !as || as->calls == 0) continue;
    const auto b = bias_at(s.folded, name + ".bias");
    const QParams &wq = s.table->qparams(ws->id), &aq = s.table->qparams(as->id);
    if (!b || aq.scale.size() != 1) continue;
    s.float_biases.emplace(name + ".bias", b->detach().clone());
    largest = std::max(largest, snap_bias(*b, aq, wq));
    ++moved;
  }
  // Linears LibTorch quantizes that no planned layer owns: their biases
  // float again first (an earlier pass may have snapped one that this
  // observation leaves float), then on the grid where they are int8.
  torch::NoGradGuard ng;
  for (const auto& path : s.unplanned_biases)
    if (auto b = bias_at(s.folded, path)) b->detach().copy_(s.float_biases.at(path));
  for (const auto& l : s.linears.unplanned) {
    const ObserverSlot* ws = s.table->find_path(l.weight);
    const ObserverSlot* as = s.table->find_path(l.input);
    const auto b = bias_at(s.folded, l.bias);
    if (!ws || !as || as->calls == 0 || planned.count(ws->label) || !b) continue;
    const QParams &wq = s.table->qparams(ws->id), &aq = s.table->qparams(as->id);
    if (aq.scale.size() != 1 ||
        (wq.scale.size() != 1 && wq.scale.size() != static_cast<size_t>(b->numel())))
      continue;
    s.float_biases.emplace(l.bias, b->detach().clone());
    s.unplanned_biases.insert(l.bias);
    largest = std::max(largest, snap_bias(*b, aq, wq));
    ++unplanned;
  }
  ctx.backend_meta["biases_on_accumulator_grid"] = {
      {"layers", moved}, {"unplanned_linears", unplanned}, {"largest_move_in_steps", largest}};
}

void record_static(QuantizeContext& ctx, StaticSession& s, bool float_artifact) {
  record_model(ctx, float_artifact ? s.folded : s.observed);
  auto why = [&](const LayerPlan& lp) {
    auto it = s.reasons.find(lp.info.name);
    return it != s.reasons.end() ? it->second : lp.why_float();
  };
  // The float model's biases where correction or snapping moved them (a
  // float artifact's too: every layer kept float after they moved).
  for (const auto& [path, fb] : s.float_biases) {
    const auto dot = path.rfind('.');
    const at::Tensor now =
        find_submodule(s.folded, path.substr(0, dot)).attr(path.substr(dot + 1)).toTensor();
    if (!now.equal(fb)) {
      const at::Tensor f = fb.to(at::kFloat).contiguous();
      ctx.record().float_values[path].assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    }
  }
  if (float_artifact) {
    for (const auto& lp : ctx.plan.layers) record_float(ctx, lp.info.name, why(lp));
    return;
  }
  if (s.reduce_range)
    ctx.record().notes.push_back(
        "activations are uint8 observed in 7 bits (reduce_range): their scales cover [0, 127]");
  const auto ranges = record_ranges(ctx, s);
  const auto& inputs = s.linears.layer_inputs;
  for (const auto& lp : ctx.plan.layers) {
    const std::string& name = lp.info.name;
    const ObserverSlot* ws = s.table->find_label(name + ":weight");
    if (!lp.quantized() || s.reasons.count(name) || !ws) {
      record_float(ctx, name, ws ? why(lp) : "LibTorch's quantization pass did not reach it");
      continue;
    }
    record_weight(ctx, name, find_submodule(s.folded, name).attr("weight").toTensor(),
                  s.table->qparams(ws->id));
    auto in = inputs.find(name);
    const ObserverSlot* as = in == inputs.end() ? nullptr : s.table->find_path(in->second);
    auto r = as ? ranges.find(as->id) : ranges.end();
    if (r == ranges.end()) continue;
    ctx.record().layer(name).input = r->second;
    auto& t = ctx.record().tensors[static_cast<size_t>(r->second)];
    if (t.layer.empty()) t.layer = name;
  }
}

}  // namespace tq::libtorch
