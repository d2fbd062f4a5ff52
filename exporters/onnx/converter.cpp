// The Converter: what each TorchScript value stands for during conversion,
// and how ops read their inputs (tensors, constants, batch-dependent ints).
#include <torch/csrc/jit/ir/scope.h>
#include <torch/script.h>

#include "convert.h"
#include "taoquant/error.h"
#include "taoquant/jit.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

std::string scope_of(const Node* n) {
  auto cs = n->callstack();
  if (!cs) return "";
  std::string path;
  for (const auto& e : (*cs)->vec()) {
    const auto& info = std::get<2>(e);
    if (!info || info->instance_name().empty() || info->instance_name() == "SELF") continue;
    path += (path.empty() ? "" : ".") + info->instance_name();
  }
  return path;
}

Converter::Converter(OnnxBuilder& builder, const ConvertOptions& o, const torch::jit::Module& m)
    : b(builder), opts(o), model_(m) {}

std::string Converter::node_where(const Node* n) const {
  std::ostringstream os;
  os << *n;
  std::string line = os.str();
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (line.size() > 240) line = line.substr(0, 240) + " ...";
  const std::string scope = scope_of(n);
  return (scope.empty() ? std::string("the model's own forward") : "module '" + scope + "'") +
         " (graph line: " + line + ")";
}

std::string Converter::base(const Node* n, const std::string& what) const {
  const std::string scope = scope_of(n);
  return scope.empty() ? what : scope + "." + what;
}

std::string Converter::layer_of(Node* n) const {
  auto l = jit::layer_of(n);
  return l ? *l : std::string();
}

Bound& Converter::binding(Value* v) {
  auto it = bound_.find(v);
  if (it == bound_.end() || it->second.kind == Bound::Kind::kUnset) {
    const Seen* s = seen_.count(v) ? &seen_.at(v) : nullptr;
    if (s && !s->tensor && !s->batch_dependent) {  // a scalar the profile knows
      Bound c;
      c.kind = Bound::Kind::kConst;
      c.value = s->value;
      return bound_[v] = c;
    }
    throw RuntimeError("ONNX export: no value for %" + v->debugName() + ", made by " +
                       node_where(v->node()));
  }
  return it->second;
}

const Seen* Converter::find_seen(const Value* v) const {
  auto it = seen_.find(v);
  return it == seen_.end() ? nullptr : &it->second;
}

const Seen& Converter::seen(const Value* v) const {
  auto it = seen_.find(v);
  if (it == seen_.end())
    throw RuntimeError("ONNX export: the profiling runs did not see %" + v->debugName() +
                       ", made by " + node_where(v->node()));
  return it->second;
}

bool Converter::is_constant(Value* v) const {
  auto it = bound_.find(v);
  if (it != bound_.end()) return it->second.kind == Bound::Kind::kConst;
  auto s = seen_.find(v);
  return s != seen_.end() && !s->second.tensor && !s->second.batch_dependent;
}

bool Converter::is_none(Value* v) const {
  return v->type()->kind() == c10::TypeKind::NoneType ||
         (is_constant(v) && const_cast<Converter*>(this)->constant(v).isNone());
}

const c10::IValue& Converter::constant(Value* v) {
  Bound& bd = binding(v);
  if (bd.kind != Bound::Kind::kConst)
    throw RuntimeError(
        "ONNX export: %" + v->debugName() + " changes with the batch size or the data, and " +
        node_where(v->uses().empty() ? v->node() : v->uses()[0].user) + " needs it constant");
  return bd.value;
}

at::Tensor Converter::constant_tensor(Value* v) {
  const c10::IValue& c = constant(v);
  if (!c.isTensor()) throw RuntimeError("ONNX export: %" + v->debugName() + " is not a tensor");
  return c.toTensor();
}

std::string Converter::tensor_of(const Bound& bd, const std::string& hint) {
  if (bd.kind == Bound::Kind::kTensor) return bd.name;
  if (bd.kind == Bound::Kind::kConst && bd.value.isTensor()) {
    const at::Tensor& held = bd.value.toTensor();
    auto it = initializers_.find(held.unsafeGetTensorImpl());
    if (it != initializers_.end()) return it->second;
    at::Tensor t = held;
    if (float_model && record() && !bd.name.empty()) {  // its value before the run moved it
      auto f = record()->float_values.find(bd.name);
      if (f != record()->float_values.end() && static_cast<int64_t>(f->second.size()) == t.numel())
        t = at::tensor(f->second).reshape(t.sizes()).to(t.scalar_type());
    }
    const std::string name = b.initializer(bd.name.empty() ? hint : bd.name, t);
    initializers_[held.unsafeGetTensorImpl()] = name;
    return name;
  }
  if (bd.kind == Bound::Kind::kConst && (bd.value.isDouble() || bd.value.isInt()))
    return bd.value.isDouble()
               ? b.scalar_f(hint, static_cast<float>(bd.value.toDouble()))
               : b.initializer(hint, at::scalar_tensor(bd.value.toInt(), at::kLong));
  throw RuntimeError("ONNX export: '" + hint + "' is not a tensor here");
}

