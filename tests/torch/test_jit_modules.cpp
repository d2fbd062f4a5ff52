// Module-level graph passes (tq::jit) on small modules built in the test:
// the inliner, the module-instance walker, the shared-type completions, the
// branch folding and specialization, the custom-op contexts of calibration
// and capture, and the wrapped LibTorch quantization passes.
#include <catch2/catch.hpp>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/jit.h>
#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"

using torch::jit::Module;
using torch::jit::testing::FileCheck;
namespace jit = tq::jit;

namespace {

using CU = std::shared_ptr<torch::jit::CompilationUnit>;

Module make(const CU& cu, const std::string& name) {
  Module m("__torch__." + name, cu, /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), false);
  return m;
}

// root.a and root.b share type Block; each has an Inner child (relu).
struct Tree {
  CU cu = std::make_shared<torch::jit::CompilationUnit>();
  Module root = make(cu, "Root");
  Module a = make(cu, "Block");
  Module b;
  Tree(const std::string& root_forward) {
    Module inner = make(cu, "Inner");
    inner.define("def forward(self, x):\n  return torch.relu(x)\n");
    a.register_module("inner", inner);
    a.define("def forward(self, x):\n  return self.inner.forward(x) * 2.0\n");
    b = a.deepcopy();  // same type, own objects
    root.register_module("a", a);
    root.register_module("b", b);
    root.define(root_forward);
  }
};

const char* kUsesA = "def forward(self, x):\n  return self.a.forward(x)\n";
const char* kUsesAB = "def forward(self, x):\n  return self.a.forward(x) + self.b.forward(x)\n";

std::vector<std::string> paths(const std::vector<jit::ModuleInstance>& all) {
  std::vector<std::string> out;
  for (const auto& i : all) out.push_back(i.path);
  return out;
}

bool is_observer(const std::string& n) {
  return n.find("_observer_") != std::string::npos;
}

}  // namespace

TEST_CASE("jit inliner: method calls at any depth", "[jit]") {
  Tree t(kUsesAB);
  auto g = t.root.get_method("forward").graph()->copy();
  tq::NoGraphOptimization no_opt;  // callees' graphs as written: calls inside calls
  CHECK(jit::inline_calls(*g) == 4);
  FileCheck()
      .check_not("prim::CallMethod")
      ->check_count("aten::relu", 2, /*exactly=*/true)
      ->run(*g);
  FileCheck().check_count("aten::mul", 2, /*exactly=*/true)->run(*g);
  // The method itself is untouched; inlined_graph works on a copy.
  FileCheck().check("prim::CallMethod")->run(*t.root.get_method("forward").graph());
  FileCheck().check_not("prim::CallMethod")->check("aten::relu")->run(*jit::inlined_graph(t.root));
}

TEST_CASE("jit inliner: functions only leaves method calls", "[jit]") {
  auto cu = torch::jit::compile(
      "def helper(x):\n  return torch.relu(x)\n"
      "def outer(x):\n  return helper(helper(x)) * 2.0\n");
  auto g = torch::jit::toGraphFunction(cu->get_function("outer")).graph()->copy();
  FileCheck().check("prim::CallFunction")->run(*g);
  CHECK(jit::inline_calls(*g, jit::Calls::kFunctions) == 2);
  FileCheck().check_not("prim::CallFunction")->check_count("aten::relu", 2, true)->run(*g);

  Tree t(kUsesA);
  auto mg = t.root.get_method("forward").graph()->copy();
  CHECK(jit::inline_calls(*mg, jit::Calls::kFunctions) == 0);
  FileCheck().check("prim::CallMethod")->run(*mg);
}

TEST_CASE("jit module instances: every instance of a shared type, with paths", "[jit]") {
  Tree t(kUsesA);
  auto all = jit::module_instances(t.root);
  CHECK(paths(all) == std::vector<std::string>{"", "a", "a.inner", "b", "b.inner"});
  CHECK(all[1].module.type() == all[3].module.type());
  CHECK(all[2].parent == 1);
  CHECK(all[3].name == "b");
  CHECK(all[4].module._ivalue() != all[2].module._ivalue());  // own objects
}

TEST_CASE("jit module instances: an instance without a value for a shared attribute", "[jit]") {
  Tree t(kUsesA);
  // As LibTorch's InsertObservers does: an attribute added to the shared
  // type, with a value on the instance it reached only.
  t.a.register_module("_observer_0", make(t.cu, "Observer"));
  REQUIRE(t.b._ivalue()->slots().size() < t.b.type()->numAttributes());
  auto all = jit::module_instances(t.root);
  CHECK(paths(all) ==
        std::vector<std::string>{"", "a", "a.inner", "a._observer_0", "b", "b.inner"});
}

