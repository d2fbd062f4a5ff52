// Rows that write no arithmetic: lists and tuples of tensors, casts of
// TorchScript's type system, and the marks of quantized values, which the
// QuantPolicy turns into Q/DQ (or into names, for the float model).
#include <ATen/ATen.h>

#include "ops.h"
#include "taoquant/error.h"

namespace tq::onnx_export {

namespace {

void construct(Converter& c, Node* n) {
  std::vector<Bound> items;
  for (Value* v : n->inputs()) items.push_back(c.binding(v));
  c.bind_seq(n->output(), std::move(items));
}

void unpack(Converter& c, Node* n) {
  const auto& items = c.items(n->input(0));
  if (items.size() != n->outputs().size())
    throw RuntimeError("ONNX export: unpacking " + std::to_string(items.size()) + " values into " +
                       std::to_string(n->outputs().size()) + ": " + c.node_where(n));
  for (size_t i = 0; i < items.size(); ++i) c.bind(n->output(i), items[i]);
}

// list[i], tuple[i]
void index(Converter& c, Node* n) {
  const auto& items = c.items(n->input(0));
  int64_t i = c.int_of(n->input(1));
  if (i < 0) i += static_cast<int64_t>(items.size());
  if (i < 0 || i >= static_cast<int64_t>(items.size()))
    throw RuntimeError("ONNX export: index out of range: " + c.node_where(n));
  c.bind(n->output(), items[static_cast<size_t>(i)]);
}

// list.append(x) on a list of tensors (DenseNet's features): readers after
// it see the longer list; readers before it kept the shorter one.
void append(Converter& c, Node* n) {
  Bound& list = c.binding(n->input(0));
  if (list.kind != Bound::Kind::kSeq)
    throw RuntimeError("ONNX export: append to a list tao-quant does not follow: " +
                       c.node_where(n));
  list.items.push_back(c.binding(n->input(1)));
  c.alias(n->output(), n->input(0));
}

void mark(Converter& c, Node* n) {
  // A mark on a constant is a weight's observer: the policy writes weights
  // at the layer that reads them.
  if (c.is_constant(n->input(0))) {
    if (auto q = c.opts.policy->constant_mark(c, n->input(0), c.int_of(n->input(1))))
      return c.bind(n->output(), *q);
    return c.alias(n->output(), n->input(0));
  }
  c.bind(n->output(), c.opts.policy->mark(c, in(c, n, 0), c.int_of(n->input(1))));
}

// A batch-dependent int made a tensor (traced shape arithmetic).
void num_to_tensor(Converter& c, Node* n) {
  if (c.is_constant(n->input(0))) {
    c.bind(n->output(), c.b.initializer(c.base(n, "scalar"),
                                        at::scalar_tensor(c.int_of(n->input(0)), at::kLong)));
    return;
  }
  const std::string v = c.int_list(n->input(0));  // 1-D
  c.bind(n->output(),
         c.b.node1("Squeeze", {v, c.b.ints(c.base(n, "axes"), {0})}, c.base(n, "Squeeze")));
}

}  // namespace

void add_structure_ops(OpRows& t) {
  t["prim::ListConstruct"] = construct;
  t["prim::TupleConstruct"] = construct;
  t["prim::ListUnpack"] = unpack;
  t["prim::TupleUnpack"] = unpack;
  t["prim::TupleIndex"] = index;
  t["aten::__getitem__"] = index;
  t["taoquant::mark"] = mark;
  t["aten::append"] = append;
  t["prim::NumToTensor"] = num_to_tensor;
  t["prim::unchecked_cast"] = [](Converter& c, Node* n) { c.alias(n->output(), n->input(0)); };
}

}  // namespace tq::onnx_export
