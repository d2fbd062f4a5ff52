#include "torch/algorithms/clip_rewrite.h"

#include <torch/csrc/jit/ir/constants.h>

#include <set>

#include "taoquant/jit.h"
#include "taoquant/model.h"

namespace tq::detail {

namespace {

using torch::jit::Node;

// The graph of `m`'s forward, inlined and folded (a copy unless `in_place`).
std::shared_ptr<torch::jit::Graph> forward_graph(const torch::jit::Module& m, bool in_place) {
  auto g = m.get_method("forward").graph();
  if (!in_place) g = g->copy();
  jit::inline_calls(*g);
  jit::fold_training_flags(*g);
  jit::fold_constants(g);
  return g;
}

// The single hardtanh(x, 0, c) of a clip module's graph, reading its input
// and returned as its output; nullptr otherwise.
Node* the_clip(torch::jit::Graph& g, double* c) {
  Node* clip = nullptr;
  size_t ops = 0;
  jit::for_each_node(g.block(), [&](Node* n) {
    const std::string k = n->kind().toQualString();
    if (n->kind() == c10::prim::Constant) return;
    ++ops;
    if (k == "aten::hardtanh" || k == "aten::hardtanh_") clip = n;
  });
  if (!clip || ops != 1 || g.inputs().size() != 2 || clip->input(0) != g.inputs()[1] ||
      g.outputs().size() != 1 || g.outputs()[0] != clip->output())
    return nullptr;
  auto lo = torch::jit::toIValue(clip->input(1)), hi = torch::jit::toIValue(clip->input(2));
  if (!lo || !hi || !lo->isScalar() || !hi->isScalar() || lo->toScalar().toDouble() != 0)
    return nullptr;
  if (c) *c = hi->toScalar().toDouble();
  return clip;
}

// The graph of a module whose forward is minimum(relu(x), self._tq_clip).
bool is_channel_clip_graph(torch::jit::Graph& g) {
  if (g.inputs().size() != 2 || g.outputs().size() != 1) return false;
  Node* min = g.outputs()[0]->node();
  return is_channel_clip(min) && min->input(0)->node()->input(0) == g.inputs()[1];
}

}  // namespace

bool is_channel_clip(Node* n) {
  if (n->kind() != c10::aten::minimum) return false;
  Node* relu = n->input(0)->node();
  Node* get = n->input(1)->node();
  return relu->kind() == c10::aten::relu && get->kind() == c10::prim::GetAttr &&
         get->s(torch::jit::attr::name) == "_tq_clip";
}

std::string node_owner(Node* n) {
  auto cs = n->callstack();
  if (!cs) return "";
  std::string path;
  for (const auto& entry : (*cs)->vec()) {
    const auto& info = std::get<2>(entry);
    // "SELF": a method called on the module itself, not a submodule.
    if (!info || info->instance_name() == "SELF") continue;
    path += (path.empty() ? "" : ".") + info->instance_name();
  }
  return path;
}

bool is_clip_module(const torch::jit::Module& model, const std::string& path) {
  try {
    auto g = forward_graph(find_submodule(model, path), false);
    return the_clip(*g, nullptr) != nullptr || is_channel_clip_graph(*g);
  } catch (const std::exception&) {
    return false;  // no such module, or no forward: not a clip module
  }
}

void rewrite_clip_modules(torch::jit::Module& model,
                          const std::map<std::string, at::Tensor>& clips) {
  std::map<c10::ClassTypePtr, double> types;  // rewritten type -> its clip value
  for (const auto& [path, t] : clips) {
    auto m = find_submodule(model, path);
    if (types.count(m.type())) continue;
    if (m.hasattr("_tq_clip")) {  // already per-channel: a new buffer only
      m.setattr("_tq_clip", t);
      continue;
    }
    auto g = forward_graph(m, true);
    double c = 0;
    Node* clip = the_clip(*g, &c);
    TORCH_CHECK(clip, "equalization: '", path, "' is not a clip module");
    m.type()->addAttribute("_tq_clip", c10::TensorType::get(), false, /*is_buffer=*/true);
    torch::jit::WithInsertPoint guard(clip);
    auto* bound = g->insertGetAttr(g->inputs().at(0), "_tq_clip");
    auto* r = g->insert(c10::aten::relu, {clip->input(0)});
    clip->output()->replaceAllUsesWith(g->insert(c10::aten::minimum, {r, bound}));
    clip->destroy();
    types[m.type()] = c;
  }
  for (const auto& inst : jit::module_instances(model)) {
    auto t = types.find(inst.module.type());
    if (t == types.end()) continue;
    auto it = clips.find(inst.path);
    torch::jit::Module m = inst.module;
    m._ivalue()->setAttr("_tq_clip",
                         it != clips.end() ? it->second : at::scalar_tensor(t->second, at::kFloat));
  }
}

}  // namespace tq::detail
