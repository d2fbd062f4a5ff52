// Branch specialization: makes a TorchScript module's graphs straight-line
// for inference on inputs like the calibration data, so graph quantization
// passes (which cannot observe values returned by `if` branches
// consistently) work on models such as nn.TransformerEncoderLayer and
// torchvision's EfficientNet.
#include <algorithm>
#include <set>
#include <tuple>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>

#include <spdlog/spdlog.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"

namespace tq {

namespace {

using torch::jit::Graph;
using torch::jit::Node;

// How often each recorded `if` took each branch: the context of the
// taoquant::record_branch op.
struct BranchCounts {
  size_t taken_true = 0, taken_false = 0;
};
using BranchScope = jit::OpScope<std::vector<BranchCounts>>;

bool record_branch_op(bool cond, int64_t id) {
  auto* counts = BranchScope::current();
  if (counts && id >= 0 && static_cast<size_t>(id) < counts->size()) {
    auto& c = (*counts)[static_cast<size_t>(id)];
    (cond ? c.taken_true : c.taken_false)++;
  }
  return cond;
}

TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def("record_branch(bool cond, int id) -> bool", record_branch_op);
}

bool is_if(Node* n) {
  return n->kind() == torch::jit::prim::If;
}

// Whether any graph reads the grad mode or a tensor's requires_grad.
bool asks_grad_mode(const std::vector<std::shared_ptr<Graph>>& graphs) {
  auto reads_grad = [](Node* n) {
    const std::string k = n->kind().toQualString();
    return k == "aten::is_grad_enabled" || k == "prim::requires_grad" || k == "aten::requires_grad";
  };
  for (const auto& g : graphs)
    if (!jit::find_nodes(g->block(), reads_grad).empty()) return true;
  return false;
}

// The method graphs that forward reaches, once each (types are shared
// between instances). Methods nothing calls (e.g. a BatchNorm folded away)
// are left alone: their branches would never be reached. `every_call`: only
// those every call runs (called from the top level of forward, or of a
// method that is, not from inside an if or a loop).
std::vector<std::shared_ptr<Graph>> reached_graphs(torch::jit::Module& model,
                                                   bool every_call = false) {
  std::vector<std::shared_ptr<Graph>> graphs;
  std::set<const torch::jit::Function*> seen;
  std::vector<torch::jit::Function*> todo = {&model.get_method("forward").function()};
  auto is_call = [](Node* n) { return n->kind() == torch::jit::prim::CallMethod; };
  while (!todo.empty()) {
    torch::jit::Function* fn = todo.back();
    todo.pop_back();
    if (!seen.insert(fn).second) continue;
    auto* gf = torch::jit::tryToGraphFunction(*fn);
    if (!gf) continue;
    graphs.push_back(gf->graph());
    std::vector<Node*> calls;
    if (every_call) {
      for (Node* n : gf->graph()->block()->nodes())
        if (is_call(n)) calls.push_back(n);
    } else {
      calls = jit::find_nodes(gf->graph()->block(), is_call);
    }
    for (Node* n : calls) {
      auto cls = n->input(0)->type()->cast<c10::ClassType>();
      if (!cls) continue;
      if (auto* callee = cls->findMethod(n->s(torch::jit::attr::name))) todo.push_back(callee);
    }
  }
  return graphs;
}

// Decided without data: function calls inlined (each call site gets its own
// copy of the function's branches), constant conditions, and
// `self.training` when every module is in eval mode. Returns the number of
// ifs before.
size_t decide_without_data(const std::vector<std::shared_ptr<Graph>>& graphs, bool all_eval) {
  size_t ifs = 0;
  for (const auto& g : graphs) {
    jit::inline_calls(*g, jit::Calls::kFunctions);
    ifs += jit::find_nodes(g->block(), is_if).size();
    if (all_eval) jit::fold_training_flags(*g);
    jit::fold_constants(g);
  }
  return ifs;
}

// Whether a block raises as soon as it runs: a prim::RaiseException among
// its own nodes (the failing side of an `assert`).
bool raises(torch::jit::Block* b) {
  for (Node* n : b->nodes())
    if (n->kind() == torch::jit::prim::RaiseException) return true;
  return false;
}

// Asserts on every call's path, decided without data: an `if` at the top
// level of a graph that every call runs, one of whose sides raises, becomes
// its other side. That is what the recording run would decide (it reaches
// the `if`, and check_input_fits, before calibration, ran the model on the
// same two samples without an error); where nothing else is left, the run is not
// needed (ResNet-50: the assert in adaptive_avg_pool2d's
// list_with_default, a 2-sample float forward of 0.2 s). An assert the
// sample might not reach (inside a branch or a loop, or in a method called
// from one) is left to the run.
size_t decide_passed_asserts(torch::jit::Module& model) {
  size_t decided = 0;
  for (const auto& g : reached_graphs(model, /*every_call=*/true)) {
    std::vector<std::pair<Node*, size_t>> asserts;  // the if, the side kept
    for (Node* n : g->block()->nodes())
      if (is_if(n) && raises(n->blocks()[0]) != raises(n->blocks()[1]))
        asserts.emplace_back(n, raises(n->blocks()[0]) ? 1 : 0);
    for (auto [n, side] : asserts) jit::inline_branch(n, side);
    decided += asserts.size();
  }
  return decided;
}

struct Site {
  Node* if_node;
  Node* record;
};

// A taoquant::record_branch call on the condition of every `if` left.
std::vector<Site> record_branches(const std::vector<std::shared_ptr<Graph>>& graphs) {
  std::vector<Site> sites;
  for (const auto& g : graphs) {
    for (Node* n : jit::find_nodes(g->block(), is_if)) {
      Node* rec = jit::insert_call_on_input(n, 0, "taoquant::record_branch",
                                            static_cast<int64_t>(sites.size()));
      sites.push_back({n, rec});
      const Node* c = rec->input(0)->node();
      spdlog::debug("specialize: branch on {} ({}) needs a run", c->kind().toQualString(),
                    c->sourceRange().str().substr(0, 120));
    }
  }
  return sites;
}

// Removes the record calls; every `if` that always took the same branch is
// replaced by that branch.
void apply_decisions(const std::vector<Site>& sites, const std::vector<BranchCounts>& counts,
                     BranchSpecialization& result) {
  // Later sites first: inner ifs are collected after their parents.
  for (size_t i = sites.size(); i-- > 0;) {
    jit::remove_call(sites[i].record);
    const auto& c = counts[i];
    if (c.taken_true > 0 && c.taken_false == 0) {
      jit::inline_branch(sites[i].if_node, 0);
      ++result.removed;
    } else if (c.taken_false > 0 && c.taken_true == 0) {
      jit::inline_branch(sites[i].if_node, 1);
      ++result.removed;
    } else {
      // Both ways (data dependent), or never reached (e.g. inside a dead
      // branch; constant propagation may drop it): left as it is.
      ++result.kept;
    }
  }
}

// Whether every module instance is in eval mode (`self.training` folds).
bool all_in_eval(const torch::jit::Module& model) {
  const auto all = jit::module_instances(model);
  return std::none_of(all.begin(), all.end(),
                      [](const auto& inst) { return inst.module.is_training(); });
}

bool is_fused_fast_path(Node* n) {
  return n->kind() == c10::Symbol::fromQualString("aten::_transformer_encoder_layer_fwd") ||
         n->kind() == c10::Symbol::fromQualString("aten::_native_multi_head_attention");
}

bool holds_fused(torch::jit::Block* b) {
  return !jit::find_nodes(b, is_fused_fast_path).empty();
}

// The outermost `if` with a fused op on one side only, and that side.
std::pair<Node*, size_t> fused_branch(const std::shared_ptr<Graph>& g) {
  for (Node* n : jit::find_nodes(g->block(), is_if)) {
    const bool in0 = holds_fused(n->blocks()[0]), in1 = holds_fused(n->blocks()[1]);
    if (in0 != in1) return {n, in0 ? 0 : 1};
  }
  return {nullptr, 0};
}

}  // namespace

