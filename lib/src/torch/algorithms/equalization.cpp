// Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization
// Through Weight Equalization and Bias Correction", sec. 4.1). For two
// layers joined by ops that commute with a positive per-channel scale
// (ReLU, pooling, dropout; a BatchNorm right after the first), output
// channel i of the first is divided by s_i and input channel i of the
// second multiplied by it, with s_i = sqrt(r1_i / r2_i): both then have the
// per-channel range sqrt(r1_i r2_i). r1 is the first layer's range as the
// backends quantize it (after BN folding). Chains are swept until the
// scales converge. The float model computes the same function.
//
// ReLU6 (a clip at c after a ReLU) does not commute with a scale; instead of
// replacing it with ReLU (the DFQ paper's choice, which changes the float
// model), the ReLU6 module of a pair gets a per-channel clip at c / s_i
// (relu, then minimum with a buffer of the module; clip_rewrite.cpp), which
// keeps the function exact and the model's module structure as it was.
#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>

#include "taoquant/equalization.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/weight_algorithms.h"
#include "torch/algorithms/clip_rewrite.h"
#include "torch/algorithms/pair_ops.h"

namespace tq {

namespace {

using torch::jit::Node;
using torch::jit::Value;

using detail::data_uses;

bool is_flatten_from_channels(Node* n) {
  if (std::string(n->kind().toQualString()) != "aten::flatten") return false;
  auto start = torch::jit::toIValue(n->input(1)), end = torch::jit::toIValue(n->input(2));
  return start && end && start->isInt() && end->isInt() && start->toInt() == 1 &&
         end->toInt() == -1;
}

// hardtanh(x, 0, c) with c > 0 (ReLU6: c = 6): returns c; a per-channel
// clip (minimum of a relu with a `_tq_clip` buffer): -1; else 0.
double relu_clip(Node* n) {
  if (detail::is_channel_clip(n)) return -1;
  const std::string k = n->kind().toQualString();
  if (k != "aten::hardtanh" && k != "aten::hardtanh_") return 0;
  auto lo = torch::jit::toIValue(n->input(1)), hi = torch::jit::toIValue(n->input(2));
  if (!lo || !hi || !lo->isScalar() || !hi->isScalar()) return 0;
  const double l = lo->toScalar().toDouble(), h = hi->toScalar().toDouble();
  return l == 0 && h > 0 ? h : 0;
}

// Follows the output of layer op `a` to the layer op it feeds alone.
Node* follow(Node* a, EqualizationPair& p, Node** clip_node) {
  Value* v = a->output();
  const bool linear = std::string(a->kind().toQualString()) == "aten::linear";
  for (int depth = 0; depth < 16; ++depth) {
    auto uses = data_uses(v);
    if (uses.size() != 1 || uses[0].offset != 0) return nullptr;
    Node* u = uses[0].user;
    const std::string k = u->kind().toQualString();
    if (k == "aten::batch_norm" && depth == 0 && !linear) {
      auto bn = jit::layer_of(u);
      if (!bn) return nullptr;
      p.batch_norm = *bn;
      auto eps = torch::jit::toIValue(u->input(7));
      p.bn_eps = eps && eps->isDouble() ? eps->toDouble() : 1e-5;
    } else if (jit::op_info(u).commutes_with_channel_scale) {
      p.through.push_back(k.substr(k.find("::") + 2));
    } else if (double c = relu_clip(u); c != 0 && p.clip == 0) {
      p.through.push_back(c > 0 ? "relu6" : "channel_clip");
      p.clip = c;
      if (clip_node) *clip_node = u;
    } else if (!linear && is_flatten_from_channels(u)) {
      p.through.push_back("flatten");
      p.flattened = true;
    } else if (jit::is_layer_op(u)) {
      const bool b_linear = std::string(u->kind().toQualString()) == "aten::linear";
      return (b_linear == (linear || p.flattened)) ? u : nullptr;
    } else {
      return nullptr;
    }
    v = u->output(0);
  }
  return nullptr;
}

}  // namespace

namespace {

// The pairs of an inlined graph whose constant branches are folded. A pair
// through a ReLU6 needs the clip in a module of its own, called there only
// (its clip becomes per-channel).
std::vector<EqualizationPair> pairs_in(const torch::jit::Module& model, torch::jit::Graph& g) {
  std::vector<std::pair<Node*, std::string>> sites;
  std::map<std::string, int> calls;
  jit::for_each_node(g.block(), [&](Node* n) {
    if (relu_clip(n) != 0) ++calls["clip:" + detail::node_owner(n)];
    if (!jit::is_layer_op(n)) return;
    auto l = jit::layer_of(n);
    if (!l) return;
    ++calls[*l];
    sites.emplace_back(n, *l);
  });
  std::map<Node*, std::string> layer_at(sites.begin(), sites.end());
  std::vector<EqualizationPair> out;
  for (const auto& [node, name] : sites) {
    EqualizationPair p;
    p.first = name;
    Node* clip = nullptr;
    Node* b = calls[name] == 1 ? follow(node, p, &clip) : nullptr;
    if (!b || !layer_at.count(b) || calls[layer_at[b]] != 1) continue;
    if (clip) {
      p.clip_module = detail::node_owner(clip);
      if (p.clip_module.empty() || calls["clip:" + p.clip_module] != 1 ||
          !detail::is_clip_module(model, p.clip_module))
        continue;
    }
    p.second = layer_at[b];
    out.push_back(std::move(p));
  }
  return out;
}

// Reads of the model's bool attributes (torchvision's use_res_connect)
// become constants: a deployed model's structure flags do not change.
void fold_bool_attributes(torch::jit::Graph& g, const torch::jit::Module& model) {
  const auto reads = jit::find_nodes(g.block(), [](Node* n) {
    return n->kind() == c10::prim::GetAttr &&
           n->output()->type()->isSubtypeOf(*c10::BoolType::get()) &&
           n->input(0)->type()->cast<c10::ClassType>();
  });
  for (Node* n : reads) {
    auto path = jit::attr_path(n->input(0));
    if (!path) continue;
    try {
      const auto v = find_submodule(model, *path).attr(n->s(torch::jit::attr::name));
      if (!v.isBool()) continue;
      torch::jit::WithInsertPoint guard(n);
      n->output()->replaceAllUsesWith(g.insertConstant(v.toBool()));
      n->destroy();
    } catch (const std::exception&) {
      continue;  // not a module attribute path: left as it is
    }
  }
}

}  // namespace

// `if inplace:` of ReLU and `if self.use_res_connect:` fold away.
std::shared_ptr<torch::jit::Graph> detail::simplified_forward(const torch::jit::Module& model) {
  auto g = model.get_method("forward").graph()->copy();
  jit::inline_calls(*g);
  jit::fold_training_flags(*g);
  fold_bool_attributes(*g, model);
  jit::fold_constants(g);
  return g;
}

std::vector<torch::jit::Use> detail::data_uses(Value* v) {
  std::vector<torch::jit::Use> out;
  for (const auto& u : v->uses()) {
    const std::string k = u.user->kind().toQualString();
    if (k != "aten::size" && k != "aten::dim") out.push_back(u);
  }
  return out;
}

std::vector<EqualizationPair> equalization_pairs(const torch::jit::Module& model) {
  return pairs_in(model, *detail::simplified_forward(model));
}

namespace {

struct PairTensors {
  torch::jit::Module a, b, bn;
  at::Tensor wa, ba, wb, gamma, beta, var;
  int64_t channels = 0;
};

PairTensors load(torch::jit::Module& model, const EqualizationPair& p) {
  PairTensors t;
  t.a = find_submodule(model, p.first);
  t.b = find_submodule(model, p.second);
  t.wa = t.a.attr("weight").toTensor().detach();
  t.wb = t.b.attr("weight").toTensor().detach();
  if (t.a.attr("bias").isTensor()) t.ba = t.a.attr("bias").toTensor().detach();
  if (!p.batch_norm.empty()) {
    t.bn = find_submodule(model, p.batch_norm);
    t.gamma = t.bn.attr("weight").toTensor().detach();
    t.beta = t.bn.attr("bias").toTensor().detach();
    t.var = t.bn.attr("running_var").toTensor().detach();
  }
  t.channels = t.wa.size(0);
  return t;
}

// The second layer's weight as [channels, everything else]: input channel
// c's weights (grouped convs: of its group; flattened inputs: every
// position of c).
at::Tensor by_input_channel(const at::Tensor& wb, int64_t channels) {
  const int64_t per_group = wb.size(1), out = wb.size(0);
  if (wb.dim() == 2 && per_group != channels)  // linear after flatten
    return wb.view({out, channels, -1}).permute({1, 0, 2}).reshape({channels, -1});
  const int64_t groups = channels / per_group;
  return wb.reshape({groups, out / groups, per_group, -1})
      .permute({0, 2, 1, 3})
      .reshape({channels, -1});
}

at::Tensor scale_input_channels(const at::Tensor& wb, const at::Tensor& s, int64_t channels) {
  const int64_t per_group = wb.size(1), out = wb.size(0);
  if (wb.dim() == 2 && per_group != channels)
    return (wb.view({out, channels, -1}) * s.view({1, channels, 1})).view(wb.sizes());
  const int64_t groups = channels / per_group;
  return (wb.reshape({groups, out / groups, per_group, -1}) * s.view({groups, 1, per_group, 1}))
      .view(wb.sizes());
}

// Per-output-channel range of the first layer as quantized (BN folded).
at::Tensor first_ranges(const PairTensors& t, double eps) {
  at::Tensor r = t.wa.reshape({t.channels, -1}).abs().amax(1).to(at::kDouble);
  if (t.gamma.defined())
    r = r * (t.gamma.to(at::kDouble).abs() / (t.var.to(at::kDouble) + eps).sqrt());
  return r;
}

double spread(const at::Tensor& r) {
  at::Tensor nz = r.masked_select(r > 0);
  return nz.numel() ? (nz.max() / nz.min()).item<double>() : 1.0;
}

// One equalization step of a pair; returns the scales s_i it divided the
// first layer's output channels by.
at::Tensor equalize_pair(torch::jit::Module& model, const EqualizationPair& p) {
  PairTensors t = load(model, p);
  const at::Tensor r1 = first_ranges(t, p.bn_eps);
  const at::Tensor r2 = by_input_channel(t.wb, t.channels).abs().amax(1).to(at::kDouble);
  at::Tensor s = (r1 / r2).sqrt();
  s = at::where((r1 > 0) & (r2 > 0) & s.isfinite(), s, at::ones_like(s));
  detail::scale_pair(model, p, s);
  return s;
}

// The clip module of each pair through a ReLU6 gets the per-channel clip
// c / (the product of the pair's scales).
void rewrite_clips(torch::jit::Module& model, const std::vector<EqualizationPair>& pairs,
                   const std::vector<at::Tensor>& total) {
  std::map<std::string, at::Tensor> clips;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (pairs[i].clip == 0) continue;
    const auto wdim = find_submodule(model, pairs[i].first).attr("weight").toTensor().dim();
    std::vector<int64_t> shape(static_cast<size_t>(wdim == 2 ? 1 : wdim), 1);
    shape[wdim == 2 ? 0 : 1] = total[i].numel();
    at::Tensor c = at::full({total[i].numel()}, pairs[i].clip, at::kDouble);
    if (pairs[i].clip < 0) {  // per-channel already: its own values, scaled
      const auto old = find_submodule(model, pairs[i].clip_module).attr("_tq_clip").toTensor();
      c = old.to(at::kDouble).expand(shape).reshape({-1});
    }
    clips[pairs[i].clip_module] = (c / total[i]).to(at::kFloat).reshape(shape);
  }
  if (clips.empty()) return;
  detail::rewrite_clip_modules(model, clips);
  // A method that already ran keeps its compiled plan; a clone compiles the
  // rewritten graphs.
  model = model.clone();
}

}  // namespace

