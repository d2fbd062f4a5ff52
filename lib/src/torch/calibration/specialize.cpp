// Branch specialization: makes a TorchScript module's graphs straight-line
// for inference on inputs like the calibration data, so graph quantization
// passes (which cannot observe values returned by `if` branches
// consistently) work on models such as nn.TransformerEncoderLayer and
// torchvision's EfficientNet.
#include <map>
#include <mutex>
#include <set>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/script.h>

#include "taoquant/calibration.h"

namespace tq {

namespace {

struct BranchCounts {
  size_t taken_true = 0, taken_false = 0;
};
std::mutex g_branch_mutex;
std::vector<BranchCounts>* g_branches = nullptr;

bool record_branch_op(bool cond, int64_t id) {
  std::lock_guard<std::mutex> lock(g_branch_mutex);
  if (g_branches && id >= 0 && static_cast<size_t>(id) < g_branches->size()) {
    auto& c = (*g_branches)[static_cast<size_t>(id)];
    (cond ? c.taken_true : c.taken_false)++;
  }
  return cond;
}

TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def("record_branch(bool cond, int id) -> bool", record_branch_op);
}

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// Inlines every prim::CallFunction (recursively), so that each call site has
// its own copy of the function's branches.
void inline_functions(Block* b) {
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it++;
    for (Block* sub : n->blocks()) inline_functions(sub);
    if (n->kind() != torch::jit::prim::CallFunction) continue;
    auto fn_type = n->input(0)->type()->cast<c10::FunctionType>();
    if (!fn_type) continue;
    auto* fn = torch::jit::tryToGraphFunction(*fn_type->function());
    if (!fn) continue;
    n->removeInput(0);  // the function constant; the rest are the arguments
    torch::jit::inlineCallTo(n, fn);
    it = b->nodes().begin();  // restart: inlined nodes may contain calls
  }
}

void collect_ifs(Block* b, std::vector<Node*>& out) {
  for (Node* n : b->nodes()) {
    if (n->kind() == torch::jit::prim::If) out.push_back(n);
    for (Block* sub : n->blocks()) collect_ifs(sub, out);
  }
}

// Replaces an If node by the nodes of one of its blocks.
void inline_branch(Node* n, size_t which) {
  Block* body = n->blocks()[which];
  for (auto it = body->nodes().begin(); it != body->nodes().end();) {
    Node* inner = *it++;
    inner->moveBefore(n);
  }
  for (size_t i = 0; i < n->outputs().size(); ++i)
    n->outputs()[i]->replaceAllUsesWith(body->outputs()[i]);
  n->destroy();
}

struct Site {
  std::shared_ptr<Graph> graph;
  Node* if_node;
  Node* record;
};

}  // namespace

std::pair<size_t, size_t> specialize_branches(torch::jit::Module& model,
                                              const std::vector<at::Tensor>& sample) {
  // All method graphs, once per type (types are shared between instances).
  std::vector<std::shared_ptr<Graph>> graphs;
  std::set<c10::ClassType*> seen;
  for (const auto& m : model.modules()) {
    if (!seen.insert(m.type().get()).second) continue;
    for (const auto& method : m.get_methods()) graphs.push_back(method.graph());
  }
  for (auto& g : graphs) inline_functions(g->block());

  std::vector<Site> sites;
  for (auto& g : graphs) {
    std::vector<Node*> ifs;
    collect_ifs(g->block(), ifs);
    for (Node* n : ifs) {
      torch::jit::WithInsertPoint guard(n);
      Value* id = g->insertConstant(static_cast<int64_t>(sites.size()));
      Node* rec =
          g->create(c10::Symbol::fromQualString("taoquant::record_branch"), {n->input(0), id}, 1);
      rec->output()->setType(c10::BoolType::get());
      g->insertNode(rec);
      n->replaceInput(0, rec->output());
      sites.push_back({g, n, rec});
    }
  }

  std::vector<BranchCounts> counts(sites.size());
  {
    std::lock_guard<std::mutex> lock(g_branch_mutex);
    g_branches = &counts;
  }
  try {
    // Grad enabled: inference fast paths (fused attention/encoder kernels)
    // check for it and are skipped, so the Linear modules stay visible.
    torch::AutoGradMode grad(true);
    NoGraphOptimization no_opt;
    std::vector<c10::IValue> inputs(sample.begin(), sample.end());
    model.forward(inputs);
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_branch_mutex);
    g_branches = nullptr;
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(g_branch_mutex);
    g_branches = nullptr;
  }

  size_t removed = 0, kept = 0;
  // Later sites first: inner Ifs are collected after their parents.
  for (size_t i = sites.size(); i-- > 0;) {
    auto& s = sites[i];
    Value* cond = s.record->input(0);
    s.if_node->replaceInput(0, cond);
    s.record->destroy();
    const auto& c = counts[i];
    if (c.taken_true > 0 && c.taken_false == 0) {
      inline_branch(s.if_node, 0);
      ++removed;
    } else if (c.taken_false > 0 && c.taken_true == 0) {
      inline_branch(s.if_node, 1);
      ++removed;
    } else if (c.taken_true > 0 || c.taken_false > 0) {
      ++kept;  // both ways: data dependent, leave it
    } else {
      ++kept;  // never reached (e.g. inside a dead branch); const-prop may drop it
    }
  }
  for (auto& g : graphs) {
    torch::jit::ConstantPropagation(g);
    torch::jit::EliminateDeadCode(g);
  }
  return {removed, kept};
}

}  // namespace tq
