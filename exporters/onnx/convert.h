// TorchScript -> ONNX: the record's model, inlined into one straight-line
// graph, converted node by node through the op table (ops.h). Shapes come
// from running the graph at two batch sizes (profile.cpp): every scalar that
// does not change with the batch is a constant of the ONNX graph, and the
// batch dimension stays symbolic. Quantization is written by a
// QuantPolicy: none (the float model), or Q/DQ in a runtime's form (qdq.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include "builder.h"

namespace tq {
struct QuantRecord;
struct QuantTensor;
}  // namespace tq

namespace tq::onnx_export {

using torch::jit::Node;
using torch::jit::Value;

// What a TorchScript value stands for while the graph is converted.
struct Bound {
  enum class Kind { kUnset, kTensor, kConst, kSeq };
  Kind kind = Kind::kUnset;
  std::string name;               // kTensor: the ONNX value; kConst: a name hint (attribute path)
  c10::IValue value;              // kConst (a constant tensor becomes an initializer when read)
  std::vector<Bound> items;       // kSeq: the elements of a list or tuple
  const Value* origin = nullptr;  // the TorchScript value it was bound for
};

// One value as the two profiling runs saw it.
struct Seen {
  bool tensor = false;
  std::vector<int64_t> dims;  // tensors: -1 where the batch size changed it
  c10::ScalarType dtype = c10::kFloat;
  c10::IValue value;  // scalars and lists: the first run's value
  bool batch_dependent = false;
};

class Converter;

// How quantization is written. The float export uses this base, which
// writes none.
class QuantPolicy {
 public:
  virtual ~QuantPolicy() = default;
  // The value readers of `taoquant::observe(x, mark)` see.
  virtual std::string mark(Converter& c, const std::string& x, int64_t mark);
  // A layer op's activation input, weight (`transposed`: as [in, out] for
  // MatMul), and bias (given the input and weight as returned).
  virtual std::string layer_input(Converter& c, const std::string& layer, const std::string& x);
  virtual std::string weight(Converter& c, const std::string& layer, const at::Tensor& w,
                             bool transposed);
  // `as_is()` writes the bias as the graph holds it (a float initializer).
  virtual std::string bias(Converter& c, const std::string& layer, const at::Tensor& b,
                           const std::string& input, const std::string& weight,
                           const std::function<std::string()>& as_is);
  // A Linear with dynamically quantized input (dynamic PTQ), or nullopt
  // when the layer runs in float; returns the output.
  virtual std::optional<std::string> dynamic_linear(Converter& c, const std::string& layer,
                                                    const std::string& x, const at::Tensor& w,
                                                    const at::Tensor* b);
  // The two inputs of an Add of tensors (TensorRT quantizes the residual one).
  virtual void add_inputs(Converter& c, std::string& a, std::string& b) {
    (void)c, (void)a, (void)b;
  }
  // The output of a layer op (a conv's, a Linear's), as its readers see it.
  virtual void layer_output(const std::string& y) { (void)y; }
  // `y`, made by the op `op` ("aten::max_pool2d") from `x`; returns what
  // readers of the op's output see (a policy that follows quantized
  // tensors through ops that keep or fix their parameters).
  virtual std::string passed(Converter& c, const std::string& op, const std::string& x,
                             const std::string& y) {
    (void)c, (void)op, (void)x;
    return y;
  }
  // The inputs of a Concat, which LibTorch concatenates quantized.
  virtual void concat_inputs(Converter& c, std::vector<std::string>& xs) { (void)c, (void)xs; }
  // Whether `name` is a quantized constant (the Q/DQ of a recorded weight
  // that no layer of the plan owns: nn.MultiheadAttention's in_proj_weight).
  virtual bool quantized_constant(const std::string& name) const {
    (void)name;
    return false;
  }
  // A mark on a constant (`v`): a layer's weight, which the layer's op
  // writes (nullopt: the constant as it is), or another quantized constant.
  virtual std::optional<std::string> constant_mark(Converter& c, Value* v, int64_t mark) {
    (void)c, (void)v, (void)mark;
    return std::nullopt;
  }
};

struct ConvertOptions {
  int opset = 17;
  const QuantRecord* record = nullptr;
  QuantPolicy* policy = nullptr;  // nullptr: float
  // The float model: parameters the run moved away from float (record.h's
  // float_values) are written with their float values.
  // The names the marked activations get (record name -> ONNX value) are
  // filled here by the converter.
  std::map<std::string, std::string>* mark_names = nullptr;
};

// The converted model: bytes (checked), and what it holds.
struct Converted {
  std::string bytes;
  std::vector<std::string> inputs, outputs;
  std::vector<std::string> op_types;
};

// Converts `model`'s forward for inputs shaped like `input_shapes` (dim 0
// the batch) and of `input_dtypes`. tq::Error (exit 1) naming the op, the
// module and the graph line for what cannot be exported.
Converted convert(const torch::jit::Module& model,
                  const std::vector<std::vector<int64_t>>& input_shapes,
                  const std::vector<c10::ScalarType>& input_dtypes, const ConvertOptions& opts);

class Converter {
 public:
  Converter(OnnxBuilder& b, const ConvertOptions& opts, const torch::jit::Module& model);

