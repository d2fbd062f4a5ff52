#include "qdq.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "taoquant/error.h"
#include "taoquant/jit.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

namespace {

bool is_fp8(DType d) {
  return d == DType::kFp8E4M3 || d == DType::kFp8E5M2;
}

// The ONNX element type that holds a tensor's codes: int4 codes sit in
// int8 (ONNX 1.12 has no 4-bit type; the values are the same).
Elem code_elem(const QuantTensor& t) {
  switch (t.dtype) {
    case DType::kInt8:
    case DType::kInt4:
      return Elem::kInt8;
    case DType::kUInt8:
      return Elem::kUInt8;
    default:
      throw RuntimeError("ONNX export: " + (t.layer.empty() ? t.name : "layer '" + t.layer + "'") +
                         ": " + std::string(to_string(t.dtype)) +
                         " has no ONNX 1.12 element type (fp8 types need opset 19); export "
                         "this model with int8 weights, or the float model (format onnx)");
  }
}

at::Tensor codes_tensor(const QuantTensor& t) {
  const auto dt = code_elem(t) == Elem::kUInt8 ? at::kByte : at::kChar;
  return at::from_blob(const_cast<uint8_t*>(t.codes.data()), t.shape, at::TensorOptions(dt))
      .clone();
}

}  // namespace

std::pair<std::string, std::string> QdqPolicy::qparams(Converter& c, const QuantTensor& t) {
  auto it = qparams_.find(&t);
  if (it != qparams_.end()) return it->second;
  const bool scalar = t.scale.size() == 1;
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(static_cast<int64_t>(t.scale.size()));
  const std::string s =
      c.b.initializer(t.name + ".scale", Elem::kFloat, dims, t.scale.data(), t.scale.size() * 4);
  const Elem e = code_elem(t);
  std::vector<uint8_t> z;
  for (size_t i = 0; i < t.scale.size(); ++i) {
    const int32_t v = i < t.zero_point.size() ? t.zero_point[i] : 0;
    z.push_back(e == Elem::kUInt8 ? static_cast<uint8_t>(v)
                                  : static_cast<uint8_t>(static_cast<int8_t>(v)));
  }
  const std::string zp = c.b.initializer(t.name + ".zero_point", e, dims, z.data(), z.size());
  return qparams_[&t] = {s, zp};
}

const QuantTensor* QdqPolicy::dequantized(const std::string& name) const {
  auto it = dq_of_.find(name);
  return it == dq_of_.end() ? nullptr : it->second;
}

std::string QdqPolicy::qdq(Converter& c, const std::string& x, const QuantTensor& t) {
  if (t.granularity != Granularity::kPerTensor)
    throw RuntimeError("ONNX export: activation '" + t.name + "' is quantized " +
                       std::string(to_string(t.granularity)) + "; only per_tensor is exported");
  const auto [s, z] = qparams(c, t);
  const std::string q = c.b.node1("QuantizeLinear", {x, s, z}, t.name + ".quantized");
  const std::string dq = c.b.node1("DequantizeLinear", {q, s, z}, t.name + ".dequantized");
  note_dq(dq, t);
  ++activations_;
  return dq;
}

std::string QdqPolicy::mark(Converter& c, const std::string& x, int64_t mark) {
  const std::string named = QuantPolicy::mark(c, x, mark);
  const QuantTensor* t = c.record() ? c.record()->find_mark(mark) : nullptr;
  if (!t || t->scale.empty()) return named;   // a range for the report only
  if (is_fp8(t->dtype)) (void)code_elem(*t);  // the error names the format
  return qdq(c, named, *t);
}

const QuantTensor* QdqPolicy::carried(const std::string& name) const {
  if (const QuantTensor* t = dequantized(name)) return t;
  auto it = carried_.find(name);
  return it == carried_.end() ? nullptr : it->second;
}

std::string QdqPolicy::requantized(Converter& c, const std::string& x) {
  if (dequantized(x)) return x;
  const QuantTensor* t = carried(x);
  return t ? qdq(c, x, *t) : x;
}

std::string QdqPolicy::layer_input(Converter& c, const std::string& layer, const std::string& x) {
  if (dequantized(x)) return x;
  if (carried(x)) return requantized(c, x);
  const QuantTensor* t = c.record() ? c.record()->input_of(layer) : nullptr;
  return t && !t->scale.empty() ? qdq(c, x, *t) : x;
}

const QuantTensor& QdqPolicy::fixed(const std::string& op, float scale, int32_t zero_point) {
  QuantTensor& t = fixed_[op];
  if (t.scale.empty()) {
    t.name = "fixed." + op.substr(op.find(':') + 2);
    t.dtype = DType::kUInt8;
    t.scale = {scale};
    t.zero_point = {zero_point};
  }
  return t;
}

