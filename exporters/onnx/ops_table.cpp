#include "ops.h"

#include "taoquant/error.h"

namespace tq::onnx_export {

const std::unordered_map<std::string, Emitter>& op_table() {
  static const OpRows kTable = [] {
    OpRows t;
    add_layer_ops(t);
    add_math_ops(t);
    add_shape_ops(t);
    add_pool_ops(t);
    add_structure_ops(t);
    return t;
  }();
  return kTable;
}

int64_t norm_dim(int64_t d, int64_t rank) {
  const int64_t r = d < 0 ? d + rank : d;
  if (r < 0 || r >= std::max<int64_t>(rank, 1))
    throw RuntimeError("ONNX export: dimension " + std::to_string(d) + " out of range for rank " +
                       std::to_string(rank));
  return r;
}

std::string reshape_to(Converter& c, Node* n, const std::string& x,
                       const std::vector<int64_t>& dims) {
  if (std::count(dims.begin(), dims.end(), -1) > 1)
    throw RuntimeError(
        "ONNX export: a reshape whose result has more than one dimension that changes with the "
        "batch size: " +
        c.node_where(n));
  return c.b.node1("Reshape", {x, c.b.ints(c.base(n, "shape"), dims)}, c.base(n, "Reshape"));
}

void simple(Converter& c, Node* n, const std::string& op, size_t inputs,
            const std::vector<Attr>& attrs) {
  std::vector<std::string> ins;
  for (size_t i = 0; i < inputs; ++i) ins.push_back(in(c, n, i));
  c.bind(n->output(), c.b.node1(op, ins, c.base(n, op), attrs));
}

std::string scalar_like(Converter& c, Node* n, double v, Value* like) {
  const c10::ScalarType t = c.seen(like).dtype;
  return c.b.initializer(c.base(n, "scalar"), at::scalar_tensor(v, at::TensorOptions(t)));
}

}  // namespace tq::onnx_export
