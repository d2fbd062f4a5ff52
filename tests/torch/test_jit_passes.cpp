// Graph passes on IR snippets (tq::jit, lib/src/torch/jit/): each snippet is
// parsed with LibTorch's IR parser, rewritten by one pass, and the result
// checked with LibTorch's FileCheck or by reading the nodes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/script.h>

#include "taoquant/jit.h"

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::testing::FileCheck;
namespace jit = tq::jit;

namespace {

std::shared_ptr<Graph> parse(const std::string& ir) {
  auto g = std::make_shared<Graph>();
  torch::jit::parseIR(ir, g.get());
  return g;
}

std::vector<std::string> kinds(const std::vector<Node*>& nodes) {
  std::vector<std::string> out;
  for (Node* n : nodes) out.push_back(n->kind().toQualString());
  return out;
}

Node* first(Graph& g, const std::string& kind) {
  auto nodes =
      jit::find_nodes(g.block(), [&](Node* n) { return kind == n->kind().toQualString(); });
  REQUIRE(!nodes.empty());
  return nodes.front();
}

// A loop whose body holds an if whose branches hold a relu and a sigmoid.
const char* kNested = R"IR(
graph(%x : Tensor, %c : bool, %n : int):
  %y : Tensor = prim::Loop(%n, %c, %x)
    block0(%i : int, %a : Tensor):
      %b : Tensor = prim::If(%c)
        block0():
          %r : Tensor = aten::relu(%a)
          -> (%r)
        block1():
          %s : Tensor = aten::sigmoid(%a)
          -> (%s)
      -> (%c, %b)
  %z : Tensor = aten::tanh(%y)
  return (%z)
)IR";

// Two calls of layer fc (the first inside an if), and conv, whose weight is
// read through an observe call.
const char* kLayers = R"IR(
graph(%self : Tensor, %x : Tensor, %c : bool):
  %none : NoneType = prim::Constant()
  %id : int = prim::Constant[value=3]()
  %fc : Tensor = prim::GetAttr[name="fc"](%self)
  %w : Tensor = prim::GetAttr[name="weight"](%fc)
  %blk : Tensor = prim::GetAttr[name="block"](%self)
  %conv : Tensor = prim::GetAttr[name="conv"](%blk)
  %cw : Tensor = prim::GetAttr[name="weight"](%conv)
  %ow : Tensor = taoquant::observe(%cw, %id)
  %h : Tensor = prim::If(%c)
    block0():
      %y1 : Tensor = aten::linear(%x, %w, %none)
      -> (%y1)
    block1():
      -> (%x)
  %y2 : Tensor = aten::linear(%h, %w, %none)
  %y3 : Tensor = aten::conv2d(%y2, %ow, %none)
  %y4 : Tensor = aten::conv_transpose2d(%y3, %cw)
  return (%y4)
)IR";

}  // namespace

TEST_CASE("jit walker: visits nodes in nested blocks, each after its sub-blocks", "[jit]") {
  auto g = parse(kNested);
  std::vector<Node*> seen;
  jit::for_each_node(g->block(), [&](Node* n) { seen.push_back(n); });
  CHECK(kinds(seen) == std::vector<std::string>{"aten::relu", "aten::sigmoid", "prim::If",
                                                "prim::Loop", "aten::tanh"});
}

TEST_CASE("jit walker: the visited node may be destroyed", "[jit]") {
  auto g = parse(kNested);
  size_t removed = 0;
  jit::for_each_node(g->block(), [&](Node* n) {
    if (n->kind() != c10::Symbol::fromQualString("aten::relu") &&
        n->kind() != c10::Symbol::fromQualString("aten::tanh"))
      return;
    n->output()->replaceAllUsesWith(n->input(0));
    n->destroy();
    ++removed;
  });
  CHECK(removed == 2);
  FileCheck().check("aten::sigmoid")->check_not("aten::relu")->check_not("aten::tanh")->run(*g);
}

TEST_CASE("jit walker: find_nodes is pre-order and a snapshot", "[jit]") {
  auto g = parse(kNested);
  auto all = jit::find_nodes(g->block(), [](Node*) { return true; });
  CHECK(kinds(all) == std::vector<std::string>{"prim::Loop", "prim::If", "aten::relu",
                                               "aten::sigmoid", "aten::tanh"});
  CHECK(jit::has_node(g->block(), "aten::sigmoid"));
  CHECK_FALSE(jit::has_node(g->block(), "aten::conv2d"));
}

