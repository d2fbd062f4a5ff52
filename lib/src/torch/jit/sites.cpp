// Layer sites and call insertion: where each layer's op is in an inlined
// graph, and custom-op calls put on its input or output (taps, observers,
// branch records).
#include <set>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace prim = torch::jit::prim;

namespace {

// A layer op's weight, seen through an observer call on it or the mark that
// replaced it.
Value* weight_of(Node* op) {
  Value* w = op->input(1);
  if (w->node()->kind() == c10::Symbol::fromQualString("taoquant::observe") ||
      w->node()->kind() == c10::Symbol::fromQualString("taoquant::mark"))
    w = w->node()->input(0);
  return w;
}

}  // namespace

std::optional<std::string> layer_of(Node* op) {
  if (op->inputs().size() < 2) return std::nullopt;
  Value* w = weight_of(op);
  if (w->node()->kind() != prim::GetAttr || w->node()->s(torch::jit::attr::name) != "weight")
    return std::nullopt;
  return attr_path(w->node()->input(0));
}

std::optional<std::string> unowned_weight(Node* op) {
  if (!is_layer_op(op) || op->inputs().size() < 2 || layer_of(op)) return std::nullopt;
  return attr_path(weight_of(op));
}

std::vector<LayerSite> layer_sites(Graph& g) {
  std::vector<LayerSite> out;
  std::set<std::string> seen;
  for_each_node(g.block(), [&](Node* n) {
    if (!is_layer_op(n)) return;
    auto layer = layer_of(n);
    if (layer && seen.insert(*layer).second) out.push_back({n, *layer});
  });
  return out;
}

Node* insert_call_on_input(Node* user, size_t index, const std::string& op, int64_t id) {
  Graph& g = *user->owningGraph();
  torch::jit::WithInsertPoint guard(user);
  Value* x = user->input(index);
  Value* id_value = g.insertConstant(id);
  Node* call = g.create(c10::Symbol::fromQualString(op), {x, id_value}, 1);
  call->insertBefore(user);
  call->output()->setType(x->type());
  user->replaceInput(index, call->output());
  return call;
}

Node* insert_call_on_output(Node* producer, const std::string& op, int64_t id) {
  Graph& g = *producer->owningGraph();
  Value* y = producer->output();
  torch::jit::WithInsertPoint guard(producer->next());
  Value* id_value = g.insertConstant(id);
  Node* call = g.create(c10::Symbol::fromQualString(op), {y, id_value}, 1);
  call->insertAfter(id_value->node());
  call->output()->setType(y->type());
  y->replaceAllUsesWith(call->output());
  call->replaceInput(0, y);
  return call;
}

void remove_call(Node* call) {
  call->output()->replaceAllUsesWith(call->input(0));
  call->destroy();
}

Value* replace_call_with_graph(Node* call, Graph& body, const std::vector<c10::IValue>& constants) {
  Graph& g = *call->owningGraph();
  torch::jit::WithInsertPoint guard(call);
  std::vector<Value*> args = {call->input(0)};
  for (const auto& c : constants) args.push_back(g.insertConstant(c));
  Value* y = torch::jit::insertGraph(g, body, args).at(0);
  call->output()->replaceAllUsesWith(y);
  call->destroy();
  return y;
}

size_t fold_training_flags(Graph& g) {
  const auto reads = find_nodes(g.block(), [](Node* n) {
    return n->kind() == prim::GetAttr && n->s(torch::jit::attr::name) == "training" &&
           n->input(0)->type()->cast<c10::ClassType>() &&
           n->output()->type()->isSubtypeOf(*c10::BoolType::get());
  });
  for (Node* n : reads) {
    torch::jit::WithInsertPoint guard(n);
    n->output()->replaceAllUsesWith(g.insertConstant(false));
    n->destroy();
  }
  return reads.size();
}

void inline_branch(Node* if_node, size_t which) {
  Block* body = if_node->blocks().at(which);
  for (auto it = body->nodes().begin(); it != body->nodes().end();) {
    Node* inner = *it++;
    inner->moveBefore(if_node);
  }
  for (size_t i = 0; i < if_node->outputs().size(); ++i)
    if_node->outputs()[i]->replaceAllUsesWith(body->outputs()[i]);
  if_node->destroy();
}

void fold_constants(const std::shared_ptr<Graph>& g) {
  std::shared_ptr<Graph> graph = g;  // ConstantPropagation takes a non-const reference
  torch::jit::ConstantPropagation(graph);
  torch::jit::EliminateDeadCode(graph);
}

}  // namespace tq::jit
