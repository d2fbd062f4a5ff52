// An ONNX model under construction: unique readable value names, nodes,
// initializers from LibTorch tensors or plain arrays, and the last steps
// (the ONNX checker and strict shape inference, then the bytes). The only
// file besides builder.cpp that sees the protobuf types is none: the
// converter and the op table speak names and attributes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tq::onnx_export {

// An attribute of a node: int, float, string, ints or floats.
struct Attr {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats } kind;
  std::string name;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  static Attr Int(std::string n, int64_t v) { return {Kind::kInt, std::move(n), v, 0, {}, {}, {}}; }
  static Attr Float(std::string n, float v) {
    return {Kind::kFloat, std::move(n), 0, v, {}, {}, {}};
  }
  static Attr Str(std::string n, std::string v) {
    return {Kind::kString, std::move(n), 0, 0, std::move(v), {}, {}};
  }
  static Attr Ints(std::string n, std::vector<int64_t> v) {
    return {Kind::kInts, std::move(n), 0, 0, {}, std::move(v), {}};
  }
  static Attr Floats(std::string n, std::vector<float> v) {
    return {Kind::kFloats, std::move(n), 0, 0, {}, {}, std::move(v)};
  }
};

// ONNX element types tao-quant writes (TensorProto.DataType values).
enum class Elem : int32_t {
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
};
Elem elem_of(c10::ScalarType t);  // RuntimeError for a type ONNX 1.12 cannot hold

class OnnxBuilder {
 public:
  explicit OnnxBuilder(int opset);
  ~OnnxBuilder();
  OnnxBuilder(const OnnxBuilder&) = delete;
  OnnxBuilder& operator=(const OnnxBuilder&) = delete;

  // A name not used yet: `base`, else `base.1`, `base.2`, ...
  std::string unique(const std::string& base);
  bool used(const std::string& name) const { return used_.count(name) > 0; }

  // A graph input or output; dims < 0 are the symbolic `batch` dimension.
  void add_input(const std::string& name, Elem t, const std::vector<int64_t>& dims);
  void add_output(const std::string& name, Elem t, const std::vector<int64_t>& dims);

  // An initializer holding `t` (contiguous copy, any supported dtype), or
  // raw values; returns its (unique) name.
  std::string initializer(const std::string& base, const at::Tensor& t);
  std::string initializer(const std::string& base, Elem t, const std::vector<int64_t>& dims,
                          const void* data, size_t bytes);
  std::string scalar_f(const std::string& base, float v);
  std::string ints(const std::string& base, const std::vector<int64_t>& v);  // 1-D int64

  // A node; returns its outputs' names (unique names from `out_bases`).
  std::vector<std::string> node(const std::string& op, const std::vector<std::string>& inputs,
                                const std::vector<std::string>& out_bases,
                                const std::vector<Attr>& attrs = {},
                                const std::string& domain = "");
  std::string node1(const std::string& op, const std::vector<std::string>& inputs,
                    const std::string& out_base, const std::vector<Attr>& attrs = {}) {
    return node(op, inputs, {out_base}, attrs).front();
  }

  // Renames a value that a node of this graph produced (its readers follow);
  // false when `from` is a graph input or an initializer.
  bool rename(const std::string& from, const std::string& to);
  size_t node_count() const;
  // The op types of the nodes, in order (tests and facts).
  std::vector<std::string> op_types() const;

  // The ONNX checker (full) and strict shape inference, then the bytes
  // (deterministic: same model, same bytes). RuntimeError with the
  // checker's message when the model is invalid.
  std::string finish(const std::string& graph_name, const std::string& doc);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::set<std::string> used_;
  std::map<std::string, int> counters_;
};

}  // namespace tq::onnx_export