size_t drop_fused_fast_paths(torch::jit::Module& model) {
  const bool all_eval = all_in_eval(model);
  // No inlining: LibTorch's dynamic pass quantizes Linear modules called by
  // a method, not the linear calls inside functions (multi_head_attention_forward).
  size_t dropped = 0;
  for (const auto& g : reached_graphs(model)) {
    if (all_eval) jit::fold_training_flags(*g);
    jit::fold_constants(g);
    for (auto [n, fused] = fused_branch(g); n; std::tie(n, fused) = fused_branch(g)) {
      jit::inline_branch(n, 1 - fused);
      ++dropped;
    }
    jit::fold_constants(g);
  }
  return dropped;
}

BranchSpecialization specialize_branches(torch::jit::Module& model,
                                         const std::vector<at::Tensor>& sample) {
  const bool all_eval = all_in_eval(model);
  const auto graphs = reached_graphs(model);
  const size_t ifs_before = decide_without_data(graphs, all_eval);
  if (decide_passed_asserts(model) > 0)
    for (const auto& g : graphs) jit::fold_constants(g);  // their conditions' nodes
  const auto sites = record_branches(graphs);
  BranchSpecialization result;
  result.removed = ifs_before - sites.size();
  if (sites.empty()) return result;  // nothing left to observe: no run needed
  result.ran = true;
  std::vector<BranchCounts> counts(sites.size());
  {
    BranchScope scope(counts);
    // Grad enabled where a graph asks for it: inference fast paths (fused
    // attention/encoder kernels) check for it and are skipped, so the
    // Linear modules stay visible. Elsewhere autograd would only cost time.
    torch::AutoGradMode grad(asks_grad_mode(graphs));
    NoGraphOptimization no_opt;
    std::vector<c10::IValue> inputs(sample.begin(), sample.end());
    model.forward(inputs);
  }
  apply_decisions(sites, counts, result);
  for (const auto& g : graphs) jit::fold_constants(g);
  return result;
}

}  // namespace tq