TEST_CASE("jit complete_shared_observers: DenseNet's sibling without observers", "[jit]") {
  Tree t(kUsesA);
  t.a.register_module("_observer_0", make(t.cu, "Observer"));
  CHECK(jit::complete_shared_observers(t.root, is_observer) == 1);
  auto all = jit::module_instances(t.root);
  CHECK(paths(all) == std::vector<std::string>{"", "a", "a.inner", "a._observer_0", "b", "b.inner",
                                               "b._observer_0"});
  CHECK(all[6].module._ivalue() != all[3].module._ivalue());  // a copy, not shared
  CHECK(all[6].module.type() == all[3].module.type());
  CHECK(jit::complete_shared_observers(t.root, is_observer) == 0);  // nothing left to do
}

TEST_CASE("jit used_module_paths: the instances the inlined forward reads", "[jit]") {
  CHECK(jit::used_module_paths(Tree(kUsesA).root) == std::vector<std::string>{"a", "a.inner"});
  CHECK(jit::used_module_paths(Tree(kUsesAB).root) ==
        std::vector<std::string>{"a", "a.inner", "b", "b.inner"});
}

TEST_CASE("jit complete_unused_instances: DenseNet blocks sharing a type", "[jit]") {
  SECTION("an unused instance gets its sibling's values") {
    Tree t(kUsesA);
    t.a.register_attribute("_scale", c10::FloatType::get(), 0.5);
    REQUIRE(t.b._ivalue()->slots().size() < t.b.type()->numAttributes());
    CHECK(jit::complete_unused_instances(t.root).empty());
    REQUIRE(t.b._ivalue()->slots().size() == t.b.type()->numAttributes());
    CHECK(t.b.attr("_scale").toDouble() == 0.5);
  }
  SECTION("a used incomplete instance is returned") {
    Tree t(kUsesAB);
    t.a.register_attribute("_scale", c10::FloatType::get(), 0.5);
    CHECK(jit::complete_unused_instances(t.root) == std::vector<std::string>{"b"});
    CHECK(t.b._ivalue()->slots().size() < t.b.type()->numAttributes());  // left as it was
  }
}

TEST_CASE("jit fold_training_flags: self.training of an eval model is false", "[jit]") {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  Module m = make(cu, "Net");
  m.define(
      "def forward(self, x):\n"
      "  if self.training:\n"
      "    return x * 2.0\n"
      "  return x + 1.0\n");
  auto g = m.get_method("forward").graph()->copy();
  FileCheck().check("prim::GetAttr[name=\"training\"]")->check("prim::If")->run(*g);
  CHECK(jit::fold_training_flags(*g) == 1);
  jit::fold_constants(g);
  FileCheck()
      .check_not("training")
      ->check_not("prim::If")
      ->check("aten::add")
      ->check_not("aten::mul")
      ->run(*g);
}

TEST_CASE("jit specialize_branches: constant, training and data-decided ifs", "[jit]") {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  Module m = make(cu, "Net");
  m.define(
      "def forward(self, x):\n"
      "  if self.training:\n"
      "    x = x * 2.0\n"
      "  if bool(x.sum() > 0):\n"
      "    x = torch.relu(x)\n"
      "  else:\n"
      "    x = torch.sigmoid(x)\n"
      "  for i in range(2):\n"
      "    if i == 0:\n"
      "      x = torch.tanh(x)\n"
      "    else:\n"
      "      x = torch.exp(x)\n"
      "  return x\n");
  auto r = tq::specialize_branches(m, {torch::ones({2, 3})});
  CHECK(r.ran);
  CHECK(r.removed == 2);  // self.training without data; x.sum() > 0 from the run
  CHECK(r.kept == 1);     // i == 0 goes both ways
  FileCheck()
      .check_not("taoquant::record_branch")
      ->check("aten::relu")
      ->check_not("aten::sigmoid")
      ->check("prim::Loop")
      ->check("prim::If")
      ->check("aten::tanh")
      ->check("aten::exp")
      ->run(*m.get_method("forward").graph());
  auto y = m.forward({torch::ones({1})}).toTensor();
  CHECK(y.item<float>() == Approx(std::exp(std::tanh(1.0f))));
}