TEST_CASE("jit attr_path: spells a GetAttr chain from a graph input", "[jit]") {
  auto g = parse(R"IR(
graph(%self : Tensor):
  %a : Tensor = prim::GetAttr[name="layer1"](%self)
  %b : Tensor = prim::GetAttr[name="conv"](%a)
  %k : Tensor = prim::Constant()
  %c : Tensor = prim::GetAttr[name="weight"](%k)
  return (%b, %c)
)IR");
  CHECK(jit::attr_path(g->outputs()[0]) == std::optional<std::string>("layer1.conv"));
  CHECK(jit::attr_path(g->inputs()[0]) == std::optional<std::string>(""));
  CHECK_FALSE(jit::attr_path(g->outputs()[1]).has_value());  // not from a graph input
}

TEST_CASE("jit op info: layers, transposed layers, range-preserving ops", "[jit]") {
  CHECK(jit::op_info("aten::conv2d").role == jit::OpRole::kLayer);
  CHECK(jit::op_info("aten::conv2d").kind == tq::LayerKind::kConv2d);
  CHECK(jit::op_info("aten::conv1d").kind == tq::LayerKind::kConv1d);
  CHECK(jit::op_info("aten::linear").kind == tq::LayerKind::kLinear);
  CHECK(jit::op_info("aten::_convolution").role == jit::OpRole::kLayer);
  CHECK(jit::op_info("aten::conv_transpose2d").role == jit::OpRole::kTransposedLayer);
  CHECK(jit::op_info("aten::conv_transpose3d").kind == tq::LayerKind::kConvTranspose3d);
  for (const char* op : {"aten::relu", "aten::max_pool2d", "aten::flatten", "aten::reshape",
                         "aten::view", "prim::TupleIndex"})
    CHECK(jit::op_info(op).role == jit::OpRole::kPassesRanges);
  for (const char* op : {"aten::add", "aten::sigmoid", "aten::matmul", "taoquant::observe"})
    CHECK(jit::op_info(op).role == jit::OpRole::kOther);
}

TEST_CASE("jit op info: node predicates read the table", "[jit]") {
  auto g = parse(kLayers);
  CHECK(jit::is_layer_op(first(*g, "aten::linear")));
  CHECK(jit::is_layer_op(first(*g, "aten::conv2d")));
  CHECK_FALSE(jit::is_layer_op(first(*g, "aten::conv_transpose2d")));
  CHECK_FALSE(jit::passes_ranges(first(*g, "aten::linear")));
  auto g2 = parse(kNested);
  CHECK(jit::passes_ranges(first(*g2, "aten::relu")));
  CHECK_FALSE(jit::passes_ranges(first(*g2, "aten::sigmoid")));
}

TEST_CASE("jit op info: LibTorch's int8 kernel per layer kind", "[jit]") {
  auto conv = jit::quantized_op(tq::LayerKind::kConv2d);
  REQUIRE(conv);
  CHECK(std::string(conv->prepack) == "quantized::conv2d_prepack");
  CHECK(std::string(conv->overload) == "new");
  auto conv1 = jit::quantized_op(tq::LayerKind::kConv1d);
  REQUIRE(conv1);
  CHECK(std::string(conv1->overload).empty());
  auto linear = jit::quantized_op(tq::LayerKind::kLinear);
  REQUIRE(linear);
  CHECK(std::string(linear->op) == "quantized::linear");
  CHECK_FALSE(jit::quantized_op(tq::LayerKind::kConvTranspose2d));
}

TEST_CASE("jit layer sites: first call of each layer, nested blocks, observed weights", "[jit]") {
  auto g = parse(kLayers);
  auto sites = jit::layer_sites(*g);
  REQUIRE(sites.size() == 2);
  CHECK(sites[0].layer == "fc");
  CHECK(sites[0].op->owningBlock() != g->block());  // the call inside the if comes first
  CHECK(sites[1].layer == "block.conv");
  CHECK(std::string(sites[1].op->kind().toQualString()) == "aten::conv2d");
  CHECK(jit::layer_of(first(*g, "aten::conv_transpose2d")) ==
        std::optional<std::string>("block.conv"));
}

TEST_CASE("jit layer sites: an op whose weight is not a weight attribute has no layer", "[jit]") {
  auto g = parse(R"IR(
graph(%x : Tensor, %w : Tensor):
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::linear(%x, %w, %none)
  return (%y)
)IR");
  CHECK_FALSE(jit::layer_of(first(*g, "aten::linear")).has_value());
  CHECK(jit::layer_sites(*g).empty());
}

