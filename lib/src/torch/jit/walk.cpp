// The node walker, the inliner, the module-instance walker and GetAttr
// paths: the traversals every graph pass is built on.
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <spdlog/spdlog.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace prim = torch::jit::prim;

void for_each_node(Block* b, const std::function<void(Node*)>& f) {
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it++;
    for (Block* sub : n->blocks()) for_each_node(sub, f);
    f(n);
  }
}

namespace {

void find_nodes_into(Block* b, const std::function<bool(Node*)>& keep, std::vector<Node*>& out) {
  for (Node* n : b->nodes()) {
    if (keep(n)) out.push_back(n);
    for (Block* sub : n->blocks()) find_nodes_into(sub, keep, out);
  }
}

// The graph function a call node calls, or nullptr (a builtin, an unknown
// method, or a call kind `which` leaves alone).
torch::jit::GraphFunction* callee_of(Node* n, Calls which) {
  if (n->kind() == prim::CallFunction) {
    auto fn_type = n->input(0)->type()->cast<c10::FunctionType>();
    return fn_type ? torch::jit::tryToGraphFunction(*fn_type->function()) : nullptr;
  }
  if (n->kind() != prim::CallMethod || which != Calls::kAll) return nullptr;
  auto cls = n->input(0)->type()->cast<c10::ClassType>();
  torch::jit::Function* fn = cls ? cls->findMethod(n->s(torch::jit::attr::name)) : nullptr;
  return fn ? torch::jit::tryToGraphFunction(*fn) : nullptr;
}

}  // namespace

std::vector<Node*> find_nodes(Block* b, const std::function<bool(Node*)>& keep) {
  std::vector<Node*> out;
  find_nodes_into(b, keep, out);
  return out;
}

bool has_node(Block* b, const std::string& kind) {
  const auto sym = c10::Symbol::fromQualString(kind);
  return !find_nodes(b, [&](Node* n) { return n->kind() == sym; }).empty();
}

size_t inline_calls(Graph& g, Calls which) {
  size_t inlined = 0;
  // Rounds: a callee's optimized graph is itself inlined only when the graph
  // executor's optimizations were on when it was made, and a callee's graph
  // as written never is.
  for (int round = 0; round < 64; ++round) {
    const auto calls =
        find_nodes(g.block(), [&](Node* n) { return callee_of(n, which) != nullptr; });
    if (calls.empty()) break;
    for (Node* n : calls) {
      torch::jit::GraphFunction* fn = callee_of(n, which);
      if (n->kind() == prim::CallFunction) n->removeInput(0);  // the function constant
      if (which == Calls::kAll)
        torch::jit::inlineCallTo(n, fn, fn->optimized_graph().get());
      else
        torch::jit::inlineCallTo(n, fn);
      ++inlined;
    }
  }
  return inlined;
}

std::shared_ptr<Graph> inlined_graph(const Module& m, const std::string& name) {
  auto g = m.get_method(name).graph()->copy();
  inline_calls(*g);
  return g;
}

namespace {

void collect_instances(const Module& m, int index, std::vector<ModuleInstance>& out) {
  const auto type = m.type();
  const auto obj = m._ivalue();
  const std::string prefix = out[static_cast<size_t>(index)].path;
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const auto& attr = type->getAttribute(i);
    if (!attr->cast<c10::ClassType>() || !attr->is_module()) continue;
    const std::string name = type->getAttributeName(i);
    if (i >= obj->slots().size() || !obj->getSlot(i).isObject()) {
      spdlog::debug("{}: module attribute '{}' has no value", prefix.empty() ? "<model>" : prefix,
                    name);
      continue;
    }
    Module child(obj->getSlot(i).toObject());
    out.push_back({prefix.empty() ? name : prefix + "." + name, name, child, index, i});
    collect_instances(child, static_cast<int>(out.size() - 1), out);
  }
}

}  // namespace

std::vector<ModuleInstance> module_instances(const Module& root) {
  std::vector<ModuleInstance> out;
  out.push_back({"", "", root, -1, 0});
  collect_instances(root, 0, out);
  return out;
}

size_t on_every_method(Module& root, const std::function<size_t(Graph&)>& pass) {
  size_t sum = 0;
  for (auto& inst : module_instances(root))
    for (const auto& method : inst.module.get_methods()) sum += pass(*method.graph());
  return sum;
}

std::optional<std::string> attr_path(Value* v) {
  std::string path;
  while (v->node()->kind() == prim::GetAttr) {
    const std::string& name = v->node()->s(torch::jit::attr::name);
    path = path.empty() ? name : name + "." + path;
    v = v->node()->input(0);
  }
  if (v->node()->kind() != prim::Param) return std::nullopt;
  return path;
}

}  // namespace tq::jit
