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

#include <spdlog/spdlog.h>

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

// The nodes of a block and its sub-blocks that `keep` accepts, in pre-order
// (a node before the nodes nested in it).
template <class F>
void nodes_where(Block* b, const F& keep, std::vector<Node*>& out) {
  for (Node* n : b->nodes()) {
    if (keep(n)) out.push_back(n);
    for (Block* sub : n->blocks()) nodes_where(sub, keep, out);
  }
}
template <class F>
std::vector<Node*> nodes_where(Block* b, const F& keep) {
  std::vector<Node*> out;
  nodes_where(b, keep, out);
  return out;
}

std::vector<Node*> ifs_of(Graph& g) {
  return nodes_where(g.block(), [](Node* n) { return n->kind() == torch::jit::prim::If; });
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

// Replaces reads of a module's `training` flag by the constant false.
void fold_training_flags(Graph& g) {
  const auto reads = nodes_where(g.block(), [](Node* n) {
    return n->kind() == torch::jit::prim::GetAttr && n->s(torch::jit::attr::name) == "training" &&
           n->input(0)->type()->cast<c10::ClassType>() &&
           n->output()->type()->isSubtypeOf(*c10::BoolType::get());
  });
  for (Node* n : reads) {
    torch::jit::WithInsertPoint guard(n);
    n->output()->replaceAllUsesWith(g.insertConstant(false));
    n->destroy();
  }
}

// Whether any graph reads the grad mode or a tensor's requires_grad.
bool asks_grad_mode(const std::vector<std::shared_ptr<Graph>>& graphs) {
  auto reads_grad = [](Node* n) {
    const std::string k = n->kind().toQualString();
    return k == "aten::is_grad_enabled" || k == "prim::requires_grad" || k == "aten::requires_grad";
  };
  for (const auto& g : graphs)
    if (!nodes_where(g->block(), reads_grad).empty()) return true;
  return false;
}

struct Site {
  std::shared_ptr<Graph> graph;
  Node* if_node;
  Node* record;
};

}  // namespace

BranchSpecialization specialize_branches(torch::jit::Module& model,
                                         const std::vector<at::Tensor>& sample) {
  // The method graphs that forward reaches, once each (types are shared
  // between instances). Methods nothing calls (e.g. a BatchNorm folded
  // away) are left alone: their branches would never be reached.
  bool all_eval = true;
  for (const auto& m : model.modules()) all_eval = all_eval && !m.is_training();
  std::vector<std::shared_ptr<Graph>> graphs;
  std::set<const torch::jit::Function*> seen;
  std::vector<torch::jit::Function*> todo = {&model.get_method("forward").function()};
  while (!todo.empty()) {
    torch::jit::Function* fn = todo.back();
    todo.pop_back();
    if (!seen.insert(fn).second) continue;
    auto* gf = torch::jit::tryToGraphFunction(*fn);
    if (!gf) continue;
    graphs.push_back(gf->graph());
    auto is_call = [](Node* n) { return n->kind() == torch::jit::prim::CallMethod; };
    for (Node* n : nodes_where(gf->graph()->block(), is_call)) {
      auto cls = n->input(0)->type()->cast<c10::ClassType>();
      if (!cls) continue;
      if (auto* callee = cls->findMethod(n->s(torch::jit::attr::name))) todo.push_back(callee);
    }
  }
  BranchSpecialization result;
  size_t ifs_before = 0;
  for (auto& g : graphs) {
    inline_functions(g->block());
    ifs_before += ifs_of(*g).size();
    // Decided without data: constant conditions, and `self.training` when
    // every module is in eval mode.
    if (all_eval) fold_training_flags(*g);
    torch::jit::ConstantPropagation(g);
    torch::jit::EliminateDeadCode(g);
  }

  std::vector<Site> sites;
  for (auto& g : graphs) {
    for (Node* n : ifs_of(*g)) {
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

  result.removed = ifs_before - sites.size();
  for (const auto& site : sites) {
    const Node* c = site.record->input(0)->node();
    spdlog::debug("specialize: branch on {} ({}) needs a run", c->kind().toQualString(),
                  c->sourceRange().str().substr(0, 120));
  }
  if (sites.empty()) return result;  // nothing left to observe: no run needed
  result.ran = true;
  std::vector<BranchCounts> counts(sites.size());
  {
    std::lock_guard<std::mutex> lock(g_branch_mutex);
    g_branches = &counts;
  }
  try {
    // Grad enabled where a graph asks for it: inference fast paths (fused
    // attention/encoder kernels) check for it and are skipped, so the
    // Linear modules stay visible. Elsewhere autograd would only cost time.
    torch::AutoGradMode grad(asks_grad_mode(graphs));
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

  // Later sites first: inner Ifs are collected after their parents.
  for (size_t i = sites.size(); i-- > 0;) {
    auto& s = sites[i];
    Value* cond = s.record->input(0);
    s.if_node->replaceInput(0, cond);
    s.record->destroy();
    const auto& c = counts[i];
    if (c.taken_true > 0 && c.taken_false == 0) {
      inline_branch(s.if_node, 0);
      ++result.removed;
    } else if (c.taken_false > 0 && c.taken_true == 0) {
      inline_branch(s.if_node, 1);
      ++result.removed;
    } else {
      // Both ways (data dependent), or never reached (e.g. inside a dead
      // branch; constant propagation may drop it): left as it is.
      ++result.kept;
    }
  }
  for (auto& g : graphs) {
    torch::jit::ConstantPropagation(g);
    torch::jit::EliminateDeadCode(g);
  }
  return result;
}

}  // namespace tq