// nn.MultiheadAttention's packed projection as its inlined graph reads it:
// aten::linear on the module's in_proj_weight (observed, as in an observed
// model), next to a planned Linear and a linear on a computed weight.
TEST_CASE("jit unowned_weight: a layer call on an attribute that is no layer's weight", "[jit]") {
  auto g = parse(R"IR(
graph(%self : Tensor, %x : Tensor):
  %id : int = prim::Constant[value=1]()
  %enc : Tensor = prim::GetAttr[name="encoder"](%self)
  %attn : Tensor = prim::GetAttr[name="self_attn"](%enc)
  %w : Tensor = prim::GetAttr[name="in_proj_weight"](%attn)
  %b : Tensor = prim::GetAttr[name="in_proj_bias"](%attn)
  %ow : Tensor = taoquant::observe(%w, %id)
  %out : Tensor = prim::GetAttr[name="out_proj"](%attn)
  %ww : Tensor = prim::GetAttr[name="weight"](%out)
  %t : Tensor = aten::t(%ww)
  %y1 : Tensor = aten::linear(%x, %ow, %b)
  %y2 : Tensor = aten::linear(%y1, %ww, %b)
  %y3 : Tensor = aten::linear(%y2, %t, %b)
  %y4 : Tensor = aten::relu(%y3)
  return (%y4)
)IR");
  auto linears = jit::find_nodes(
      g->block(), [](Node* n) { return std::string(n->kind().toQualString()) == "aten::linear"; });
  REQUIRE(linears.size() == 3);
  CHECK(jit::unowned_weight(linears[0]) ==
        std::optional<std::string>("encoder.self_attn.in_proj_weight"));
  CHECK_FALSE(jit::layer_of(linears[0]).has_value());
  CHECK_FALSE(jit::unowned_weight(linears[1]).has_value());  // out_proj owns it
  CHECK(jit::layer_of(linears[1]) == std::optional<std::string>("encoder.self_attn.out_proj"));
  CHECK_FALSE(jit::unowned_weight(linears[2]).has_value());               // not an attribute
  CHECK_FALSE(jit::unowned_weight(first(*g, "aten::relu")).has_value());  // not a layer op
}

TEST_CASE("jit call insertion: a call on a layer's input", "[jit]") {
  auto g = parse(kLayers);
  auto sites = jit::layer_sites(*g);
  Node* op = sites[1].op;
  Node* tap = jit::insert_call_on_input(op, 0, "taoquant::tap", 7);
  CHECK(op->input(0) == tap->output());
  CHECK(tap->next() == op);
  CHECK(tap->input(1)->node()->i(torch::jit::attr::value) == 7);
  FileCheck()
      .check("aten::linear(%")
      ->check("aten::linear(%")
      ->check("taoquant::tap(%")
      ->check_next("aten::conv2d")
      ->run(*g);
}

TEST_CASE("jit call insertion: a call on a layer's output, and its removal", "[jit]") {
  auto g = parse(kLayers);
  Node* conv = first(*g, "aten::conv2d");
  Node* tap = jit::insert_call_on_output(conv, "taoquant::tap", 9);
  CHECK(tap->input(0) == conv->output());
  REQUIRE(conv->output()->uses().size() == 1);  // only the tap reads the conv now
  CHECK(first(*g, "aten::conv_transpose2d")->input(0) == tap->output());
  FileCheck()
      .check("aten::conv2d")
      ->check("taoquant::tap")
      ->check("aten::conv_transpose2d")
      ->run(*g);
  jit::remove_call(tap);
  CHECK(first(*g, "aten::conv_transpose2d")->input(0) == conv->output());
  FileCheck().check_not("taoquant::tap")->run(*g);
}

TEST_CASE("jit inline_branch: an if becomes the nodes of the branch taken", "[jit]") {
  auto g = parse(kNested);
  jit::inline_branch(first(*g, "prim::If"), 1);
  FileCheck().check_not("prim::If")->check("aten::sigmoid")->check_not("aten::relu")->run(*g);
  auto g2 = parse(kNested);
  jit::inline_branch(first(*g2, "prim::If"), 0);
  FileCheck().check("aten::relu")->check_not("aten::sigmoid")->run(*g2);
}