std::string Converter::tensor(Value* v) {
  Bound& bd = binding(v);
  if (bd.kind == Bound::Kind::kConst && !bd.value.isTensor() && seen_.count(v) &&
      seen_.at(v).tensor)
    throw RuntimeError("ONNX export: %" + v->debugName() + " is not a tensor");
  if (bd.kind == Bound::Kind::kConst && bd.name.empty()) {
    auto p = jit::attr_path(v);
    if (p) bd.name = *p;
  }
  return tensor_of(bd, "const");
}

const std::vector<Bound>& Converter::items(Value* v) {
  Bound& bd = binding(v);
  if (bd.kind == Bound::Kind::kConst && bd.value.isList()) {  // e.g. a constant list of tensors
    Bound s;
    s.kind = Bound::Kind::kSeq;
    for (const auto& e : bd.value.toListRef()) {
      Bound x;
      x.kind = Bound::Kind::kConst;
      x.value = e;
      s.items.push_back(x);
    }
    bd = s;
  }
  if (bd.kind != Bound::Kind::kSeq)
    throw RuntimeError("ONNX export: %" + v->debugName() + " is not a list or tuple here");
  return bd.items;
}

void Converter::bind(Value* v, const std::string& onnx_name) {
  Bound bd;
  bd.kind = Bound::Kind::kTensor;
  bd.name = onnx_name;
  bd.origin = v;
  bound_[v] = bd;
}

void Converter::bind(Value* v, Bound bd) {
  if (!bd.origin) bd.origin = v;
  bound_[v] = std::move(bd);
}

void Converter::bind_const(Value* v, c10::IValue c) {
  Bound bd;
  bd.kind = Bound::Kind::kConst;
  bd.value = std::move(c);
  bd.origin = v;
  bound_[v] = bd;
}

void Converter::bind_seq(Value* v, std::vector<Bound> items) {
  Bound bd;
  bd.kind = Bound::Kind::kSeq;
  bd.items = std::move(items);
  bd.origin = v;
  bound_[v] = bd;
}

void Converter::alias(Value* out, Value* in) {
  bound_[out] = binding(in);
}

// ---- Batch-dependent ints ----------------------------------------------------

namespace {

std::string one_d(Converter& c, const std::string& x, bool scalar) {
  if (!scalar) return x;
  return c.b.node1("Unsqueeze", {x, c.b.ints("axes0", {0})}, x + ".1d");
}

}  // namespace

std::string Converter::dynamic_int(Value* v) {
  auto it = dynamic_.find(v);
  if (it != dynamic_.end()) return it->second;
  Node* n = v->node();
  const std::string kind = n->kind().toQualString();
  const std::string hint = base(n, "shape");
  std::string out;
  auto arg = [&](size_t i) -> std::string {  // an int input as a 0-d int64 value
    Value* a = n->input(i);
    if (is_constant(a)) return b.initializer(hint, at::scalar_tensor(int_of(a), at::kLong));
    return dynamic_int(a);
  };
  if (kind == "aten::size" && n->inputs().size() == 2) {
    const std::string shape = b.node1("Shape", {tensor(n->input(0))}, hint);
    out = b.node1("Gather", {shape, arg(1)}, hint, {Attr::Int("axis", 0)});
  } else if (kind == "aten::size") {
    out = b.node1("Shape", {tensor(n->input(0))}, hint);
  } else if (kind == "aten::Int" || kind == "prim::NumToTensor" || kind == "aten::ScalarImplicit" ||
             kind == "prim::unchecked_cast") {
    out = is_constant(n->input(0)) ? arg(0) : dynamic_int(n->input(0));
  } else if (kind == "aten::mul" || kind == "aten::add" || kind == "aten::sub" ||
             kind == "aten::floordiv") {
    const char* op = kind == "aten::mul"   ? "Mul"
                     : kind == "aten::add" ? "Add"
                     : kind == "aten::sub" ? "Sub"
                                           : "Div";  // non-negative sizes: floor = truncation
    out = b.node1(op, {arg(0), arg(1)}, hint);
  } else if (kind == "prim::ListConstruct") {
    std::vector<std::string> parts;
    for (size_t i = 0; i < n->inputs().size(); ++i) parts.push_back(one_d(*this, arg(i), true));
    out = b.node1("Concat", parts, hint, {Attr::Int("axis", 0)});
  } else if (kind == "aten::__getitem__") {
    out = b.node1("Gather", {dynamic_int(n->input(0)), arg(1)}, hint, {Attr::Int("axis", 0)});
  } else {
    throw RuntimeError("ONNX export: a value that changes with the batch size comes from " + kind +
                       ", which tao-quant cannot write as ONNX shape arithmetic: " + node_where(n));
  }
  return dynamic_[v] = out;
}

std::string Converter::int_list(Value* v) {
  if (is_constant(v)) {
    const c10::IValue& c = constant(v);
    return b.ints("shape", c.isInt() ? std::vector<int64_t>{c.toInt()} : c.toIntVector());
  }
  const bool scalar =
      v->type()->kind() == c10::TypeKind::IntType || v->type()->kind() == c10::TypeKind::TensorType;
  return one_d(*this, dynamic_int(v), scalar);
}

}  // namespace tq::onnx_export
