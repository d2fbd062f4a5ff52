#include "builder.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <ATen/ATen.h>

#include "taoquant/error.h"

namespace tq::onnx_export {

Elem elem_of(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat:
      return Elem::kFloat;
    case c10::kByte:
      return Elem::kUInt8;
    case c10::kChar:
      return Elem::kInt8;
    case c10::kInt:
      return Elem::kInt32;
    case c10::kLong:
      return Elem::kInt64;
    case c10::kBool:
      return Elem::kBool;
    case c10::kHalf:
      return Elem::kFloat16;
    case c10::kDouble:
      return Elem::kDouble;
    default:
      throw RuntimeError(std::string("ONNX export: tensors of type ") + c10::toString(t) +
                         " have no ONNX 1.12 element type here");
  }
}

struct OnnxBuilder::Impl {
  onnx::ModelProto model;
  onnx::GraphProto* graph = nullptr;
  int opset = 17;
};

OnnxBuilder::OnnxBuilder(int opset) : impl_(std::make_unique<Impl>()) {
  impl_->opset = opset;
  impl_->graph = impl_->model.mutable_graph();
}

OnnxBuilder::~OnnxBuilder() = default;

std::string OnnxBuilder::unique(const std::string& base) {
  const std::string b = base.empty() ? "value" : base;
  if (used_.insert(b).second) return b;
  for (int& n = counters_[b];;) {
    std::string name = b + "." + std::to_string(++n);
    if (used_.insert(name).second) return name;
  }
}

namespace {

void set_type(onnx::ValueInfoProto* v, const std::string& name, Elem t,
              const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(t));
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    auto* dim = shape->add_dim();
    if (d < 0)
      dim->set_dim_param("batch");
    else
      dim->set_dim_value(d);
  }
}

}  // namespace

void OnnxBuilder::add_input(const std::string& name, Elem t, const std::vector<int64_t>& dims) {
  used_.insert(name);
  set_type(impl_->graph->add_input(), name, t, dims);
}

void OnnxBuilder::add_output(const std::string& name, Elem t, const std::vector<int64_t>& dims) {
  set_type(impl_->graph->add_output(), name, t, dims);
}

std::string OnnxBuilder::initializer(const std::string& base, Elem t,
                                     const std::vector<int64_t>& dims, const void* data,
                                     size_t bytes) {
  const std::string name = unique(base);
  onnx::TensorProto* p = impl_->graph->add_initializer();
  p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t));
  for (int64_t d : dims) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(data), bytes));
  return name;
}

std::string OnnxBuilder::initializer(const std::string& base, const at::Tensor& t) {
  const at::Tensor c = t.detach().cpu().contiguous();
  return initializer(base, elem_of(c.scalar_type()), c.sizes().vec(), c.data_ptr(),
                     static_cast<size_t>(c.numel()) * c.element_size());
}

std::string OnnxBuilder::scalar_f(const std::string& base, float v) {
  return initializer(base, Elem::kFloat, {}, &v, sizeof v);
}

std::string OnnxBuilder::ints(const std::string& base, const std::vector<int64_t>& v) {
  return initializer(base, Elem::kInt64, {static_cast<int64_t>(v.size())}, v.data(),
                     v.size() * sizeof(int64_t));
}

std::vector<std::string> OnnxBuilder::node(const std::string& op,
                                           const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& out_bases,
                                           const std::vector<Attr>& attrs,
                                           const std::string& domain) {
  onnx::NodeProto* n = impl_->graph->add_node();
  n->set_op_type(op);
  if (!domain.empty()) n->set_domain(domain);
  for (const auto& i : inputs) n->add_input(i);
  std::vector<std::string> outs;
  for (const auto& b : out_bases) {
    outs.push_back(unique(b));
    n->add_output(outs.back());
  }
  n->set_name(outs.empty() ? unique(op) : outs.front());
  for (const auto& a : attrs) {
    onnx::AttributeProto* p = n->add_attribute();
    p->set_name(a.name);
    switch (a.kind) {
      case Attr::Kind::kInt:
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(a.i);
        break;
      case Attr::Kind::kFloat:
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(a.f);
        break;
      case Attr::Kind::kString:
        p->set_type(onnx::AttributeProto::STRING);
        p->set_s(a.s);
        break;
      case Attr::Kind::kInts:
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.ints) p->add_ints(v);
        break;
      case Attr::Kind::kFloats:
        p->set_type(onnx::AttributeProto::FLOATS);
        for (float v : a.floats) p->add_floats(v);
        break;
    }
  }
  return outs;
}

bool OnnxBuilder::rename(const std::string& from, const std::string& to) {
  onnx::GraphProto& g = *impl_->graph;
  bool produced = false;
  for (auto& n : *g.mutable_node()) {
    for (auto& o : *n.mutable_output())
      if (o == from) {
        o = to;
        produced = true;
        if (n.name() == from) n.set_name(to);
      }
  }
  if (!produced) return false;
  for (auto& n : *g.mutable_node())
    for (auto& i : *n.mutable_input())
      if (i == from) i = to;
  for (auto& o : *g.mutable_output())
    if (o.name() == from) o.set_name(to);
  used_.insert(to);
  return true;
}

size_t OnnxBuilder::node_count() const {
  return static_cast<size_t>(impl_->graph->node_size());
}

std::vector<std::string> OnnxBuilder::op_types() const {
  std::vector<std::string> out;
  for (const auto& n : impl_->graph->node()) out.push_back(n.op_type());
  return out;
}

std::string OnnxBuilder::finish(const std::string& graph_name, const std::string& doc) {
  onnx::ModelProto& m = impl_->model;
  m.set_ir_version(8);
  m.set_producer_name("tao-quant");
  m.set_producer_version(TQ_VERSION);
  m.set_doc_string(doc);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(impl_->opset);
  impl_->graph->set_name(graph_name);
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("ONNX export: the model fails the ONNX checker: ") + e.what());
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes))
    throw RuntimeError("ONNX export: could not serialize the model");
  return bytes;
}

}  // namespace tq::onnx_export
