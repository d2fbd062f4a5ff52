// LibTorch's graph-mode quantization passes, each behind a named function,
// and the workarounds for what they leave behind (see jit.h for the models
// that needed each).
#include <map>
#include <set>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/quantization/finalize.h>
#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/csrc/jit/passes/quantization/insert_quant_dequant.h>

#include <spdlog/spdlog.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace prim = torch::jit::prim;
namespace aten = torch::jit::aten;

namespace {

// aten::dequantize(tuple) -> TupleConstruct(dequantize(e) for tensor e).
void dequantize_elements(Node* n) {
  Graph& g = *n->owningGraph();
  Value* t = n->input(0);
  torch::jit::WithInsertPoint guard(n);
  std::vector<Value*> elems;
  if (t->node()->kind() == prim::TupleConstruct) {
    elems.assign(t->node()->inputs().begin(), t->node()->inputs().end());
  } else {
    Node* unpack = g.insertNode(g.createTupleUnpack(t));
    elems.assign(unpack->outputs().begin(), unpack->outputs().end());
  }
  std::vector<Value*> out;
  for (Value* e : elems) {
    if (!e->type()->isSubtypeOf(*c10::TensorType::get())) {
      out.push_back(e);
      continue;
    }
    Node* dq = g.insertNode(g.create(aten::dequantize, {e}));
    dq->output()->setType(e->type());
    out.push_back(dq->output());
  }
  // A NamedTuple (GoogLeNetOutputs) keeps its type: the method's return
  // annotation names it, and a plain tuple would not load.
  auto type = t->type()->expect<c10::TupleType>();
  Node* tuple = g.insertNode(g.createTuple(out, type->schema() ? type : nullptr));
  n->output()->replaceAllUsesWith(tuple->output());
  n->destroy();
}

torch::jit::QuantType quant_type(QuantMode mode) {
  return mode == QuantMode::kStatic ? torch::jit::QuantType::STATIC
                                    : torch::jit::QuantType::DYNAMIC;
}

}  // namespace

size_t dequantize_tuple_elements(Graph& g) {
  size_t fixed = 0;
  for_each_node(g.block(), [&](Node* n) {
    if (n->kind() != aten::dequantize || n->inputs().size() != 1 ||
        !n->input(0)->type()->cast<c10::TupleType>())
      return;
    dequantize_elements(n);
    ++fixed;
  });
  return fixed;
}

size_t dequantize_tuple_elements(Module& m) {
  return on_every_method(m, [](Graph& g) { return dequantize_tuple_elements(g); });
}

size_t complete_shared_observers(Module& root,
                                 const std::function<bool(const std::string&)>& is_observer) {
  const auto all = module_instances(root);
  std::map<const c10::ClassType*, std::map<size_t, Module>> donors;
  for (const auto& inst : all)
    if (inst.parent >= 0 && is_observer(inst.name))
      donors[all[static_cast<size_t>(inst.parent)].module.type().get()].emplace(inst.slot,
                                                                                inst.module);
  size_t filled = 0;
  for (const auto& inst : all) {
    if (inst.parent >= 0 && is_observer(inst.name)) continue;
    const auto type = inst.module.type();
    const auto obj = inst.module._ivalue();
    for (size_t i = 0; i < type->numAttributes(); ++i) {
      if (!is_observer(type->getAttributeName(i))) continue;
      if (i < obj->slots().size() && obj->getSlot(i).isObject()) continue;
      auto& by_slot = donors[type.get()];
      auto d = by_slot.find(i);
      if (d == by_slot.end()) continue;
      obj->setSlot(i, d->second.deepcopy()._ivalue());
      ++filled;
    }
  }
  return filled;
}

std::vector<std::string> used_module_paths(const Module& m) {
  auto g = inlined_graph(m);
  std::set<std::string> out;
  for_each_node(g->block(), [&](Node* n) {
    if (n->kind() != prim::GetAttr || !n->output()->type()->cast<c10::ClassType>()) return;
    if (auto path = attr_path(n->output())) out.insert(*path);
  });
  return {out.begin(), out.end()};
}

std::vector<std::string> complete_unused_instances(Module& root) {
  const auto all = module_instances(root);
  const auto used_list = used_module_paths(root);
  const std::set<std::string> used(used_list.begin(), used_list.end());
  std::map<std::pair<const c10::ClassType*, size_t>, c10::IValue> donors;
  for (const auto& inst : all) {
    const auto obj = inst.module._ivalue();
    for (size_t i = 0; i < obj->slots().size(); ++i)
      donors.emplace(std::make_pair(inst.module.type().get(), i), obj->getSlot(i));
  }
  std::vector<std::string> incomplete;
  for (const auto& inst : all) {
    const auto type = inst.module.type();
    const auto obj = inst.module._ivalue();
    if (obj->slots().size() >= type->numAttributes()) continue;
    spdlog::debug("{}: {} of {} attributes have values", inst.path.empty() ? "<model>" : inst.path,
                  obj->slots().size(), type->numAttributes());
    if (inst.path.empty() || used.count(inst.path)) {
      incomplete.push_back(inst.path.empty() ? "<model>" : inst.path);
      continue;
    }
    for (size_t i = obj->slots().size(); i < type->numAttributes(); ++i) {
      auto d = donors.find({type.get(), i});
      obj->setSlot(i, d != donors.end() ? d->second : c10::IValue());
    }
  }
  return incomplete;
}

Module fold_conv_batchnorm(const Module& m) {
  return torch::jit::FoldConvBatchNorm(m);
}

Module insert_observers(Module& m, const QConfigs& qconfigs, QuantMode mode, bool inplace) {
  torch::jit::QConfigDict qd;
  for (const auto& [path, qc] : qconfigs)
    qd[path] = qc ? c10::optional<torch::jit::QConfig>(*qc) : c10::nullopt;
  return torch::jit::InsertObservers(m, "forward", qd, inplace, quant_type(mode));
}

Module insert_quant_dequant(Module& m, QuantMode mode, bool inplace) {
  return torch::jit::InsertQuantDeQuant(m, "forward", inplace, /*debug=*/false, quant_type(mode));
}

Module finalize(Module& m, QuantMode mode) {
  Module q = torch::jit::Finalize(m, quant_type(mode), {});
  fold_constants(q.get_method("forward").graph());
  return q;
}

}  // namespace tq::jit
