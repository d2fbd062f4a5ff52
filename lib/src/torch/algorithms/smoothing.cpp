// The smoothing stage: SmoothQuant (smoothquant.cpp) and AWQ (awq.cpp)
// both give a Linear layer's input channels a scale s that the op before
// absorbs (its output channel j divided by s_j) and the layer's weight
// column j multiplied by it. This file finds where that is exact (the
// groups), gathers each group's input statistics over the calibration data
// in one streamed pass, and folds the scales into the float model.
#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/smoothing.h"
#include "taoquant/steps.h"
#include "taoquant/weight_algorithms.h"
#include "taoquant/weight_quant.h"
#include "torch/algorithms/pair_ops.h"

namespace tq {

namespace {

using torch::jit::Node;
using torch::jit::Value;

bool is_linear(const Node* n) {
  return std::string(n->kind().toQualString()) == "aten::linear";
}

// Ops between a LayerNorm and a Linear that keep the channels (the last
// dimension) as they are: dropout (eval), select and slice of another dimension.
bool keeps_channels(Node* u) {
  const std::string k = u->kind().toQualString();
  if (k == "aten::dropout" || k == "aten::feature_dropout") return true;
  if (k != "aten::select" && k != "aten::slice") return false;
  auto dim = torch::jit::toIValue(u->input(1));
  return dim && dim->isInt() && dim->toInt() >= 0;
}

// The Linear layers that read `v` (through ops that keep its channels), or
// empty when anything else reads it.
std::vector<Node*> linear_readers(Value* v) {
  std::vector<Node*> out;
  for (const auto& u : detail::data_uses(v)) {
    if (u.offset != 0) return {};
    if (is_linear(u.user) && jit::layer_of(u.user)) {
      out.push_back(u.user);
    } else if (keeps_channels(u.user)) {
      auto more = linear_readers(u.user->output(0));
      if (more.empty()) return {};
      out.insert(out.end(), more.begin(), more.end());
    } else {
      return {};
    }
  }
  return out;
}

// The LayerNorm module whose affine an aten::layer_norm node applies, or "".
std::string layer_norm_owner(Node* n) {
  if (std::string(n->kind().toQualString()) != "aten::layer_norm") return "";
  auto attr_owner = [&](size_t i, const char* name) -> std::optional<std::string> {
    Value* v = n->input(i);
    if (v->node()->kind() != c10::prim::GetAttr || v->node()->s(torch::jit::attr::name) != name)
      return std::nullopt;
    return jit::attr_path(v->node()->input(0));
  };
  auto w = attr_owner(2, "weight"), b = attr_owner(3, "bias");
  return w && b && *w == *b ? *w : "";
}

// Each Linear called once; each LayerNorm called once with an affine of
// as many channels as its readers' inputs.
std::vector<SmoothingGroup> layer_norm_groups(const torch::jit::Module& model,
                                              torch::jit::Graph& g) {
  std::map<std::string, int> calls;
  std::vector<std::pair<Node*, std::string>> norms;
  jit::for_each_node(g.block(), [&](Node* n) {
    if (jit::is_layer_op(n))
      if (auto l = jit::layer_of(n)) ++calls[*l];
    const std::string ln = layer_norm_owner(n);
    if (!ln.empty() && ++calls[ln] == 1) norms.emplace_back(n, ln);
  });
  std::vector<SmoothingGroup> out;
  for (const auto& [node, name] : norms) {
    SmoothingGroup grp{name, true, {}, {}};
    const int64_t channels = find_submodule(model, name).attr("weight").toTensor().numel();
    bool ok = calls[name] == 1;
    for (Node* r : linear_readers(node->output())) {
      const std::string l = *jit::layer_of(r);
      const auto w = find_submodule(model, l).attr("weight").toTensor();
      ok = ok && calls[l] == 1 && w.dim() == 2 && w.size(1) == channels;
      grp.consumers.push_back(l);
    }
    if (ok && !grp.consumers.empty()) out.push_back(std::move(grp));
  }
  return out;
}

}  // namespace

std::vector<SmoothingGroup> smoothing_groups(const torch::jit::Module& model) {
  auto out = layer_norm_groups(model, *detail::simplified_forward(model));
  // Layer -> Linear, as equalization pairs them, without a clip between.
  for (const auto& p : equalization_pairs(model)) {
    if (p.clip != 0 || p.flattened) continue;
    if (find_submodule(model, p.second).attr("weight").toTensor().dim() != 2) continue;
    out.push_back({p.first, false, p, {p.second}});
  }
  return out;
}

void apply_smoothing(torch::jit::Module& model, const SmoothingGroup& g, const at::Tensor& s) {
  torch::NoGradGuard no_grad;
  const at::Tensor sd = s.to(at::kDouble);
  if (!g.layer_norm) return detail::scale_pair(model, g.pair, sd);
  auto ln = find_submodule(model, g.producer);
  for (const char* name : {"weight", "bias"})
    detail::set_tensor(ln, name, ln.attr(name).toTensor().detach().to(at::kDouble) / sd);
  for (const auto& c : g.consumers) {
    auto m = find_submodule(model, c);
    detail::set_tensor(m, "weight", m.attr("weight").toTensor().detach().to(at::kDouble) * sd);
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// One group the plan smooths, and its input's statistics.
struct GroupJob {
  const SmoothingGroup* g = nullptr;
  std::string algorithm;                // "smoothquant" | "awq"
  std::vector<const LayerPlan*> plans;  // per consumer; nullptr when not planned
  at::Tensor absmax, abssum, h;         // [K], [K], [K, K] (AWQ), float64
  int64_t rows = 0;                     // input vectors seen
  std::string skipped;
  size_t bytes() const { return h.defined() ? static_cast<size_t>(h.numel()) * 8 : 0; }
};

GroupJob make_group_job(const QuantizeContext& ctx, const SmoothingGroup& g) {
  GroupJob j;
  j.g = &g;
  for (const auto& c : g.consumers) {
    const LayerPlan* lp = ctx.plan.find(c);
    j.plans.push_back(lp);
    for (const auto& a : lp ? lp->algorithms(ctx.plan) : std::vector<std::string>{})
      if (a == "smoothquant" || a == "awq") j.algorithm = a;
  }
  const int64_t k = find_submodule(ctx.model, g.consumers[0]).attr("weight").toTensor().size(1);
  j.absmax = at::zeros({k}, at::kDouble);
  j.abssum = at::zeros({k}, at::kDouble);
  if (j.algorithm == "awq") j.h = at::zeros({k, k}, at::kDouble);
  return j;
}

void observe(GroupJob& j, const at::Tensor& input) {
  const int64_t k = j.absmax.numel();
  if (!j.skipped.empty()) return;
  if (input.dim() == 0 || input.size(-1) != k) {
    j.skipped = "the input's last dimension is not the layer's " + std::to_string(k) + " channels";
    return;
  }
  const at::Tensor x = input.detach().reshape({-1, k}).to(at::kDouble);
  j.absmax = at::maximum(j.absmax, x.abs().amax(0));
  j.abssum += x.abs().sum(0);
  j.rows += x.size(0);
  if (j.h.defined()) j.h += at::matmul(x.t(), x);
}

// One streamed pass over the data for the jobs of `pass` (taps at the first consumer).
void gather(QuantizeContext& ctx, CalibrationData& data, const std::vector<GroupJob*>& pass) {
  std::map<std::string, GroupJob*> by_input;
  for (GroupJob* j : pass) by_input[j->g->consumers[0]] = j;
  LayerInputStream stream(ctx.model);
  data.pass([&](const std::vector<at::Tensor>& inputs, bool) {
    stream.run(inputs, [&](const std::string& layer, const at::Tensor& x) {
      auto it = by_input.find(layer);
      if (it != by_input.end()) observe(*it->second, x);
    });
  });
}

std::vector<at::Tensor> consumer_weights(const QuantizeContext& ctx, const SmoothingGroup& g) {
  std::vector<at::Tensor> out;
  for (const auto& c : g.consumers)
    out.push_back(find_submodule(ctx.model, c).attr("weight").toTensor().detach());
  return out;
}

// The largest channel over the median one: how far outliers stand out.
double outlier_ratio(const at::Tensor& absmax) {
  const double med = absmax.median().item<double>();
  return med > 0 ? absmax.max().item<double>() / med : 1.0;
}

// A consumer's weight `w` rounded as its plan says (unchanged when the
// plan keeps it float).
at::Tensor planned_weight(const QuantizeContext& ctx, const LayerPlan* lp, const at::Tensor& w) {
  if (!lp || !lp->quantized() || !lp->weights.quantized()) return w;
  const at::Tensor c = w.to(at::kFloat).contiguous();
  std::vector<float> v(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  const auto q = round_planned_values(ctx, *lp, v, c.sizes().vec());
  return at::from_blob(const_cast<float*>(q.dequant.data()), c.sizes(), at::kFloat).clone();
}

// The group's quantized output SQNR on held-out inputs `x` [rows, K] with
// the scale `s` (all ones: without it), simulated: the input divided by s
// and fake-quantized per tensor to 8 bits, symmetric (static mode: over the
// calibration range max|x / s|; dynamic mode: the batch's own), each
// consumer's weight times s rounded as planned.
double smoothed_sqnr(const QuantizeContext& ctx, const GroupJob& j, const at::Tensor& x,
                     const std::vector<at::Tensor>& weights, const at::Tensor& s) {
  const at::Tensor xs = x / s;
  const double amax =
      (ctx.plan.mode == Mode::kStatic ? j.absmax / s : xs.abs().amax(0)).max().item<double>();
  const double step = amax > 0 ? amax / 127.0 : 1.0;
  const at::Tensor xq = (xs / step).round().clamp(-127, 127) * step;
  double signal = 0, noise = 0;
  for (size_t c = 0; c < weights.size(); ++c) {
    const at::Tensor w = weights[c].to(at::kDouble);
    const at::Tensor wq = planned_weight(ctx, j.plans[c], w * s).to(at::kDouble);
    const at::Tensor y = at::matmul(x, w.t());
    signal += y.square().sum().item<double>();
    noise += (y - at::matmul(xq, wq.t())).square().sum().item<double>();
  }
  return detail::energy_db(signal, noise);
}

// What smoothing did to one group: its facts, and whether the held-out
// batch refused it.
struct GroupFacts {
  nlohmann::json facts = nlohmann::json::object();
  bool rejected = false;
};

GroupFacts smoothquant_group(QuantizeContext& ctx, const GroupJob& j, const LayerCapture& held) {
  const auto weights = consumer_weights(ctx, *j.g);
  const at::Tensor s = smoothquant_scales(j.absmax, weights, ctx.plan.algorithms.smoothquant.alpha);
  GroupFacts out;
  auto x = held.inputs.find(j.g->consumers[0]);
  const int64_t k = j.absmax.numel();
  if (x != held.inputs.end() && x->second.size(-1) == k) {
    const at::Tensor xh = x->second.reshape({-1, k}).to(at::kDouble);
    out.rejected =
        !detail::holdout_verdict(out.facts, smoothed_sqnr(ctx, j, xh, weights, at::ones_like(s)),
                                 smoothed_sqnr(ctx, j, xh, weights, s), "SmoothQuant");
    if (out.rejected) return out;
  }
  at::Tensor w_before = at::zeros_like(j.absmax), w_after = at::zeros_like(j.absmax);
  for (const auto& w : weights) {
    const at::Tensor col = w.to(at::kDouble).abs().amax(0);
    w_before = at::maximum(w_before, col);
    w_after = at::maximum(w_after, col * s);
  }
  apply_smoothing(ctx.model, *j.g, s);
  out.facts.update({{"alpha", ctx.plan.algorithms.smoothquant.alpha},
                    {"input_outlier_ratio",
                     {{"before", outlier_ratio(j.absmax)}, {"after", outlier_ratio(j.absmax / s)}}},
                    {"weight_column_outlier_ratio",
                     {{"before", outlier_ratio(w_before)}, {"after", outlier_ratio(w_after)}}},
                    {"scale_range", {s.min().item<double>(), s.max().item<double>()}}});
  return out;
}

// The held-out batch's second moment of the group's input, or undefined.
at::Tensor holdout_moment(const LayerCapture& held, const GroupJob& j) {
  auto x = held.inputs.find(j.g->consumers[0]);
  const int64_t k = j.absmax.numel();
  if (x == held.inputs.end() || x->second.size(-1) != k) return {};
  const at::Tensor v = x->second.reshape({-1, k}).to(at::kDouble);
  return at::matmul(v.t(), v);
}

GroupFacts awq_group(QuantizeContext& ctx, const GroupJob& j, const LayerCapture& held) {
  const auto weights = consumer_weights(ctx, *j.g);
  auto quantize = [&](size_t c, const at::Tensor& w) { return planned_weight(ctx, j.plans[c], w); };
  const AwqResult r = awq_search(weights, j.abssum / std::max<int64_t>(j.rows, 1), j.h,
                                 ctx.plan.algorithms.awq.grid, quantize, holdout_moment(held, j));
  double signal = 0;
  for (const auto& w : weights) {
    const at::Tensor wd = w.to(at::kDouble);
    signal += (at::matmul(wd, j.h) * wd).sum().item<double>();
  }
  const auto best = std::min_element(r.loss.begin(), r.loss.end()) - r.loss.begin();
  if (r.alpha > 0) apply_smoothing(ctx.model, *j.g, r.scale);
  GroupFacts out;
  auto& f = out.facts;
  f = {{"alpha", r.alpha},
       {"calibration_output_sqnr_db",
        {{"nearest", detail::energy_db(signal, r.loss[0])},
         {"awq", detail::energy_db(signal, r.loss[best])}}},
       {"samples", j.rows}};
  if (r.holdout_loss_nearest > 0) {
    f["holdout_output_error_ratio"] = r.holdout_loss / r.holdout_loss_nearest;
    out.rejected = r.rejected_on_holdout;
    if (out.rejected)
      f["rejected"] = "the best scale on the calibration data (a = " +
                      std::to_string(static_cast<double>(best) / ctx.plan.algorithms.awq.grid) +
                      ") did not lower the held-out batch's error";
  }
  return out;
}

}  // namespace

StageResult run_smoothing(QuantizeContext& ctx, CalibrationData& data) {
  const auto groups = smoothing_groups(ctx.model);
  std::vector<GroupJob> jobs;
  for (const auto& g : groups) {
    GroupJob j = make_group_job(ctx, g);
    if (!j.algorithm.empty()) jobs.push_back(std::move(j));
  }
  StageResult result;
  result.declare({"smoothquant", "awq"});
  size_t done = 0;
  LayerCapture held;  // the held-out batch's layer inputs, before any change
  bool captured = false;
  for (const auto& pass : detail::passes_within(jobs, size_t{512} << 20)) {
    gather(ctx, data, pass);
    if (!captured) held = capture_layers(ctx.model, data.holdout(), detail::holdout_capture());
    captured = true;
    for (GroupJob* j : pass) {
      const auto tg = Clock::now();
      GroupFacts g = !j->skipped.empty()     ? GroupFacts{{{"skipped", j->skipped}}}
                     : j->rows == 0          ? GroupFacts{{{"skipped", "no input was seen"}}}
                     : j->algorithm == "awq" ? awq_group(ctx, *j, held)
                                             : smoothquant_group(ctx, *j, held);
      g.facts["producer"] = j->g->producer;
      g.facts["seconds"] = seconds_since(tg);
      for (const auto& c : j->g->consumers) {
        result.layers[c][j->algorithm] = g.facts;
        if (g.rejected) result.reject(j->algorithm, c);
      }
      if (ctx.on_progress) ctx.on_progress("smoothing", ++done, jobs.size());
    }
  }
  result.counts = {{"groups", jobs.size()}};
  return result;
}

}  // namespace tq
