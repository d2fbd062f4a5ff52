// The observer table and the custom ops through which TorchScript observer
// modules reach tao-quant's C++ observers during calibration.
#include <spdlog/spdlog.h>

#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>
#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"

namespace tq {

namespace {

using TableScope = jit::OpScope<ObserverTable>;

ObserverTable& require_active() {
  ObserverTable* t = TableScope::current();
  if (!t) throw RuntimeError("taoquant observer op called outside a calibration");
  return *t;
}

at::Tensor observe_op(const at::Tensor& x, int64_t id) {
  require_active().observe(id, x);
  return x;
}

std::tuple<at::Tensor, at::Tensor> qparams_op(int64_t id) {
  const QParams& q = require_active().qparams(id);
  auto scale = torch::tensor(q.scale, torch::kFloat);
  std::vector<int64_t> zp(q.zero_point.begin(), q.zero_point.end());
  auto zero_point = torch::tensor(zp, torch::kLong);
  return {scale, zero_point};
}

// Resolves `taoquant.<op>` in TorchScript source defined from C++.
struct OpsResolver : public torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name,
                                                         torch::jit::GraphFunction&,
                                                         const torch::jit::SourceRange&) override {
    if (name == "torch") return std::make_shared<torch::jit::BuiltinModule>("aten");
    if (name == "taoquant") return std::make_shared<torch::jit::BuiltinModule>("taoquant");
    return nullptr;
  }
  c10::TypePtr resolveType(const std::string&, const torch::jit::SourceRange&) override {
    return nullptr;
  }
};

c10::ScalarType torch_qtype(DType d) {
  switch (d) {
    case DType::kInt8:
    case DType::kInt4:
      return c10::kQInt8;
    case DType::kUInt8:
      return c10::kQUInt8;
    default:
      return c10::kQUInt8;
  }
}

}  // namespace

TORCH_LIBRARY(taoquant, m) {
  m.def("observe(Tensor(a) x, int id) -> Tensor(a)", observe_op);
  m.def("qparams(int id) -> (Tensor, Tensor)", qparams_op);
}

// The table is the context of the taoquant::observe and taoquant::qparams
// ops while it lives.
struct ObserverTable::Scope : TableScope {
  using TableScope::TableScope;
};

ObserverTable::ObserverTable(QParamConstraints constraints)
    : constraints_(std::move(constraints)), scope_(std::make_unique<Scope>(*this)) {}

ObserverTable::~ObserverTable() = default;

ObserverTable* ObserverTable::active() {
  return TableScope::current();
}

int ObserverTable::add_template(ObserverTemplate t) {
  // Fails early (SpecError with location) for an unknown observer or kwargs.
  (void)ObserverRegistry::instance().create(t.observer, t.cfg, t.loc);
  templates_.push_back(std::move(t));
  return static_cast<int>(templates_.size() - 1);
}

torch::jit::Module ObserverTable::make_module(int template_id) const {
  const auto& t = templates_.at(static_cast<size_t>(template_id));
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module m("__torch__.taoquant.Observer", cu, true);
  c10::QScheme qscheme =
      t.cfg.per_channel ? (t.cfg.symmetric ? c10::kPerChannelSymmetric : c10::kPerChannelAffine)
                        : (t.cfg.symmetric ? c10::kPerTensorSymmetric : c10::kPerTensorAffine);
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_attribute("dtype", c10::IntType::get(),
                       static_cast<int64_t>(torch_qtype(t.cfg.dtype)));
  m.register_attribute("qscheme", c10::IntType::get(), static_cast<int64_t>(qscheme));
  m.register_attribute("ch_axis", c10::IntType::get(), static_cast<int64_t>(t.cfg.axis));
  m.register_attribute("tq_template", c10::IntType::get(), static_cast<int64_t>(template_id));
  m.register_attribute("tq_id", c10::IntType::get(), static_cast<int64_t>(-1));
  m.define(R"JIT(
def forward(self, x: Tensor) -> Tensor:
    return taoquant.observe(x, self.tq_id)

def calculate_qparams(self):
    return taoquant.qparams(self.tq_id)
)JIT",
           std::make_shared<OpsResolver>());
  return m;
}