void detail::set_tensor(torch::jit::Module& m, const char* name, const at::Tensor& v) {
  const at::Tensor old = m.attr(name).toTensor();
  at::Tensor n = v.to(old.scalar_type()).contiguous();
  n.set_requires_grad(old.requires_grad());
  m.setattr(name, n);
}

void detail::scale_pair(torch::jit::Module& model, const EqualizationPair& p, const at::Tensor& s) {
  PairTensors t = load(model, p);
  if (t.gamma.defined()) {
    detail::set_tensor(t.bn, "weight", t.gamma.to(at::kDouble) / s);
    detail::set_tensor(t.bn, "bias", t.beta.to(at::kDouble) / s);
  } else {
    std::vector<int64_t> shape(static_cast<size_t>(t.wa.dim()), 1);
    shape[0] = t.channels;
    detail::set_tensor(t.a, "weight", t.wa.to(at::kDouble) / s.view(shape));
    if (t.ba.defined()) detail::set_tensor(t.a, "bias", t.ba.to(at::kDouble) / s);
  }
  detail::set_tensor(t.b, "weight", scale_input_channels(t.wb.to(at::kDouble), s, t.channels));
}

Equalization equalize(torch::jit::Module& model, const std::vector<EqualizationPair>& pairs,
                      int iterations) {
  torch::NoGradGuard no_grad;
  auto ranges = [&](const EqualizationPair& p) {
    PairTensors t = load(model, p);
    return std::make_pair(spread(first_ranges(t, p.bn_eps)),
                          spread(by_input_channel(t.wb, t.channels).abs().amax(1)));
  };
  std::vector<std::pair<double, double>> spread_before;
  std::vector<at::Tensor> total;  // product of each pair's scales
  for (const auto& p : pairs) {
    spread_before.push_back(ranges(p));
    total.push_back(at::ones({load(model, p).channels}, at::kDouble));
  }
  int sweeps = 0;
  for (; sweeps < iterations; ++sweeps) {
    double change = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
      const at::Tensor s = equalize_pair(model, pairs[i]);
      total[i] *= s;
      change = std::max(change, s.log().abs().max().item<double>());
    }
    if (change < 1e-6) break;
  }
  rewrite_clips(model, pairs, total);
  Equalization out;
  out.sweeps = sweeps;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto after = ranges(pairs[i]);
    out.pairs.push_back({pairs[i].first, pairs[i].second, pairs[i].batch_norm, pairs[i].through,
                         spread_before[i].first, after.first, spread_before[i].second,
                         after.second});
  }
  return out;
}

nlohmann::json Equalization::to_json() const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& p : pairs)
    arr.push_back({{"first", p.first},
                   {"second", p.second},
                   {"batch_norm", p.batch_norm},
                   {"through", p.through},
                   {"first_range_spread",
                    {{"before", p.first_spread_before}, {"after", p.first_spread_after}}},
                   {"second_range_spread",
                    {{"before", p.second_spread_before}, {"after", p.second_spread_after}}}});
  return {{"pairs", arr}, {"sweeps", sweeps}};
}

}  // namespace tq