  OnnxBuilder& b;
  const ConvertOptions& opts;
  const QuantRecord* record() const { return opts.record; }
  int opset() const { return opts.opset; }
  bool float_model = false;  // no policy was given: the float model

  // ---- Reading inputs of the node being converted
  // The ONNX value of a tensor (a constant becomes an initializer once).
  std::string tensor(Value* v);
  // A constant (int, float, list, None, tensor...): RuntimeError when the
  // value depends on the batch (ask dynamic_ints instead).
  const c10::IValue& constant(Value* v);
  bool is_constant(Value* v) const;
  bool is_none(Value* v) const;
  at::Tensor constant_tensor(Value* v);  // a weight, a bias: must be constant
  std::vector<int64_t> ints(Value* v) { return constant(v).toIntVector(); }
  int64_t int_of(Value* v) { return constant(v).toInt(); }
  double double_of(Value* v) { return constant(v).toScalar().toDouble(); }
  // An int or int list as a 1-D int64 ONNX value, batch-dependent or not.
  std::string int_list(Value* v);
  const Seen& seen(const Value* v) const;
  const Seen* find_seen(const Value* v) const;
  const std::vector<int64_t>& dims(Value* v) const { return seen(v).dims; }
  int64_t rank(Value* v) const { return static_cast<int64_t>(dims(v).size()); }
  const std::vector<Bound>& items(Value* v);                       // elements of a list or tuple
  std::string tensor_of(const Bound& b, const std::string& hint);  // an element as a tensor

  // ---- Binding outputs
  void bind(Value* v, const std::string& onnx_name);
  void bind_const(Value* v, c10::IValue c);
  void bind_seq(Value* v, std::vector<Bound> items);
  void bind(Value* v, Bound b);
  void alias(Value* out, Value* in);  // out is the same as in

  // A readable base name for what `n` produces: its module path and `what`.
  std::string base(const Node* n, const std::string& what) const;
  // The layer (module path) whose weight input 1 of `n` is, or "".
  std::string layer_of(Node* n) const;

  // ---- Internals used by convert()
  void set_seen(std::unordered_map<const Value*, Seen> seen) { seen_ = std::move(seen); }
  bool has_binding(Value* v) const { return bound_.count(v) > 0; }
  Bound& binding(Value* v);
  std::string node_where(const Node* n) const;  // "module 'x' (graph line: ...)"

 private:
  const torch::jit::Module& model_;
  std::unordered_map<const Value*, Bound> bound_;
  std::unordered_map<const Value*, Seen> seen_;
  std::unordered_map<const c10::TensorImpl*, std::string> initializers_;
  std::unordered_map<const Value*, std::string> dynamic_;  // batch-dependent ints, as ONNX
  std::string dynamic_int(Value* v);
};

// The op table: one row per TorchScript op (ops_*.cpp).
using Emitter = std::function<void(Converter& c, Node* n)>;
const std::unordered_map<std::string, Emitter>& op_table();

// The scope of a node: the module path of the call it was inlined from.
std::string scope_of(const Node* n);

}  // namespace tq::onnx_export