// ResNet's AdaptiveAvgPool2d asserts in list_with_default on every call:
// such asserts are decided without a run; one the sample may not reach is
// left to the run, which decides it only when reached.
TEST_CASE("jit specialize_branches: asserts every call passes need no run", "[jit]") {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto with_pool = [&](const std::string& name, const std::string& forward) {
    Module pool = make(cu, "Pool" + name);
    pool.define(
        "def forward(self, x):\n"
        "  assert x.dim() == 2, 'pool: 2-d input'\n"
        "  return x * 2.0\n");
    Module m = make(cu, name);
    m.register_module("pool", pool);
    m.define(forward);
    return m;
  };
  auto raises_in = [](Module& m, const char* method_of) {
    auto g = method_of[0] ? m.attr(method_of).toModule().get_method("forward").graph()
                          : m.get_method("forward").graph();
    return !jit::find_nodes(g->block(), [](torch::jit::Node* n) {
              return n->kind() == torch::jit::prim::RaiseException;
            }).empty();
  };
  const auto x = torch::ones({2, 3});

  SECTION("on every call's path (forward and a method it always calls): decided, no run") {
    Module m = with_pool("Always",
                         "def forward(self, x):\n"
                         "  assert x.size(1) == 3, 'three features'\n"
                         "  return self.pool.forward(x) + 1.0\n");
    auto r = tq::specialize_branches(m, {x});
    CHECK_FALSE(r.ran);
    CHECK(r.removed == 2);
    CHECK(r.kept == 0);
    CHECK_FALSE(raises_in(m, ""));
    CHECK_FALSE(raises_in(m, "pool"));
    CHECK(m.forward({x}).toTensor().equal(x * 2.0 + 1.0));
  }
  SECTION("behind a data-dependent branch: left to the run") {
    Module m = with_pool("Behind",
                         "def forward(self, x):\n"
                         "  if bool(x.sum() > 0):\n"
                         "    assert x.size(1) == 3, 'three features'\n"
                         "    x = self.pool.forward(x)\n"
                         "  return x\n");
    auto r = tq::specialize_branches(m, {x});
    CHECK(r.ran);
    CHECK(r.removed == 3);  // the branch and both asserts, from the run
    CHECK_FALSE(raises_in(m, ""));
    CHECK_FALSE(raises_in(m, "pool"));
  }
  SECTION("behind a branch the sample does not take: kept") {
    Module m = with_pool("NotTaken",
                         "def forward(self, x):\n"
                         "  if bool(x.sum() < 0):\n"
                         "    assert x.size(1) == 4, 'four features'\n"
                         "    x = self.pool.forward(x)\n"
                         "  return x\n");
    auto r = tq::specialize_branches(m, {x});
    CHECK(r.ran);
    CHECK(r.removed == 1);        // the branch, from the run
    CHECK(r.kept == 2);           // its assert and the pool's: never reached
    CHECK(raises_in(m, "pool"));  // the pool's assert was never reached: kept
  }
}

namespace {

std::vector<c10::IValue> call_op(const char* name, std::vector<c10::IValue> args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  torch::jit::Stack stack(std::move(args));
  op.callBoxed(&stack);
  return stack;
}

tq::ObserverTemplate minmax_template() {
  tq::ObserverTemplate t;
  t.observer = "minmax";
  t.cfg.dtype = tq::DType::kUInt8;
  return t;
}

}  // namespace

TEST_CASE("jit op scope: the observer table is the observe op's context while alive", "[jit]") {
  {
    tq::ObserverTable outer;
    const int64_t id = outer.add_slot(outer.add_template(minmax_template()), "x:input");
    CHECK(tq::ObserverTable::active() == &outer);
    {
      tq::ObserverTable inner;
      CHECK(tq::ObserverTable::active() == &inner);
      CHECK_THROWS(call_op("taoquant::observe", {torch::ones({2}), id}));  // not bound in inner
    }
    CHECK(tq::ObserverTable::active() == &outer);
    call_op("taoquant::observe", {torch::tensor({-1.0f, 3.0f}), id});
    CHECK(outer.slots().at(0)->calls == 1);
    auto qp = call_op("taoquant::qparams", {id});
    CHECK(qp.at(0).toTensor().item<float>() == Approx(4.0f / 255));
  }
  CHECK(tq::ObserverTable::active() == nullptr);
  CHECK_THROWS_WITH(call_op("taoquant::observe", {torch::ones({2}), int64_t{0}}),
                    Catch::Contains("outside a calibration"));
}

namespace {

// fc: a Linear-like module (aten::linear on its weight and bias).
Module linear_net(const CU& cu) {
  Module fc = make(cu, "Linear");
  fc.register_parameter("weight", torch::arange(6, torch::kFloat).reshape({2, 3}) / 6, false);
  fc.register_parameter("bias", torch::tensor({0.5f, -0.5f}), false);
  fc.define("def forward(self, x):\n  return torch.linear(x, self.weight, self.bias)\n");
  Module net = make(cu, "Net");
  net.register_module("fc", fc);
  net.define("def forward(self, x):\n  return torch.relu(self.fc.forward(x))\n");
  return net;
}

}  // namespace