TEST_CASE("jit fold_constants: an if on a constant keeps its branch", "[jit]") {
  auto g = parse(R"IR(
graph(%x : Tensor):
  %c : bool = prim::Constant[value=0]()
  %y : Tensor = prim::If(%c)
    block0():
      %r : Tensor = aten::relu(%x)
      -> (%r)
    block1():
      %s : Tensor = aten::sigmoid(%x)
      -> (%s)
  return (%y)
)IR");
  jit::fold_constants(g);
  FileCheck().check_not("prim::If")->check("aten::sigmoid")->check_not("aten::relu")->run(*g);
}

TEST_CASE("jit dequantize_tuple_elements: a constructed tuple", "[jit]") {
  // nn.MultiheadAttention returns (attn_output, None); InsertQuantDeQuant
  // dequantizes the tuple (ViT).
  auto g = parse(R"IR(
graph(%q : Tensor):
  %none : NoneType = prim::Constant()
  %t : (Tensor, NoneType) = prim::TupleConstruct(%q, %none)
  %d : (Tensor, NoneType) = aten::dequantize(%t)
  return (%d)
)IR");
  CHECK(jit::dequantize_tuple_elements(*g) == 1);
  FileCheck()
      .check("aten::dequantize(%q)")
      ->check("prim::TupleConstruct")
      ->check_not("aten::dequantize")
      ->run(*g);
  CHECK(g->outputs()[0]->node()->kind() == torch::jit::prim::TupleConstruct);
  CHECK(g->outputs()[0]->node()->input(1)->type()->kind() == c10::TypeKind::NoneType);
}

TEST_CASE("jit dequantize_tuple_elements: a NamedTuple keeps its type", "[jit]") {
  // Scripted GoogLeNet returns GoogLeNetOutputs(logits, None, None); a plain
  // tuple in its place makes the saved artifact fail to load.
  auto g = parse(R"IR(
graph(%q : Tensor):
  %none : NoneType = prim::Constant()
  %t : (Tensor, NoneType) = prim::TupleConstruct(%q, %none)
  %d : (Tensor, NoneType) = aten::dequantize(%t)
  return (%d)
)IR");
  auto named = c10::TupleType::createNamed(
      c10::QualifiedName("Outputs"), std::vector<std::string>{"logits", "aux"},
      std::vector<c10::TypePtr>{c10::TensorType::get(),
                                c10::OptionalType::create(c10::TensorType::get())});
  Node* construct = g->outputs()[0]->node()->input(0)->node();
  construct->output()->setType(named);
  g->outputs()[0]->setType(named);
  CHECK(jit::dequantize_tuple_elements(*g) == 1);
  Node* rebuilt = g->outputs()[0]->node();
  REQUIRE(rebuilt->kind() == torch::jit::prim::TupleConstruct);
  auto type = rebuilt->output()->type()->cast<c10::TupleType>();
  REQUIRE(type);
  REQUIRE(type->schema());
  CHECK(type->str() == "Outputs");
  CHECK(type->schema()->arguments().at(0).name() == "logits");
  FileCheck().check("aten::dequantize(%q)")->check("prim::TupleConstruct")->run(*g);
}

TEST_CASE("jit dequantize_tuple_elements: a tuple from elsewhere is unpacked", "[jit]") {
  auto g = parse(R"IR(
graph(%t : (Tensor, Tensor), %c : bool):
  %y : (Tensor, Tensor) = prim::If(%c)
    block0():
      %d : (Tensor, Tensor) = aten::dequantize(%t)
      -> (%d)
    block1():
      -> (%t)
  return (%y)
)IR");
  CHECK(jit::dequantize_tuple_elements(*g) == 1);
  FileCheck()
      .check("prim::If")
      ->check("prim::TupleUnpack(%t)")
      ->check_count("aten::dequantize", 2, /*exactly=*/true)
      ->check("prim::TupleConstruct")
      ->run(*g);
}

TEST_CASE("jit dequantize_tuple_elements: tensor dequantize is left alone", "[jit]") {
  auto g = parse(R"IR(
graph(%q : Tensor):
  %d : Tensor = aten::dequantize(%q)
  return (%d)
)IR");
  CHECK(jit::dequantize_tuple_elements(*g) == 0);
  FileCheck().check("aten::dequantize(%q)")->check_not("prim::TupleConstruct")->run(*g);
}