namespace {

bool is_observer_name(const std::string& n) {
  return n.find("_observer_") != std::string::npos;
}

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The layer a value flows into: follows a module call whose forward passes
// its input straight to a child call (e.g. Sequential -> first layer).
std::string descend_input(const torch::jit::Module& m, const std::string& path) {
  using namespace torch::jit;
  if (!m.find_method("forward")) return path;
  auto g = m.get_method("forward").graph();
  if (g->inputs().size() < 2) return path;
  Value* in = g->inputs()[1];
  for (const auto& u : in->uses()) {
    Node* n = u.user;
    if (n->kind() != prim::CallMethod || n->input(0)->node()->kind() != prim::GetAttr) continue;
    std::string child = n->input(0)->node()->s(attr::name);
    if (is_observer_name(child) || u.offset != 1) continue;
    auto v = m.attr(child, c10::IValue());
    if (!v.isModule()) continue;
    return descend_input(v.toModule(), join_path(path, child));
  }
  return path;
}

// What value an observer call observes, in words: "<layer>:input",
// "<layer>:weight", "<module>:<attribute>", "<module>:output" or "<module>:<op>".
std::string label_for(torch::jit::Node* call, const torch::jit::Module& owner,
                      const std::string& prefix) {
  using namespace torch::jit;
  Value* v = call->input(1);
  Node* def = v->node();
  // A module attribute, read through its chain from self (a functional
  // F.linear(x, self.out_proj.weight) in nn.MultiheadAttention): the
  // module that owns it, ":weight" or the attribute's name.
  if (def->kind() == prim::GetAttr) {
    if (auto chain = jit::attr_path(v)) {
      const auto dot = chain->rfind('.');
      if (dot == std::string::npos) return prefix + ":" + *chain;
      return join_path(prefix, chain->substr(0, dot)) + ":" + chain->substr(dot + 1);
    }
  }
  for (Value* x : {call->output(), v}) {
    for (const auto& u : x->uses()) {
      Node* n = u.user;
      if (n == call || n->kind() != prim::CallMethod) continue;
      Node* obj = n->input(0)->node();
      if (obj->kind() != prim::GetAttr || is_observer_name(obj->s(attr::name))) continue;
      std::string child = obj->s(attr::name);
      auto cv = owner.attr(child, c10::IValue());
      std::string path = join_path(prefix, child);
      if (cv.isModule()) path = descend_input(cv.toModule(), path);
      return path + ":input";
    }
  }
  if (def->kind() == prim::CallMethod && def->input(0)->node()->kind() == prim::GetAttr)
    return join_path(prefix, def->input(0)->node()->s(attr::name)) + ":output";
  if (def->kind() == prim::Param) return prefix + ":input";
  return prefix + ":" + std::string(def->kind().toUnqualString());
}

// Labels of the observer calls in a module's graph, by observer attribute name.
void collect_labels(torch::jit::Block* b, const torch::jit::Module& owner,
                    const std::string& prefix, std::map<std::string, std::string>& out) {
  using namespace torch::jit;
  auto is_observer_call = [](Node* n) {
    return n->kind() == prim::CallMethod && n->inputs().size() == 2 &&
           n->input(0)->node()->kind() == prim::GetAttr &&
           is_observer_name(n->input(0)->node()->s(attr::name));
  };
  for (Node* n : jit::find_nodes(b, is_observer_call))
    out[n->input(0)->node()->s(attr::name)] = label_for(n, owner, prefix);
}

}  // namespace

void ObserverTable::bind(torch::jit::Module& observed) {
  if (size_t n = jit::complete_shared_observers(observed, is_observer_name))
    spdlog::debug("{} observer(s) copied to module instances that share a type", n);
  const auto all = jit::module_instances(observed);
  std::map<int, std::map<std::string, std::string>> labels;  // by parent instance
  for (const auto& inst : all) {
    if (inst.parent < 0 || !is_observer_name(inst.name)) continue;
    const auto& owner = all[static_cast<size_t>(inst.parent)];
    if (!labels.count(inst.parent)) {
      auto& l = labels[inst.parent];
      for (const auto& method : owner.module.get_methods())
        collect_labels(method.graph()->block(), owner.module, owner.path, l);
    }
    torch::jit::Module c = inst.module;
    auto slot = std::make_unique<ObserverSlot>();
    slot->id = static_cast<int64_t>(slots_.size());
    slot->template_id = static_cast<int>(c.attr("tq_template").toInt());
    slot->path = inst.path;
    const auto& l = labels[inst.parent];
    auto it = l.find(inst.name);
    slot->label = it != l.end() ? it->second : slot->path;
    spdlog::debug("observer {} watches {}", slot->path, slot->label);
    const auto& t = templates_.at(static_cast<size_t>(slot->template_id));
    slot->obs = ObserverRegistry::instance().create(t.observer, t.cfg, t.loc);
    c.setattr("tq_id", slot->id);
    slots_.push_back(std::move(slot));
  }
}

void ObserverTable::observe(int64_t id, const at::Tensor& x) {
  if (id < 0 || static_cast<size_t>(id) >= slots_.size())
    throw RuntimeError("observer id " + std::to_string(id) + " is not bound");
  auto& s = *slots_[static_cast<size_t>(id)];
  at::NoGradGuard no_grad;
  s.obs->observe(x.detach());
  ++s.calls;
  s.last_shape = x.sizes().vec();
  s.qparams.reset();
}

int64_t ObserverTable::add_slot(int template_id, const std::string& label) {
  const auto& t = templates_.at(static_cast<size_t>(template_id));
  auto slot = std::make_unique<ObserverSlot>();
  slot->id = static_cast<int64_t>(slots_.size());
  slot->template_id = template_id;
  slot->path = label;
  slot->label = label;
  slot->obs = ObserverRegistry::instance().create(t.observer, t.cfg, t.loc);
  slots_.push_back(std::move(slot));
  return slots_.back()->id;
}

const ObserverSlot* ObserverTable::find_label(const std::string& label) const {
  for (const auto& s : slots_)
    if (s->label == label) return s.get();
  return nullptr;
}

const ObserverSlot* ObserverTable::find_path(const std::string& path) const {
  for (const auto& s : slots_)
    if (s->path == path) return s.get();
  return nullptr;
}

const QParams& ObserverTable::qparams(int64_t id) {
  if (id < 0 || static_cast<size_t>(id) >= slots_.size())
    throw RuntimeError("observer id " + std::to_string(id) + " is not bound");
  auto& s = *slots_[static_cast<size_t>(id)];
  if (!s.qparams) {
    if (s.calls == 0)
      throw RuntimeError(
          "observer for '" + s.label +
          "' saw no data during calibration (is that part of the model unused for these inputs?)");
    s.qparams = apply_constraints(s.obs->finalize(), constraints_);
  }
  return *s.qparams;
}

}  // namespace tq
