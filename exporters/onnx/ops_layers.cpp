// Rows for the layers (conv, linear: their input, weight and bias go
// through the QuantPolicy), matrix products and normalization.
#include <ATen/ATen.h>

#include "ops.h"
#include "taoquant/error.h"

namespace tq::onnx_export {

namespace {

std::vector<int64_t> twice(const std::vector<int64_t>& p) {
  std::vector<int64_t> out = p;
  out.insert(out.end(), p.begin(), p.end());
  return out;
}

// `padding` of a conv: ints, or "valid"/"same" (conv2d.padding).
std::vector<int64_t> conv_pads(Converter& c, Node* n, Value* padding, const at::Tensor& w,
                               const std::vector<int64_t>& dilation) {
  const size_t k = static_cast<size_t>(w.dim() - 2);
  const c10::IValue& p = c.constant(padding);
  if (!p.isString()) {
    auto v = p.toIntVector();
    if (v.size() == 1 && k > 1) v.assign(k, v[0]);
    return twice(v);
  }
  std::vector<int64_t> begin(k, 0), end(k, 0);
  if (p.toStringRef() == "same")
    for (size_t i = 0; i < k; ++i) {
      const int64_t total = dilation[i] * (w.size(static_cast<int64_t>(i) + 2) - 1);
      begin[i] = total / 2;
      end[i] = total - begin[i];
    }
  else if (p.toStringRef() != "valid")
    throw RuntimeError("ONNX export: padding '" + p.toStringRef() + "': " + c.node_where(n));
  begin.insert(begin.end(), end.begin(), end.end());
  return begin;
}

std::vector<int64_t> per_dim(std::vector<int64_t> v, size_t k) {
  if (v.size() == 1 && k > 1) v.assign(k, v[0]);
  return v;
}

struct ConvArgs {
  size_t stride, padding, dilation, groups;
  int output_padding = -1;  // transposed only
  bool transposed = false;
};

void conv(Converter& c, Node* n, ConvArgs a) {
  const std::string layer = c.layer_of(n);
  if (!c.is_constant(n->input(1)))
    throw RuntimeError("ONNX export: a convolution whose weight is computed: " + c.node_where(n));
  const at::Tensor w = c.constant_tensor(n->input(1));
  const size_t k = static_cast<size_t>(w.dim() - 2);
  const auto dil = per_dim(c.ints(n->input(a.dilation)), k);
  std::vector<Attr> attrs{Attr::Ints("strides", per_dim(c.ints(n->input(a.stride)), k)),
                          Attr::Ints("dilations", dil),
                          Attr::Int("group", c.int_of(n->input(a.groups)))};
  std::vector<int64_t> ks(w.sizes().begin() + 2, w.sizes().end());
  attrs.push_back(Attr::Ints("kernel_shape", ks));
  attrs.push_back(Attr::Ints("pads", conv_pads(c, n, n->input(a.padding), w, dil)));
  if (a.transposed && a.output_padding >= 0) {
    auto op = per_dim(c.ints(n->input(static_cast<size_t>(a.output_padding))), k);
    if (std::any_of(op.begin(), op.end(), [](int64_t v) { return v != 0; }))
      attrs.push_back(Attr::Ints("output_padding", op));
  }
  QuantPolicy& p = *c.opts.policy;
  const bool quantizable = !a.transposed && !layer.empty();
  std::string x = in(c, n, 0);
  if (quantizable) x = p.layer_input(c, layer, x);
  const std::string W = quantizable ? p.weight(c, layer, w, false) : c.tensor(n->input(1));
  std::vector<std::string> ins{x, W};
  if (!c.is_none(n->input(2))) {
    auto as_is = [&] { return c.tensor(n->input(2)); };
    ins.push_back(quantizable ? p.bias(c, layer, c.constant_tensor(n->input(2)), x, W, as_is)
                              : as_is());
  }
  const char* op = a.transposed ? "ConvTranspose" : "Conv";
  const std::string y = c.b.node1(op, ins, c.base(n, op), attrs);
  if (quantizable) p.layer_output(y);
  c.bind(n->output(), y);
}

// aten::_convolution(input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups, ...)
void convolution(Converter& c, Node* n) {
  ConvArgs a{3, 4, 5, 8, 7, c.constant(n->input(6)).toBool()};
  conv(c, n, a);
}

// aten::linear(input, weight, bias): Gemm on 2-D inputs; other ranks are
// flattened to 2-D around it, so that runtimes fuse the quantized form.
// A Linear whose weight is a quantized constant no planned layer owns
// (nn.MultiheadAttention's in_proj): a Gemm on its Q/DQ weight and its input
// Q/DQ (the quantized range it carries through the reshape), with the bias
// on the accumulator's grid as the backend put it, so that the runtime fuses
// it as it fuses the layers and adds the same bias.
void quantized_constant_linear(Converter& c, Node* n, const std::string& w) {
  QuantPolicy& p = *c.opts.policy;
  const auto& wd = c.dims(n->input(1));
  std::string x = in(c, n, 0);
  const bool flat = c.dims(n->input(0)).size() != 2;
  if (flat) x = p.passed(c, "aten::reshape", x, reshape_to(c, n, x, {-1, wd.at(1)}));
  x = p.layer_input(c, "", x);  // no layer's recorded input: the range x carries
  std::vector<std::string> ins{x, w};
  if (!c.is_none(n->input(2)))
    ins.push_back(c.is_constant(n->input(2))
                      ? p.bias(c, c.base(n, "linear"), c.constant_tensor(n->input(2)), x, w,
                               [&] { return c.tensor(n->input(2)); })
                      : in(c, n, 2));
  std::string y = c.b.node1("Gemm", ins, c.base(n, "Gemm"), {Attr::Int("transB", 1)});
  if (flat) y = reshape_to(c, n, y, c.dims(n->output()));
  c.bind(n->output(), y);
}

void linear(Converter& c, Node* n) {
  const std::string layer = c.layer_of(n);
  if (!c.is_constant(n->input(1)) && c.opts.policy->quantized_constant(in(c, n, 1)))
    return quantized_constant_linear(c, n, in(c, n, 1));
  if (!c.is_constant(n->input(1))) {  // a weight computed in the graph
    std::string y =
        c.b.node1("MatMul",
                  {in(c, n, 0), c.b.node1("Transpose", {in(c, n, 1)}, c.base(n, "Transpose"),
                                          {Attr::Ints("perm", {1, 0})})},
                  c.base(n, "MatMul"));
    if (!c.is_none(n->input(2))) y = c.b.node1("Add", {y, in(c, n, 2)}, c.base(n, "Add"));
    c.bind(n->output(), y);
    return;
  }
  const at::Tensor w = c.constant_tensor(n->input(1));
  const at::Tensor* bias = nullptr;
  at::Tensor bias_t;
  if (!c.is_none(n->input(2))) {
    bias_t = c.constant_tensor(n->input(2));
    bias = &bias_t;
  }
  QuantPolicy& p = *c.opts.policy;
  std::string x = in(c, n, 0);
  const auto& xd = c.dims(n->input(0));
  const bool flat = xd.size() != 2;
  if (flat) x = reshape_to(c, n, x, {-1, w.size(1)});
  std::string y;
  if (auto dyn = p.dynamic_linear(c, layer, x, w, bias)) {
    y = *dyn;
  } else {
    x = p.layer_input(c, layer, x);
    const std::string W = p.weight(c, layer, w, false);
    std::vector<std::string> ins{x, W};
    if (bias) ins.push_back(p.bias(c, layer, *bias, x, W, [&] { return c.tensor(n->input(2)); }));
    y = c.b.node1("Gemm", ins, c.base(n, "Gemm"), {Attr::Int("transB", 1)});
  }
  if (flat) y = reshape_to(c, n, y, c.dims(n->output()));
  p.layer_output(y);
  c.bind(n->output(), y);
}

// aten::baddbmm(input, b1, b2, beta, alpha) and addmm: beta*input + alpha*(b1 @ b2).
void add_product(Converter& c, Node* n) {
  std::string prod = c.b.node1("MatMul", {in(c, n, 1), in(c, n, 2)}, c.base(n, "MatMul"));
  const double beta = c.double_of(n->input(3)), alpha = c.double_of(n->input(4));
  if (alpha != 1.0)
    prod = c.b.node1("Mul", {prod, scalar_like(c, n, alpha, n->input(1))}, c.base(n, "Mul"));
  std::string bias = in(c, n, 0);
  if (beta != 1.0)
    bias = c.b.node1("Mul", {bias, scalar_like(c, n, beta, n->input(0))}, c.base(n, "Mul"));
  c.bind(n->output(), c.b.node1("Add", {prod, bias}, c.base(n, "Add")));
}

// aten::batch_norm(input, weight, bias, running_mean, running_var, training,
// momentum, eps, cudnn_enabled), in inference.
void batch_norm(Converter& c, Node* n) {
  if (c.constant(n->input(5)).toBool())
    throw RuntimeError("ONNX export: BatchNorm in training mode: " + c.node_where(n));
  // (The parameters may be quantized constants, Q/DQ of their stored codes.)
  const int64_t channels = c.dims(n->input(0)).at(1);
  auto param = [&](size_t i, float fill) {
    return c.is_none(n->input(i)) ? c.b.initializer(c.base(n, "bn"), at::full({channels}, fill))
                                  : in(c, n, i);
  };
  c.bind(n->output(),
         c.b.node1("BatchNormalization",
                   {in(c, n, 0), param(1, 1.0f), param(2, 0.0f), in(c, n, 3), in(c, n, 4)},
                   c.base(n, "BatchNormalization"),
                   {Attr::Float("epsilon", static_cast<float>(c.double_of(n->input(7))))}));
}

// aten::layer_norm(input, normalized_shape, weight, bias, eps, cudnn):
// LayerNormalization from opset 17, written out before it.
void layer_norm(Converter& c, Node* n) {
  const auto shape = c.ints(n->input(1));
  const float eps = static_cast<float>(c.double_of(n->input(4)));
  const int64_t axis = -static_cast<int64_t>(shape.size());
  const at::Tensor ones = at::ones(shape);
  const std::string w =
      c.is_none(n->input(2)) ? c.b.initializer(c.base(n, "ln"), ones) : in(c, n, 2);
  const std::string bias =
      c.is_none(n->input(3)) ? c.b.initializer(c.base(n, "ln"), at::zeros(shape)) : in(c, n, 3);
  const std::string x = in(c, n, 0);
  if (c.opset() >= 17) {
    c.bind(n->output(),
           c.b.node1("LayerNormalization", {x, w, bias}, c.base(n, "LayerNormalization"),
                     {Attr::Int("axis", axis), Attr::Float("epsilon", eps)}));
    return;
  }
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < 0; ++a) axes.push_back(a);
  const std::string nb = c.base(n, "LayerNorm");
  auto mean = [&](const std::string& v) {
    return c.b.node1("ReduceMean", {v}, nb, {Attr::Ints("axes", axes), Attr::Int("keepdims", 1)});
  };
  const std::string d = c.b.node1("Sub", {x, mean(x)}, nb);
  const std::string var = mean(c.b.node1("Mul", {d, d}, nb));
  const std::string den =
      c.b.node1("Sqrt", {c.b.node1("Add", {var, c.b.scalar_f(nb, eps)}, nb)}, nb);
  const std::string y = c.b.node1("Div", {d, den}, nb);
  c.bind(n->output(), c.b.node1("Add", {c.b.node1("Mul", {y, w}, nb), bias}, nb));
}

}  // namespace

void add_layer_ops(OpRows& t) {
  for (const char* k : {"aten::conv1d", "aten::conv2d", "aten::conv3d"})
    t[k] = [](Converter& c, Node* n) { conv(c, n, {3, 4, 5, 6}); };
  for (const char* k :
       {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"})
    t[k] = [](Converter& c, Node* n) { conv(c, n, {3, 4, 7, 6, 5, true}); };
  t["aten::_convolution"] = convolution;
  t["aten::linear"] = linear;
  for (const char* k : {"aten::matmul", "aten::bmm", "aten::mm"})
    t[k] = [](Converter& c, Node* n) { simple(c, n, "MatMul", 2); };
  t["aten::baddbmm"] = add_product;
  t["aten::addmm"] = add_product;
  t["aten::batch_norm"] = batch_norm;
  t["aten::layer_norm"] = layer_norm;
}

}  // namespace tq::onnx_export