std::string QdqPolicy::passed(Converter& c, const std::string& op, const std::string& x,
                              const std::string& y) {
  const QuantTensor* t = carried(x);
  if (!t || x == y) return y;
  // On a quantized input, LibTorch's sigmoid, hardsigmoid and tanh give
  // their output fixed parameters (a grid of 1/256 over their range).
  if (op == "aten::sigmoid" || op == "aten::sigmoid_" || op == "aten::hardsigmoid" ||
      op == "aten::hardsigmoid_")
    return qdq(c, y, fixed(op, 1.0f / 256, 0));
  if (op == "aten::tanh" || op == "aten::tanh_") return qdq(c, y, fixed(op, 2.0f / 256, 128));
  const jit::OpInfo info = jit::op_info(op);
  if (info.role != jit::OpRole::kPassesRanges) return y;
  carried_[y] = t;
  // Its quantized kernel requantizes the result with the input's parameters
  // (op_info: clamp, average pooling, mean); shape ops, max pooling and relu
  // keep grid values as they are.
  return info.requantizes ? qdq(c, y, *t) : y;
}

void QdqPolicy::add_inputs(Converter& c, std::string& a, std::string& b) {
  if (!carried(a) || !carried(b)) return;  // LibTorch adds quantized tensors only
  a = requantized(c, a);
  b = requantized(c, b);
}

std::optional<std::string> QdqPolicy::constant_mark(Converter& c, Value* v, int64_t mark) {
  const QuantTensor* t = c.record() ? c.record()->find_mark(mark) : nullptr;
  if (!t || t->scale.empty()) return std::nullopt;
  ++weights_;
  if (!t->codes.empty()) return weight_dq(c, *t, false);  // the constant as the backend stores it
  // A range recorded for a constant (an observer on a weight that no layer
  // of the plan owns, nn.MultiheadAttention's): its codes, as LibTorch's
  // quantize_per_tensor / per_channel make them with that range.
  const at::Tensor w = c.constant_tensor(v).detach().to(at::kFloat).contiguous();
  const auto dt = t->dtype == DType::kUInt8 ? at::kQUInt8 : at::kQInt8;
  at::Tensor q =
      t->granularity == Granularity::kPerChannel
          ? at::quantize_per_channel(
                w, at::tensor(t->scale, at::kDouble),
                at::tensor(std::vector<int64_t>(t->zero_point.begin(), t->zero_point.end()),
                           at::kLong),
                t->axis, dt)
          : at::quantize_per_tensor(w, t->scale.at(0), t->zero_point.at(0), dt);
  q = q.int_repr().contiguous();
  QuantTensor& k = constants_[t];
  k = *t;
  k.role = QuantTensor::Role::kWeight;
  k.shape = w.sizes().vec();
  const auto* p = static_cast<const uint8_t*>(q.data_ptr());
  k.codes.assign(p, p + q.numel());
  return weight_dq(c, k, false);
}

void QdqPolicy::concat_inputs(Converter& c, std::vector<std::string>& xs) {
  for (const auto& x : xs)
    if (!carried(x)) return;
  for (auto& x : xs) x = requantized(c, x);
}

std::string QdqPolicy::weight_dq(Converter& c, const QuantTensor& t, bool transposed) {
  at::Tensor codes = codes_tensor(t);
  const auto [s, z] = qparams(c, t);
  const std::string base = t.name + (transposed ? ".t" : "");
  if (t.granularity == Granularity::kPerGroup) {
    // [rows, cols] -> padded [rows * groups, group]: one scale per row of
    // that, then back to [rows, cols] and the weight's shape.
    const int64_t rows = codes.size(0), cols = codes.numel() / rows, gs = t.group_size;
    const int64_t groups = (cols + gs - 1) / gs;
    at::Tensor padded = at::zeros({rows, groups * gs}, codes.options());
    padded.narrow(1, 0, cols).copy_(codes.reshape({rows, cols}));
    if (groups * gs > cols)  // padding decodes to 0: the last group's zero point
      for (int64_t r = 0; r < rows; ++r)
        padded[r]
            .narrow(0, cols, groups * gs - cols)
            .fill_(t.zero_point.empty()
                       ? 0
                       : t.zero_point[static_cast<size_t>(r * groups + groups - 1)]);
    const std::string q = c.b.initializer(base, padded.reshape({rows * groups, gs}));
    std::string v =
        c.b.node1("DequantizeLinear", {q, s, z}, base + ".dequantized", {Attr::Int("axis", 0)});
    v = c.b.node1("Reshape", {v, c.b.ints(base + ".shape", {rows, groups * gs})}, base);
    v = c.b.node1("Slice",
                  {v, c.b.ints(base + ".start", {0}), c.b.ints(base + ".end", {cols}),
                   c.b.ints(base + ".axes", {1})},
                  base);
    v = c.b.node1("Reshape", {v, c.b.ints(base + ".shape", t.shape)}, base);
    return transposed ? c.b.node1("Transpose", {v}, base, {Attr::Ints("perm", {1, 0})}) : v;
  }
  if (transposed) codes = codes.t().contiguous();
  const std::string q = c.b.initializer(base, codes);
  std::vector<Attr> attrs;
  if (t.granularity == Granularity::kPerChannel)
    attrs.push_back(Attr::Int("axis", transposed ? 1 - t.axis : t.axis));
  const std::string dq = c.b.node1("DequantizeLinear", {q, s, z}, base + ".dequantized", attrs);
  note_dq(dq, t);
  return dq;
}

