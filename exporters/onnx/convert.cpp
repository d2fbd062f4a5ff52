// convert(): the record's model as one straight-line graph, profiled at two
// batch sizes, then converted node by node through the op table.
#include "convert.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/error.h"
#include "taoquant/jit.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

using torch::jit::Graph;

namespace {

const c10::Symbol kObserve = c10::Symbol::fromQualString("taoquant::observe");
const c10::Symbol kMark = c10::Symbol::fromQualString("taoquant::mark");

// The module attribute a GetAttr chain from `self` reads.
c10::IValue attr_value(const torch::jit::Module& m, Value* v) {
  std::vector<std::string> chain;
  while (v->node()->kind() == c10::prim::GetAttr) {
    chain.push_back(v->node()->s(torch::jit::attr::name));
    v = v->node()->input(0);
  }
  c10::IValue cur = m._ivalue();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) cur = cur.toObject()->getAttr(*it);
  return cur;
}

// Each `taoquant::observe(x, id)` (inline, or inlined from an observer
// module, its id read from the module) becomes `taoquant::mark(x, <id>)`:
// the same value, marked for the policy, and runnable without a table.
void constant_marks(Graph& g, const torch::jit::Module& m) {
  for (Node* n : jit::find_nodes(g.block(), [](Node* n) { return n->kind() == kObserve; })) {
    Value* idv = n->input(1);
    const int64_t id = idv->node()->kind() == c10::prim::Constant
                           ? torch::jit::toIValue(idv)->toInt()
                           : attr_value(m, idv).toInt();
    torch::jit::WithInsertPoint guard(n);
    Node* mark = g.create(kMark, {n->input(0), g.insertConstant(id)}, 1);
    mark->insertBefore(n);
    mark->output()->setType(n->output()->type());
    n->output()->replaceAllUsesWith(mark->output());
    n->destroy();
  }
}

// Straight-line: inline, fold, make mutation functional where LibTorch can.
std::shared_ptr<Graph> prepare(const torch::jit::Module& m) {
  auto g = jit::inlined_graph(m);
  jit::fold_training_flags(*g);
  constant_marks(*g, m);
  jit::fold_constants(g);
  torch::jit::RemoveListMutation(g);
  torch::jit::RemoveTensorMutation(g);
  torch::jit::EliminateDeadCode(g);
  return g;
}

bool capturable(const c10::TypePtr& t) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::TensorType:
    case K::IntType:
    case K::FloatType:
    case K::BoolType:
    case K::StringType:
    case K::NoneType:
      return true;
    case K::ListType: {
      const auto e = t->expectRef<c10::ListType>().getElementType()->kind();
      return e == K::IntType || e == K::FloatType || e == K::BoolType;
    }
    default:
      return false;
  }
}

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isInt() && b.isInt()) return a.toInt() == b.toInt();
  if (a.isDouble() && b.isDouble()) return a.toDouble() == b.toDouble();
  if (a.isBool() && b.isBool()) return a.toBool() == b.toBool();
  if (a.isString() && b.isString()) return a.toStringRef() == b.toStringRef();
  if (a.isNone() && b.isNone()) return true;
  if (a.isIntList() && b.isIntList()) return a.toIntVector() == b.toIntVector();
  if (a.isDoubleList() && b.isDoubleList()) return a.toDoubleVector() == b.toDoubleVector();
  if (a.isBoolList() && b.isBoolList()) return a.toBoolList().vec() == b.toBoolList().vec();
  return false;
}

std::vector<c10::IValue> sample_inputs(const std::vector<std::vector<int64_t>>& shapes,
                                       const std::vector<c10::ScalarType>& dtypes, int64_t batch) {
  std::vector<c10::IValue> in;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto s = shapes[i];
    if (!s.empty()) s[0] = batch;
    const auto dt = i < dtypes.size() ? dtypes[i] : c10::kFloat;
    in.emplace_back(at::isFloatingType(dt) ? at::randn(s, gen).to(dt) : at::zeros(s, dt));
  }
  return in;
}

