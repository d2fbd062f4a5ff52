// High-bias absorption (Nagel et al. 2019, "Data-Free Quantization", sec.
// 4.1, `equalization: {absorb_bias: true}`). After equalization, channels
// whose BatchNorm shift beta_i is large against gamma_i make the activation
// range wide for nothing: for a pair A -> BN -> ReLU (or a clip) -> B, the
// pre-activation is about N(beta_i, gamma_i^2), so c_i = max(0, beta_i -
// 3 |gamma_i|) is below it almost always, and relu(h - c) = relu(h) - c
// there. beta_i (and a per-channel clip) lose c_i, and B's output gains
// W_B c back: in B's bias, or, where B has none, in the BatchNorm after B
// (its running mean loses it). Not exact: a value below c_i (about 0.13% of
// a normal channel) and a conv's zero-padded border differ slightly.
#include <ATen/ATen.h>
#include <torch/script.h>

#include "taoquant/equalization.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/weight_algorithms.h"
#include "torch/algorithms/pair_ops.h"

namespace tq {

namespace {

using torch::jit::Node;

// The BatchNorm module that alone reads each layer's output, by layer.
std::map<std::string, std::string> batch_norm_after(const torch::jit::Module& model) {
  std::map<std::string, std::string> out;
  auto g = detail::simplified_forward(model);
  jit::for_each_node(g->block(), [&](Node* n) {
    if (!jit::is_layer_op(n)) return;
    auto layer = jit::layer_of(n);
    auto uses = detail::data_uses(n->output());
    if (!layer || uses.size() != 1 ||
        std::string(uses[0].user->kind().toQualString()) != "aten::batch_norm")
      return;
    if (auto bn = jit::layer_of(uses[0].user)) out[*layer] = *bn;
  });
  return out;
}

bool through_relu(const EqualizationPair& p) {
  for (const auto& op : p.through)
    if (op == "relu" || op == "relu_" || op == "relu6" || op == "channel_clip") return true;
  return false;
}

// W_B c: what B's output loses when its input channel i drops by c_i
// (grouped convs: within the group; a Linear after flatten: every position).
at::Tensor output_shift(const at::Tensor& wb, const at::Tensor& c, bool flattened) {
  const int64_t channels = c.numel(), out = wb.size(0);
  const at::Tensor w = wb.to(at::kDouble);
  if (wb.dim() == 2) return flattened ? w.view({out, channels, -1}).sum(2).matmul(c) : w.matmul(c);
  const int64_t per_group = wb.size(1), groups = channels / per_group;
  const at::Tensor summed = w.reshape({groups, out / groups, per_group, -1}).sum(3);
  return (summed * c.view({groups, 1, per_group})).sum(2).reshape({out});
}

// One pair (`out` names it): what moved, or why nothing could.
AbsorbedPair absorb_pair(torch::jit::Module& model, const EqualizationPair& p,
                         const std::map<std::string, std::string>& bn_after) {
  AbsorbedPair out;
  out.first = p.first;
  out.second = p.second;
  auto skip = [&](const char* why) {
    out.skipped = why;
    return out;
  };
  if (p.batch_norm.empty()) return skip("no BatchNorm after the first layer");
  if (!through_relu(p)) return skip("no ReLU between the layers");
  auto bn = find_submodule(model, p.batch_norm), b = find_submodule(model, p.second);
  const at::Tensor gamma = bn.attr("weight").toTensor().detach().to(at::kDouble);
  const at::Tensor beta = bn.attr("bias").toTensor().detach().to(at::kDouble);
  at::Tensor c = (beta - 3 * gamma.abs()).clamp_min(0);
  torch::jit::Module clip_module;
  at::Tensor clip;
  if (p.clip != 0) {
    clip_module = find_submodule(model, p.clip_module);
    if (!clip_module.hasattr("_tq_clip")) return skip("the clip is not per-channel");
    clip = clip_module.attr("_tq_clip").toTensor().detach().to(at::kDouble);
    c = at::where(c < clip.reshape({-1}), c, at::zeros_like(c));  // a saturated channel stays
  }
  if (c.max().item<double>() <= 0) return skip("no channel's shift is above 3 sigma");
  const at::Tensor d = output_shift(b.attr("weight").toTensor().detach(), c, p.flattened);
  std::string into;
  if (b.attr("bias").isTensor()) {
    detail::set_tensor(b, "bias", b.attr("bias").toTensor().to(at::kDouble) + d);
    into = p.second + ".bias";
  } else if (auto it = bn_after.find(p.second); it != bn_after.end()) {
    auto next = find_submodule(model, it->second);
    detail::set_tensor(next, "running_mean",
                       next.attr("running_mean").toTensor().to(at::kDouble) - d);
    into = it->second + ".running_mean";
  } else {
    return skip("the second layer has no bias and no BatchNorm after it");
  }
  detail::set_tensor(bn, "bias", beta - c);
  if (clip.defined()) detail::set_tensor(clip_module, "_tq_clip", clip - c.view(clip.sizes()));
  out.channels = (c > 0).sum().item<int64_t>();
  out.max_shift = c.max().item<double>();
  out.compensated_in = into;
  return out;
}

}  // namespace

BiasAbsorption absorb_high_biases(torch::jit::Module& model,
                                  const std::vector<EqualizationPair>& pairs) {
  torch::NoGradGuard no_grad;
  const auto bn_after = batch_norm_after(model);
  BiasAbsorption out;
  for (const auto& p : pairs) {
    out.pairs.push_back(absorb_pair(model, p, bn_after));
    out.absorbed += out.pairs.back().skipped.empty();
  }
  return out;
}

nlohmann::json AbsorbedPair::to_json() const {
  nlohmann::json j{{"first", first}, {"second", second}};
  if (!skipped.empty()) {
    j["skipped"] = skipped;
    return j;
  }
  j.update({{"channels", channels}, {"max_shift", max_shift}, {"compensated_in", compensated_in}});
  return j;
}

nlohmann::json BiasAbsorption::to_json() const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& p : pairs) arr.push_back(p.to_json());
  return {{"pairs", arr}, {"absorbed", absorbed}};
}

}  // namespace tq