TEST_CASE("jit capture: taps on each layer's input and output, scoped to the run", "[jit]") {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  Module net = linear_net(cu);
  const at::Tensor x = torch::tensor({{1.0f, 2.0f, 3.0f}, {-1.0f, 0.0f, 1.0f}});
  tq::CaptureOptions opts;
  opts.outputs = true;
  opts.samples = [](const std::string&, const at::Tensor&) { return int64_t{1}; };
  auto cap = tq::capture_layers(net, {x}, opts);
  REQUIRE(cap.inputs.count("fc"));
  CHECK(cap.inputs["fc"].equal(x.narrow(0, 0, 1)));
  const at::Tensor y = at::linear(x, net.attr("fc").toModule().attr("weight").toTensor(),
                                  net.attr("fc").toModule().attr("bias").toTensor());
  CHECK(cap.outputs["fc"].allclose(y.narrow(0, 0, 1)));
  CHECK(cap.model_output.toTensor().allclose(at::relu(y)));
  // The model itself has no taps, and a tap outside a capture passes through.
  FileCheck().check_not("taoquant::tap")->run(*net.get_method("forward").graph());
  CHECK(call_op("taoquant::tap", {x, int64_t{0}}).at(0).toTensor().equal(x));
}

TEST_CASE("jit quantization passes: observers, quant-dequant and finalize on a Linear", "[jit]") {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  Module net = linear_net(cu);
  tq::ObserverTable table;
  auto w = minmax_template();
  w.weight = true;
  w.cfg.dtype = tq::DType::kInt8;
  w.cfg.symmetric = true;
  jit::QConfigs qc;
  qc[""] = std::make_tuple(table.make_module(table.add_template(minmax_template())),
                           table.make_module(table.add_template(w)));
  Module observed = jit::insert_observers(net, qc, jit::QuantMode::kStatic);
  FileCheck().check("taoquant::observe")->run(*jit::inlined_graph(observed));
  table.bind(observed);
  REQUIRE(table.find_label("fc:weight"));
  tq::NoGraphOptimization no_opt;
  torch::NoGradGuard ng;
  const at::Tensor x = torch::tensor({{1.0f, 2.0f, 3.0f}, {-1.0f, 0.0f, 1.0f}});
  Module fc = observed.attr("fc").toModule();
  const at::Tensor ref =
      at::relu(at::linear(x, fc.attr("weight").toTensor(), fc.attr("bias").toTensor()));
  observed.forward({x});
  Module q = jit::insert_quant_dequant(observed, jit::QuantMode::kStatic);
  FileCheck().check("aten::quantize_per_tensor")->run(*jit::inlined_graph(q));
  q = jit::finalize(q, jit::QuantMode::kStatic);
  FileCheck()
      .check("quantized::linear")
      ->check_not("aten::linear")
      ->run(*q.get_method("forward").graph());
  CHECK(q.forward({x}).toTensor().allclose(ref, 0, 0.05));
}

TEST_CASE("jit fold_conv_batchnorm: a Conv2d+BatchNorm2d pair becomes one conv", "[jit]") {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::manual_seed(0);
  Module conv = make(cu, "torch.nn.modules.conv.Conv2d");
  conv.register_parameter("weight", torch::randn({4, 3, 3, 3}), false);
  conv.register_parameter("bias", torch::randn({4}), false);
  conv.define("def forward(self, x):\n  return torch.conv2d(x, self.weight, self.bias)\n");
  Module bn = make(cu, "torch.nn.modules.batchnorm.BatchNorm2d");
  bn.register_parameter("weight", torch::rand({4}) + 0.5, false);
  bn.register_parameter("bias", torch::randn({4}), false);
  bn.register_buffer("running_mean", torch::randn({4}));
  bn.register_buffer("running_var", torch::rand({4}) + 0.5);
  bn.register_attribute("eps", c10::FloatType::get(), 1e-5);
  bn.define(
      "def forward(self, x):\n"
      "  return torch.batch_norm(x, self.weight, self.bias, self.running_mean, "
      "self.running_var, False, 0.1, self.eps, False)\n");
  Module net = make(cu, "Net");
  net.register_module("conv", conv);
  net.register_module("bn", bn);
  net.define("def forward(self, x):\n  return self.bn.forward(self.conv.forward(x))\n");
  const at::Tensor x = torch::randn({2, 3, 8, 8});
  const at::Tensor ref = net.forward({x}).toTensor();

  Module folded = jit::fold_conv_batchnorm(net);
  FileCheck()
      .check_count("prim::CallMethod", 1, /*exactly=*/true)
      ->check_not("batch_norm")
      ->run(*folded.get_method("forward").graph());
  FileCheck().check("prim::CallMethod")->run(*net.get_method("forward").graph());  // a copy
  CHECK(folded.forward({x}).toTensor().allclose(ref, 1e-4, 1e-4));
  CHECK_FALSE(folded.attr("conv").toModule().attr("weight").toTensor().equal(
      conv.attr("weight").toTensor()));
}
