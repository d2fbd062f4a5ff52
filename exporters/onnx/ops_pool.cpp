// Rows for pooling and reductions.
#include <ATen/ATen.h>

#include "ops.h"
#include "taoquant/error.h"

namespace tq::onnx_export {

namespace {

std::vector<int64_t> per_dim(std::vector<int64_t> v, size_t k) {
  if (v.size() == 1 && k > 1) v.assign(k, v[0]);
  return v;
}

std::vector<int64_t> twice(std::vector<int64_t> v) {
  const auto n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(v[i]);
  return v;
}

// max_pool(x, kernel, stride, padding, dilation, ceil_mode)
void max_pool(Converter& c, Node* n) {
  const auto kernel = c.ints(n->input(1));
  const size_t k = kernel.size();
  auto stride = c.ints(n->input(2));
  if (stride.empty()) stride = kernel;
  c.bind(n->output(),
         c.b.node1("MaxPool", {in(c, n, 0)}, c.base(n, "MaxPool"),
                   {Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", per_dim(stride, k)),
                    Attr::Ints("pads", twice(per_dim(c.ints(n->input(3)), k))),
                    Attr::Ints("dilations", per_dim(c.ints(n->input(4)), k)),
                    Attr::Int("ceil_mode", c.constant(n->input(5)).toBool() ? 1 : 0)}));
}

// avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad[, divisor_override])
void avg_pool(Converter& c, Node* n) {
  if (n->inputs().size() > 6 && !c.is_none(n->input(6)))
    throw RuntimeError("ONNX export: avg_pool with divisor_override: " + c.node_where(n));
  const auto kernel = c.ints(n->input(1));
  const size_t k = kernel.size();
  auto stride = c.ints(n->input(2));
  if (stride.empty()) stride = kernel;
  c.bind(n->output(),
         c.b.node1("AveragePool", {in(c, n, 0)}, c.base(n, "AveragePool"),
                   {Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", per_dim(stride, k)),
                    Attr::Ints("pads", twice(per_dim(c.ints(n->input(3)), k))),
                    Attr::Int("ceil_mode", c.constant(n->input(4)).toBool() ? 1 : 0),
                    Attr::Int("count_include_pad", c.constant(n->input(5)).toBool() ? 1 : 0)}));
}

// adaptive pooling: global when the output is 1x1, else fixed windows when
// the input divides evenly.
void adaptive(Converter& c, Node* n, bool max) {
  const auto& d = c.dims(n->input(0));
  const auto out = per_dim(c.ints(n->input(1)), d.size() - 2);
  if (std::all_of(out.begin(), out.end(), [](int64_t v) { return v == 1; })) {
    const char* op = max ? "GlobalMaxPool" : "GlobalAveragePool";
    c.bind(n->output(0), c.b.node1(op, {in(c, n, 0)}, c.base(n, op)));
    return;
  }
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t size = d[i + 2];
    if (size < 0 || out[i] <= 0 || size % out[i] != 0)
      throw RuntimeError("ONNX export: adaptive pooling from " + std::to_string(size) + " to " +
                         std::to_string(out[i]) + " (not a whole window): " + c.node_where(n));
    kernel.push_back(size / out[i]);
  }
  const char* op = max ? "MaxPool" : "AveragePool";
  c.bind(n->output(0),
         c.b.node1(op, {in(c, n, 0)}, c.base(n, op),
                   {Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", kernel)}));
}

// mean/sum/amax(x, dims?, keepdim, ...): axes as an attribute (ReduceMean,
// ReduceMax before opset 18) or an input (ReduceSum from opset 13).
void reduce(Converter& c, Node* n, const std::string& op) {
  const int64_t r = c.rank(n->input(0));
  std::vector<int64_t> axes;
  bool keep = false;
  if (n->inputs().size() >= 3 && !c.is_none(n->input(1))) {
    const c10::IValue& a = c.constant(n->input(1));
    axes = a.isInt() ? std::vector<int64_t>{a.toInt()} : a.toIntVector();
    keep = c.constant(n->input(2)).toBool();
  }
  for (auto& a : axes) a = norm_dim(a, r);
  std::vector<Attr> attrs{Attr::Int("keepdims", keep ? 1 : 0)};
  std::vector<std::string> ins{in(c, n, 0)};
  if (!axes.empty()) {
    if (op == "ReduceSum")
      ins.push_back(c.b.ints(c.base(n, "axes"), axes));
    else
      attrs.push_back(Attr::Ints("axes", axes));
  }
  c.bind(n->output(), c.b.node1(op, ins, c.base(n, op), attrs));
}

}  // namespace

void add_pool_ops(OpRows& t) {
  for (const char* k : {"aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d"})
    t[k] = max_pool;
  for (const char* k : {"aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d"})
    t[k] = avg_pool;
  for (const char* k :
       {"aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d"})
    t[k] = [](Converter& c, Node* n) { adaptive(c, n, false); };
  for (const char* k : {"aten::adaptive_max_pool1d", "aten::adaptive_max_pool2d"})
    t[k] = [](Converter& c, Node* n) {
      if (n->outputs().size() > 1 && n->output(1)->hasUses())
        throw RuntimeError("ONNX export: adaptive max pooling's indices: " + c.node_where(n));
      adaptive(c, n, true);
    };
  t["aten::mean"] = [](Converter& c, Node* n) { reduce(c, n, "ReduceMean"); };
  t["aten::sum"] = [](Converter& c, Node* n) { reduce(c, n, "ReduceSum"); };
  t["aten::amax"] = [](Converter& c, Node* n) { reduce(c, n, "ReduceMax"); };
}

}  // namespace tq::onnx_export