// Runs a copy of `g` that also returns every capturable value of its top
// block, at two batch sizes: shapes (dims that change are -1) and which
// scalars change with the batch.
std::unordered_map<const Value*, Seen> profile(Graph& g, const torch::jit::Module& m,
                                               const std::vector<std::vector<int64_t>>& shapes,
                                               const std::vector<c10::ScalarType>& dtypes) {
  auto copy = g.copy();
  std::vector<Value*> src, dst;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    src.push_back(g.inputs()[i]);
    dst.push_back(copy->inputs()[i]);
  }
  auto a = g.nodes().begin();
  for (auto c = copy->nodes().begin(); a != g.nodes().end(); ++a, ++c)
    for (size_t o = 0; o < a->outputs().size(); ++o) {
      src.push_back(a->output(o));
      dst.push_back(c->output(o));
    }
  std::vector<Value*> taken, from;
  for (size_t i = 0; i < dst.size(); ++i)
    if (capturable(dst[i]->type())) {
      taken.push_back(dst[i]);
      from.push_back(src[i]);
    }
  torch::jit::WithInsertPoint guard(copy->return_node());
  Value* tup = copy->insertNode(copy->createTuple(taken))->output();
  copy->eraseOutput(0);
  copy->registerOutput(tup);
  torch::jit::GraphFunction fn("tq_onnx_profile", copy, nullptr);
  NoGraphOptimization no_opt;
  torch::NoGradGuard no_grad;
  std::vector<std::vector<c10::IValue>> runs;
  for (int64_t batch : {2, 3}) {
    torch::jit::Stack stack{m._ivalue()};
    for (auto& x : sample_inputs(shapes, dtypes, batch)) stack.push_back(x);
    fn.run(stack);
    runs.push_back(stack.back().toTupleRef().elements().vec());
  }
  std::unordered_map<const Value*, Seen> seen;
  for (size_t i = 0; i < taken.size(); ++i) {
    Seen s;
    const c10::IValue &x = runs[0][i], &y = runs[1][i];
    if (x.isTensor() && y.isTensor()) {
      s.tensor = true;
      s.dtype = x.toTensor().scalar_type();
      const auto dx = x.toTensor().sizes().vec(), dy = y.toTensor().sizes().vec();
      s.dims = dx;
      for (size_t d = 0; d < dx.size() && d < dy.size(); ++d)
        if (dx[d] != dy[d]) s.dims[d] = -1;
      s.batch_dependent = dx != dy;
    } else {
      s.value = x;
      s.batch_dependent = !same_value(x, y);
    }
    seen[from[i]] = s;
  }
  return seen;
}

// `if`s left in the graph whose condition the profile found constant take
// their branch; returns whether any did.
bool take_constant_branches(Graph& g, const std::unordered_map<const Value*, Seen>& seen) {
  bool changed = false;
  for (Node* n : g.nodes().reverse()) {
    if (n->kind() != c10::prim::If) continue;
    auto it = seen.find(n->input(0));
    if (it == seen.end() || it->second.batch_dependent || !it->second.value.isBool()) continue;
    jit::inline_branch(n, it->second.value.toBool() ? 0 : 1);
    changed = true;
  }
  return changed;
}

}  // namespace

// The default policy: the float model, with each marked value named as the
// record names it (so that ranges and caches can name it).
std::string QuantPolicy::mark(Converter& c, const std::string& x, int64_t mark) {
  const QuantTensor* t = c.record() ? c.record()->find_mark(mark) : nullptr;
  if (!t || t->name.empty()) return x;
  std::string name = x;
  if (!c.b.used(t->name) && c.b.rename(x, t->name)) name = t->name;
  if (c.opts.mark_names) c.opts.mark_names->emplace(t->name, name);
  return name;
}

std::string QuantPolicy::layer_input(Converter&, const std::string&, const std::string& x) {
  return x;
}

std::string QuantPolicy::weight(Converter& c, const std::string& layer, const at::Tensor& w,
                                bool transposed) {
  return c.b.initializer(layer.empty() ? "weight" : layer + ".weight",
                         transposed ? w.t().contiguous() : w);
}

std::string QuantPolicy::bias(Converter&, const std::string&, const at::Tensor&, const std::string&,
                              const std::string&, const std::function<std::string()>& as_is) {
  return as_is();
}

std::optional<std::string> QuantPolicy::dynamic_linear(Converter&, const std::string&,
                                                       const std::string&, const at::Tensor&,
                                                       const at::Tensor*) {
  return std::nullopt;
}

