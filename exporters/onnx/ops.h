// The op table's rows, one file per family: layers (conv, linear, matmul,
// normalization), math (elementwise and activations), shape (reshape,
// concat, index), pooling and reductions, structure (lists, tuples,
// marks). Each file adds its rows; op_table() gathers them once.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "convert.h"

namespace tq::onnx_export {

using OpRows = std::unordered_map<std::string, Emitter>;

void add_layer_ops(OpRows& t);
void add_math_ops(OpRows& t);
void add_shape_ops(OpRows& t);
void add_pool_ops(OpRows& t);
void add_structure_ops(OpRows& t);

// Helpers the rows share.
inline std::string in(Converter& c, Node* n, size_t i) {
  return c.tensor(n->input(i));
}
// A dimension index in [0, rank).
int64_t norm_dim(int64_t d, int64_t rank);
// Reshape `x` to `dims` (the profile's: -1 for the batch); at most one
// dimension may change with the batch.
std::string reshape_to(Converter& c, Node* n, const std::string& x,
                       const std::vector<int64_t>& dims);
// One output, one ONNX op on the node's first `inputs` inputs.
void simple(Converter& c, Node* n, const std::string& op, size_t inputs,
            const std::vector<Attr>& attrs = {});
// An initializer for a scalar `v` typed like the tensor `like`.
std::string scalar_like(Converter& c, Node* n, double v, Value* like);

}  // namespace tq::onnx_export
