// Rows for elementwise arithmetic and activations.
#include <ATen/ATen.h>

#include <cmath>

#include "ops.h"
#include "taoquant/error.h"

namespace tq::onnx_export {

namespace {

bool is_tensor_input(Converter& c, Value* v) {
  return v->type()->kind() == c10::TypeKind::TensorType || !c.is_constant(v) ||
         c.constant(v).isTensor();
}

// An operand of a binary op: a tensor, or a number typed like the other
// operand (LibTorch's scalar promotion for the common cases).
std::string operand(Converter& c, Node* n, size_t i, Value* other) {
  Value* v = n->input(i);
  if (is_tensor_input(c, v)) return c.tensor(v);
  return scalar_like(c, n, c.double_of(v), other);
}

void binary(Converter& c, Node* n, const std::string& op) {
  Value *a = n->input(0), *b = n->input(1);
  std::string x = operand(c, n, 0, b), y = operand(c, n, 1, a);
  // add/sub's alpha: a + alpha * b.
  if ((op == "Add" || op == "Sub") && n->inputs().size() > 2 && c.double_of(n->input(2)) != 1.0)
    y = c.b.node1("Mul", {y, scalar_like(c, n, c.double_of(n->input(2)), a)}, c.base(n, "Mul"));
  if (op == "Add" && is_tensor_input(c, a) && is_tensor_input(c, b))
    c.opts.policy->add_inputs(c, x, y);
  c.bind(n->output(), c.b.node1(op, {x, y}, c.base(n, op)));
}

// aten::div(a, b, rounding_mode=None|"floor"|"trunc")
void div(Converter& c, Node* n) {
  std::string q = c.b.node1("Div", {operand(c, n, 0, n->input(1)), operand(c, n, 1, n->input(0))},
                            c.base(n, "Div"));
  if (n->inputs().size() > 2 && !c.is_none(n->input(2))) {
    const std::string mode = c.constant(n->input(2)).toStringRef();
    if (mode != "floor")
      throw RuntimeError("ONNX export: div rounding '" + mode + "': " + c.node_where(n));
    q = c.b.node1("Floor", {q}, c.base(n, "Floor"));
  }
  c.bind(n->output(), q);
}

// rsub(a, b, alpha) = b - alpha * a
void rsub(Converter& c, Node* n) {
  std::string a = operand(c, n, 0, n->input(1));
  if (c.double_of(n->input(2)) != 1.0)
    a = c.b.node1("Mul", {a, scalar_like(c, n, c.double_of(n->input(2)), n->input(0))},
                  c.base(n, "Mul"));
  c.bind(n->output(), c.b.node1("Sub", {operand(c, n, 1, n->input(0)), a}, c.base(n, "Sub")));
}

// Clip with optional bounds: hardtanh(x, lo, hi), clamp(x, lo?, hi?), relu6.
void clip(Converter& c, Node* n, size_t lo, size_t hi) {
  auto bound = [&](size_t i) -> std::string {
    if (i >= n->inputs().size() || c.is_none(n->input(i))) return "";
    return scalar_like(c, n, c.double_of(n->input(i)), n->input(0));
  };
  c.bind(n->output(), c.b.node1("Clip", {in(c, n, 0), bound(lo), bound(hi)}, c.base(n, "Clip")));
}

void relu6(Converter& c, Node* n) {
  const std::string x = in(c, n, 0);
  c.bind(n->output(),
         c.b.node1("Clip",
                   {x, scalar_like(c, n, 0.0, n->input(0)), scalar_like(c, n, 6.0, n->input(0))},
                   c.base(n, "Clip")));
}

void silu(Converter& c, Node* n) {
  const std::string x = in(c, n, 0);
  c.bind(n->output(),
         c.b.node1("Mul", {x, c.b.node1("Sigmoid", {x}, c.base(n, "Sigmoid"))}, c.base(n, "Mul")));
}

void hardswish(Converter& c, Node* n) {
  if (c.opset() >= 14) return simple(c, n, "HardSwish", 1);
  const std::string x = in(c, n, 0);
  const std::string s = c.b.node1("HardSigmoid", {x}, c.base(n, "HardSigmoid"),
                                  {Attr::Float("alpha", 1.0f / 6), Attr::Float("beta", 0.5f)});
  c.bind(n->output(), c.b.node1("Mul", {x, s}, c.base(n, "Mul")));
}

// gelu(x, approximate): the Erf form (ONNX has no Gelu before opset 20), or tanh.
void gelu(Converter& c, Node* n) {
  const std::string x = in(c, n, 0), nb = c.base(n, "Gelu");
  const bool tanh = n->inputs().size() > 1 && c.constant(n->input(1)).toStringRef() == "tanh";
  std::string inner;
  if (!tanh) {
    inner = c.b.node1("Erf", {c.b.node1("Div", {x, c.b.scalar_f(nb, std::sqrt(2.0f))}, nb)}, nb);
  } else {
    const std::string x3 = c.b.node1("Mul", {c.b.node1("Mul", {x, x}, nb), x}, nb);
    const std::string t =
        c.b.node1("Add", {x, c.b.node1("Mul", {x3, c.b.scalar_f(nb, 0.044715f)}, nb)}, nb);
    inner = c.b.node1(
        "Tanh", {c.b.node1("Mul", {t, c.b.scalar_f(nb, std::sqrt(2.0f / float(M_PI)))}, nb)}, nb);
  }
  const std::string one = c.b.node1("Add", {inner, c.b.scalar_f(nb, 1.0f)}, nb);
  const std::string half = c.b.node1("Mul", {x, c.b.scalar_f(nb, 0.5f)}, nb);
  c.bind(n->output(), c.b.node1("Mul", {half, one}, nb));
}

void softmax(Converter& c, Node* n, const std::string& op) {
  const int64_t axis = norm_dim(c.int_of(n->input(1)), c.rank(n->input(0)));
  if (n->inputs().size() > 2 && !c.is_none(n->input(2)))
    throw RuntimeError("ONNX export: softmax with a dtype: " + c.node_where(n));
  simple(c, n, op, 1, {Attr::Int("axis", axis)});
}

// dropout(x, p, train) in inference: x.
void dropout(Converter& c, Node* n) {
  if (c.constant(n->input(2)).toBool() && c.double_of(n->input(1)) > 0)
    throw RuntimeError("ONNX export: dropout in training mode: " + c.node_where(n));
  c.alias(n->output(), n->input(0));
}

}  // namespace

void add_math_ops(OpRows& t) {
  const std::pair<const char*, const char*> unary[] = {
      {"relu", "Relu"},   {"sigmoid", "Sigmoid"},
      {"tanh", "Tanh"},   {"exp", "Exp"},
      {"log", "Log"},     {"sqrt", "Sqrt"},
      {"neg", "Neg"},     {"abs", "Abs"},
      {"erf", "Erf"},     {"reciprocal", "Reciprocal"},
      {"floor", "Floor"}, {"ceil", "Ceil"}};
  for (const auto& [name, op] : unary) {
    const std::string o = op;
    for (const std::string suffix : {"", "_"})
      t["aten::" + std::string(name) + suffix] = [o](Converter& c, Node* n) { simple(c, n, o, 1); };
  }
  const std::pair<const char*, const char*> bin[] = {{"add", "Add"},     {"sub", "Sub"},
                                                     {"mul", "Mul"},     {"pow", "Pow"},
                                                     {"maximum", "Max"}, {"minimum", "Min"}};
  for (const auto& [name, op] : bin) {
    const std::string o = op;
    for (const std::string suffix : {"", "_"})
      t["aten::" + std::string(name) + suffix] = [o](Converter& c, Node* n) { binary(c, n, o); };
  }
  for (const char* k : {"aten::div", "aten::div_", "aten::true_divide"}) t[k] = div;
  t["aten::rsub"] = rsub;
  t["aten::rsqrt"] = [](Converter& c, Node* n) {
    c.bind(n->output(),
           c.b.node1("Reciprocal", {c.b.node1("Sqrt", {in(c, n, 0)}, c.base(n, "Sqrt"))},
                     c.base(n, "Reciprocal")));
  };
  for (const char* k : {"aten::hardtanh", "aten::hardtanh_", "aten::clamp", "aten::clamp_"})
    t[k] = [](Converter& c, Node* n) { clip(c, n, 1, 2); };
  for (const char* k : {"aten::relu6", "aten::relu6_"}) t[k] = relu6;
  for (const char* k : {"aten::silu", "aten::silu_"}) t[k] = silu;
  for (const char* k : {"aten::hardswish", "aten::hardswish_"}) t[k] = hardswish;
  for (const char* k : {"aten::hardsigmoid", "aten::hardsigmoid_"})
    t[k] = [](Converter& c, Node* n) {
      simple(c, n, "HardSigmoid", 1, {Attr::Float("alpha", 1.0f / 6), Attr::Float("beta", 0.5f)});
    };
  for (const char* k : {"aten::leaky_relu", "aten::leaky_relu_"})
    t[k] = [](Converter& c, Node* n) {
      simple(c, n, "LeakyRelu", 1,
             {Attr::Float("alpha", static_cast<float>(c.double_of(n->input(1))))});
    };
  t["aten::gelu"] = gelu;
  t["aten::softmax"] = [](Converter& c, Node* n) { softmax(c, n, "Softmax"); };
  t["aten::log_softmax"] = [](Converter& c, Node* n) { softmax(c, n, "LogSoftmax"); };
  for (const char* k : {"aten::dropout", "aten::dropout_", "aten::feature_dropout",
                        "aten::alpha_dropout", "aten::feature_alpha_dropout"})
    t[k] = dropout;
}

}  // namespace tq::onnx_export