std::string QdqPolicy::weight(Converter& c, const std::string& layer, const at::Tensor& w,
                              bool transposed) {
  const QuantTensor* t = c.record() ? c.record()->weight_of(layer) : nullptr;
  if (!t) return QuantPolicy::weight(c, layer, w, transposed);
  if (t->shape != w.sizes().vec())
    throw RuntimeError("ONNX export: layer '" + layer + "': the record's weight has another shape");
  ++weights_;
  return weight_dq(c, *t, transposed);
}

std::string QdqPolicy::bias(Converter& c, const std::string& layer, const at::Tensor& b,
                            const std::string& input, const std::string& weight,
                            const std::function<std::string()>& as_is) {
  const QuantTensor* x = dequantized(input);
  const QuantTensor* w = dequantized(weight);
  if (!x || !w || x->scale.size() != 1 || w->dtype != DType::kInt8 ||
      w->granularity == Granularity::kPerGroup || w->axis != 0)
    return as_is();
  // int32 codes with scale s_in * s_w[c] and zero point 0.
  const at::Tensor bf = b.detach().to(at::kDouble).contiguous();
  const int64_t n = bf.numel();
  std::vector<int32_t> codes(static_cast<size_t>(n)), zeros(static_cast<size_t>(n), 0);
  std::vector<float> scale(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float s = x->scale[0] * w->scale[w->scale.size() == 1 ? 0 : static_cast<size_t>(i)];
    scale[static_cast<size_t>(i)] = s;
    const double q = std::nearbyint(bf.data_ptr<double>()[i] / static_cast<double>(s));
    codes[static_cast<size_t>(i)] = static_cast<int32_t>(
        std::max<double>(std::numeric_limits<int32_t>::min(),
                         std::min<double>(std::numeric_limits<int32_t>::max(), q)));
  }
  const std::string base = layer + ".bias";
  const std::string q =
      c.b.initializer(base + ".quantized", Elem::kInt32, {n}, codes.data(), n * 4);
  const std::string s = c.b.initializer(base + ".scale", Elem::kFloat, {n}, scale.data(), n * 4);
  const std::string z =
      c.b.initializer(base + ".zero_point", Elem::kInt32, {n}, zeros.data(), n * 4);
  return c.b.node1("DequantizeLinear", {q, s, z}, base, {Attr::Int("axis", 0)});
}

std::optional<std::string> QdqPolicy::dynamic_linear(Converter& c, const std::string& layer,
                                                     const std::string& x, const at::Tensor& w,
                                                     const at::Tensor* b) {
  const LayerRecord* l = c.record() ? c.record()->find_layer(layer) : nullptr;
  const QuantTensor* t = c.record() ? c.record()->weight_of(layer) : nullptr;
  if (!l || !l->dynamic_input || !t) return std::nullopt;
  if (t->dtype != DType::kInt8 || t->granularity == Granularity::kPerGroup)
    throw RuntimeError("ONNX export: dynamic layer '" + layer + "' with " +
                       std::string(to_string(t->dtype)) + "/" +
                       std::string(to_string(t->granularity)) + " weights");
  (void)w;
  ++weights_;
  const std::vector<std::string> xq =
      c.b.node("DynamicQuantizeLinear", {x},
               {layer + ".input.quantized", layer + ".input.scale", layer + ".input.zero_point"});
  const std::string codes = c.b.initializer(t->name + ".t", codes_tensor(*t).t().contiguous());
  const auto [ws, wz] = qparams(c, *t);
  const std::string acc =
      c.b.node1("MatMulInteger", {xq[0], codes, xq[2], wz}, layer + ".MatMulInteger");
  const std::string f = c.b.node1("Cast", {acc}, layer + ".Cast",
                                  {Attr::Int("to", static_cast<int64_t>(Elem::kFloat))});
  const std::string scale = c.b.node1("Mul", {xq[1], ws}, layer + ".scale");
  std::string y = c.b.node1("Mul", {f, scale}, layer + ".output");
  if (b) y = c.b.node1("Add", {y, c.b.initializer(layer + ".bias", *b)}, layer + ".output");
  return y;
}

}  // namespace tq::onnx_export