namespace {
struct Ctx {
  int value;
};
using CtxScope = jit::OpScope<Ctx>;
}  // namespace

TEST_CASE("jit op scope: nested scopes, the innermost is current", "[jit]") {
  Ctx a{1}, b{2};
  CHECK(CtxScope::current() == nullptr);
  {
    CtxScope outer(a);
    CHECK(CtxScope::current()->value == 1);
    {
      CtxScope inner(b);
      CHECK(CtxScope::current()->value == 2);
      CHECK(CtxScope::depth() == 2);
    }
    CHECK(CtxScope::current()->value == 1);
  }
  CHECK(CtxScope::current() == nullptr);
  CHECK(CtxScope::depth() == 0);
}

TEST_CASE("jit op scope: an exception unwinds the scope", "[jit]") {
  Ctx a{1}, b{2};
  CtxScope outer(a);
  try {
    CtxScope inner(b);
    throw std::runtime_error("op failed");
  } catch (const std::runtime_error&) {
  }
  REQUIRE(CtxScope::current() != nullptr);
  CHECK(CtxScope::current()->value == 1);
  CHECK(CtxScope::depth() == 1);
}

TEST_CASE("jit op scope: scopes may end out of order, other threads see none", "[jit]") {
  Ctx a{1}, b{2};
  auto outer = std::make_unique<CtxScope>(a);
  auto inner = std::make_unique<CtxScope>(b);
  outer.reset();  // e.g. an older session destroyed after a newer one started
  CHECK(CtxScope::current()->value == 2);
  Ctx* seen = &a;
  std::thread([&] { seen = CtxScope::current(); }).join();
  CHECK(seen == nullptr);
  inner.reset();
  CHECK(CtxScope::current() == nullptr);
}

TEST_CASE("jit replace_call_with_graph: an observe call becomes a fake-quant snippet", "[jit]") {
  auto g = parse(kLayers);
  Node* obs = first(*g, "taoquant::observe");
  auto body = parse(R"IR(
graph(%x : Tensor, %scale : float, %zp : int):
  %y : Tensor = aten::fake_quantize_per_tensor_affine(%x, %scale, %zp, %zp, %zp)
  return (%y)
)IR");
  torch::jit::Value* y = jit::replace_call_with_graph(obs, *body, {0.25, int64_t{3}});
  CHECK(first(*g, "aten::conv2d")->input(1) == y);
  FileCheck()
      .check_not("taoquant::observe")
      ->check("prim::Constant[value=0.25]")
      ->check("prim::Constant[value=3]")
      ->check("aten::fake_quantize_per_tensor_affine(")
      ->check("aten::conv2d")
      ->run(*g);
}

TEST_CASE("jit exact_float_constants: a scale of 1e10 or more survives the saved code", "[jit]") {
  // LibTorch's printer writes a whole float in [1e10, 1e17) with no point:
  // the saved code read 771358130176.0 back as an int and did not compile.
  torch::jit::Module m("M");
  m.define(R"JIT(
    def forward(self, x: Tensor) -> Tensor:
        return torch.quantize_per_tensor(x, 771358130176.0, 0, 12).dequantize() * 3.5e16 + 0.25
  )JIT");
  const auto save_and_load = [&] {
    std::stringstream ss;
    m.save(ss);
    return torch::jit::load(ss);
  };
  CHECK_THROWS(save_and_load());  // LibTorch alone: the code does not compile
  CHECK(jit::exact_float_constants(m) == 2);
  FileCheck().check_not("771358130176.")->check("aten::mul")->run(*m.get_method("forward").graph());
  CHECK(jit::exact_float_constants(m) == 0);  // nothing left to rewrite
  auto loaded = save_and_load();
  const at::Tensor x = torch::tensor({1e12f, 3e12f});
  CHECK(at::equal(loaded.forward({x}).toTensor(), m.forward({x}).toTensor()));
  // The values are the same doubles: c * 2^k is exact.
  auto graph = loaded.get_method("forward").graph()->copy();
  torch::jit::ConstantPropagation(graph);
  std::vector<double> values;
  for (Node* n : graph->nodes())
    if (n->kind() == torch::jit::prim::Constant && n->output()->type()->cast<c10::FloatType>())
      values.push_back(torch::jit::toIValue(n->output())->toDouble());
  CHECK(std::count(values.begin(), values.end(), 771358130176.0) == 1);
  CHECK(std::count(values.begin(), values.end(), 3.5e16) == 1);
}
