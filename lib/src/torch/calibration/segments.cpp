// A model's forward run in pieces: the inlined graph is cut before the op of
// each of some layers, and each piece is a graph of its own whose inputs are
// the values that cross the cut before it and whose outputs are those that
// cross the cut after it. Running piece k on the values at cut k-1 gives the
// values at cut k, so a caller that keeps those values for every batch runs
// each piece once over the data, not the whole prefix again for every cut
// (sequential GPTQ). Attribute reads and constants are never carried across
// a cut: each piece reads them itself, so a weight set between two pieces'
// runs is the weight the later piece uses.
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"

namespace tq {

namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool rematerialized(const Value* v) {
  const auto k = v->node()->kind();
  return k == c10::prim::GetAttr || k == c10::prim::Constant;
}

// The node of the top-level block that `n` is (or is nested in).
Node* top_of(Node* n, const torch::jit::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

// The inlined forward graph's top-level nodes, with each value's definition
// and last use as positions among them.
struct TopLevel {
  Graph& g;
  std::vector<Node*> nodes;
  std::map<const Node*, size_t> pos;
  std::map<const Value*, size_t> last;  // memo of last_use
  explicit TopLevel(Graph& graph) : g(graph) {
    for (Node* n : g.nodes()) pos[n] = nodes.size(), nodes.push_back(n);
  }
  size_t end() const { return nodes.size(); }
  // Through attribute reads: an object read before a cut whose attributes
  // are read after it is needed after it (each piece reads them anew).
  size_t last_use(Value* v) {
    auto it = last.find(v);
    if (it != last.end()) return it->second;
    size_t u = 0;
    for (const auto& use : v->uses()) {
      if (use.user == g.return_node()) {
        u = end();
        break;
      }
      u = std::max(u, pos.at(top_of(use.user, g.block())));
      for (Value* o : use.user->outputs())
        if (rematerialized(o)) u = std::max(u, last_use(o));
    }
    return last[v] = u;
  }
  // The values defined before position c and used at or after it.
  std::vector<Value*> crossing(size_t c) {
    std::vector<Value*> out;
    auto keep = [&](Value* v) {
      if (!rematerialized(v) && last_use(v) >= c) out.push_back(v);
    };
    for (Value* v : g.inputs()) keep(v);
    for (size_t i = 0; i < c; ++i)
      for (Value* v : nodes[i]->outputs()) keep(v);
    return out;
  }
};

// A graph of nodes [from, to) whose inputs are `in` and whose output is the
// tuple of `out`; attribute reads and constants used from before `from`
// are copied in.
std::shared_ptr<Graph> piece_of(const TopLevel& t, size_t from, size_t to,
                                const std::vector<Value*>& in, const std::vector<Value*>& out) {
  auto piece = std::make_shared<Graph>();
  std::unordered_map<Value*, Value*> env;
  for (Value* v : in) env[v] = piece->addInput()->setType(v->type());
  auto copy_node = [&](Node* n, const std::function<Value*(Value*)>& map) {
    Node* copy = piece->appendNode(piece->createClone(n, map));
    for (size_t i = 0; i < copy->outputs().size(); ++i) env[n->outputs()[i]] = copy->outputs()[i];
  };
  std::function<Value*(Value*)> map = [&](Value* v) -> Value* {
    if (!env.count(v)) {
      TORCH_CHECK(rematerialized(v), "ForwardPieces: value %", v->debugName(),
                  " crosses a cut but was not carried");
      copy_node(v->node(), map);
    }
    return env.at(v);
  };
  for (size_t i = from; i < to; ++i) copy_node(t.nodes[i], map);
  std::vector<Value*> outs;
  for (Value* v : out) outs.push_back(map(v));
  // A function returns one value: the crossing values as a tuple.
  piece->registerOutput(piece->insertNode(piece->createTuple(outs))->output());
  return piece;
}

}  // namespace

struct ForwardPieces::Impl {
  torch::jit::Module m;
  std::vector<std::unique_ptr<torch::jit::GraphFunction>> pieces;
};

ForwardPieces::ForwardPieces(const torch::jit::Module& model, const std::set<std::string>& layers)
    : impl_(new Impl) {
  impl_->m = model.clone(/*inplace=*/true);
  auto g = impl_->m.get_method("forward").graph();
  jit::inline_calls(*g);
  std::map<std::string, std::vector<Node*>> sites;
  for (Node* n : jit::find_nodes(g->block(), jit::is_layer_op))
    if (auto l = jit::layer_of(n); l && layers.count(*l)) sites[*l].push_back(n);
  for (const auto& l : layers) {
    auto s = sites.find(l);
    if (s == sites.end())
      why_ = "layer " + l + " is not called in forward";
    else if (s->second.size() > 1)
      why_ = "layer " + l + " is called more than once";
    else if (s->second[0]->owningBlock() != g->block())
      why_ = "layer " + l + " is called inside a loop or a branch";
    if (!why_.empty()) return;
  }
  TopLevel t(*g);
  std::vector<size_t> cuts;
  for (const auto& [l, s] : sites) cuts.push_back(t.pos.at(s[0]));
  std::sort(cuts.begin(), cuts.end());
  std::vector<Value*> in(g->inputs().begin(), g->inputs().end());
  size_t from = 0;
  for (size_t c : cuts) {
    order_.push_back(*jit::layer_of(t.nodes[c]));
    std::vector<Value*> out = t.crossing(c);
    const auto x = std::find(out.begin(), out.end(), t.nodes[c]->input(0));
    TORCH_CHECK(x != out.end(), "ForwardPieces: the input of ", order_.back(),
                " does not cross its cut");
    input_index_.push_back(static_cast<size_t>(x - out.begin()));
    impl_->pieces.push_back(std::make_unique<torch::jit::GraphFunction>(
        c10::QualifiedName("piece" + std::to_string(impl_->pieces.size())),
        piece_of(t, from, c, in, out), nullptr));
    in = std::move(out);
    from = c;
  }
}

ForwardPieces::~ForwardPieces() = default;

torch::jit::Module& ForwardPieces::model() {
  return impl_->m;
}

std::vector<c10::IValue> ForwardPieces::start(const std::vector<at::Tensor>& inputs) const {
  std::vector<c10::IValue> v{impl_->m._ivalue()};
  v.insert(v.end(), inputs.begin(), inputs.end());
  return v;
}

void ForwardPieces::advance(size_t k, std::vector<c10::IValue>& values) const {
  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;
  torch::jit::Stack stack(std::make_move_iterator(values.begin()),
                          std::make_move_iterator(values.end()));
  impl_->pieces.at(k)->run(stack);
  const auto& out = stack.at(0).toTupleRef().elements();
  values.assign(out.begin(), out.end());
}

}  // namespace tq