namespace {

void convert_node(Converter& c, Node* n, const torch::jit::Module& model) {
  const auto kind = n->kind();
  if (kind == c10::prim::Constant) {
    c.bind_const(n->output(), *torch::jit::toIValue(n->output()));
    return;
  }
  if (kind == c10::prim::GetAttr) {  // a weight, a module, a setting: constants
    Bound bd;
    bd.kind = Bound::Kind::kConst;
    bd.value = attr_value(model, n->output());
    if (auto path = jit::attr_path(n->output())) bd.name = *path;
    c.bind(n->output(), bd);
    return;
  }
  if (!n->blocks().empty())
    throw RuntimeError("ONNX export: control flow that depends on the data or the batch size (" +
                       std::string(kind.toQualString()) +
                       ") cannot be written as a straight-line ONNX graph: " + c.node_where(n));
  bool scalars_only = !n->outputs().empty();  // outputs: ints, floats, int lists...
  for (Value* o : n->outputs())
    scalars_only =
        scalars_only && o->type()->kind() != c10::TypeKind::TensorType && capturable(o->type());
  if (scalars_only) {
    // Shape arithmetic: constants are known from the profile; a value that
    // changes with the batch is written when an op reads it (int_list).
    for (Value* o : n->outputs())
      if (c.is_constant(o)) c.bind_const(o, c.constant(o));
    return;
  }
  const auto& table = op_table();
  auto row = table.find(kind.toQualString());
  if (row == table.end() && n->outputs().empty()) return;  // aten::warn and the like
  if (row == table.end())
    throw RuntimeError("ONNX export: " + std::string(kind.toQualString()) +
                       " has no ONNX mapping in tao-quant: " + c.node_where(n));
  row->second(c, n);
  if (n->outputs().size() == 1 && !n->inputs().empty() && c.has_binding(n->input(0)) &&
      c.binding(n->input(0)).kind == Bound::Kind::kTensor && c.has_binding(n->output()) &&
      c.binding(n->output()).kind == Bound::Kind::kTensor) {
    const std::string& y = c.binding(n->output()).name;
    const std::string seen =
        c.opts.policy->passed(c, n->kind().toQualString(), c.binding(n->input(0)).name, y);
    if (seen != y) c.bind(n->output(), seen);
  }
  // In place (`add_`, `relu_`): later readers of the input see the result.
  const std::string name = kind.toUnqualString();
  if (!name.empty() && name.back() == '_' && n->outputs().size() == 1 && !n->inputs().empty() &&
      c.has_binding(n->output()))
    c.alias(n->input(0), n->output());
}

void flatten_outputs(Converter& c, const Bound& bd,
                     std::vector<std::pair<std::string, const Seen*>>& out) {
  if (bd.kind == Bound::Kind::kSeq) {
    for (const auto& e : bd.items) flatten_outputs(c, e, out);
    return;
  }
  if (bd.kind == Bound::Kind::kConst && bd.value.isNone()) return;
  out.emplace_back(c.tensor_of(bd, "output"), bd.origin ? c.find_seen(bd.origin) : nullptr);
}

}  // namespace

Converted convert(const torch::jit::Module& model,
                  const std::vector<std::vector<int64_t>>& input_shapes,
                  const std::vector<c10::ScalarType>& input_dtypes, const ConvertOptions& opts) {
  auto g = prepare(model);
  auto seen = profile(*g, model, input_shapes, input_dtypes);
  for (int round = 0; round < 8 && take_constant_branches(*g, seen); ++round) {
    jit::fold_constants(g);
    seen = profile(*g, model, input_shapes, input_dtypes);
  }
  OnnxBuilder b(opts.opset);
  QuantPolicy float_policy;
  ConvertOptions o = opts;
  if (!o.policy) o.policy = &float_policy;
  Converter c(b, o, model);
  c.float_model = !opts.policy;
  c.set_seen(seen);
  Converted out;
  c.bind_const(g->inputs()[0], model._ivalue());
  for (size_t i = 1; i < g->inputs().size(); ++i) {
    Value* v = g->inputs()[i];
    const std::string name = g->inputs().size() == 2 ? "input" : "input." + std::to_string(i - 1);
    b.add_input(name, elem_of(c.seen(v).dtype), c.seen(v).dims);
    c.bind(v, name);
    out.inputs.push_back(name);
  }
  for (Node* n : g->nodes()) convert_node(c, n, model);
  std::vector<std::pair<std::string, const Seen*>> outs;
  flatten_outputs(c, c.binding(g->outputs()[0]), outs);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string name = outs.size() == 1 ? "output" : "output." + std::to_string(i);
    const std::string id = b.node1("Identity", {outs[i].first}, name);
    const Seen* s = outs[i].second;
    if (!s || !s->tensor)
      throw RuntimeError("ONNX export: the profiling runs did not see the model's output " +
                         std::to_string(i) + " as a tensor");
    b.add_output(id, elem_of(s->dtype), s->dims);
    out.outputs.push_back(id);
  }
  out.op_types = b.op_types();
  out.bytes = b.finish("tao_quant", "exported by tao-quant from a TorchScript model");
  return out;
}

}  // namespace tq::onnx_export
