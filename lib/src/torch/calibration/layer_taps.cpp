// Layer taps: which observer quantizes each layer's input, and the actual
// input tensor of each layer on a given batch. Both work on an inlined copy of
// the forward graph, where each conv/linear call is an aten op whose weight is
// read through a chain of prim::GetAttr nodes that spells the layer's path.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include "taoquant/calibration.h"

namespace tq {

namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;
namespace prim = torch::jit::prim;

// The capture in progress (one at a time). Output taps use ids offset by
// kOutputTap and keep as many samples as the same layer's input tap.
constexpr int64_t kOutputTap = int64_t{1} << 32;
struct TapState {
  const std::vector<std::string>* names = nullptr;
  const CaptureOptions* opts = nullptr;
  std::map<int64_t, at::Tensor> in, out;
  std::map<int64_t, int64_t> kept;  // samples kept per layer id
};
std::mutex g_tap_mutex;
TapState* g_taps = nullptr;

at::Tensor tap_op(const at::Tensor& x, int64_t id) {
  std::lock_guard<std::mutex> lock(g_tap_mutex);
  if (!g_taps) return x;
  const bool is_out = id >= kOutputTap;
  const int64_t lid = is_out ? id - kOutputTap : id;
  auto& dst = is_out ? g_taps->out : g_taps->in;
  if (dst.count(lid)) return x;  // a layer called twice: its first call
  const int64_t n = x.dim() > 0 ? x.size(0) : 0;
  int64_t keep = n;
  if (is_out) {
    auto k = g_taps->kept.find(lid);
    if (k != g_taps->kept.end()) keep = k->second;
  } else {
    if (g_taps->opts->samples && n > 0)
      keep = std::clamp<int64_t>(
          g_taps->opts->samples(g_taps->names->at(static_cast<size_t>(lid)), x), 1, n);
    g_taps->kept[lid] = keep;
  }
  at::Tensor t = x.detach();
  if (keep < n) t = t.narrow(0, 0, keep);
  dst[lid] = t.clone();
  return x;
}

TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def("tap(Tensor(a) x, int id) -> Tensor(a)", tap_op);
}

// "a.b.c" for GetAttr[c](GetAttr[b](GetAttr[a](self))); nullopt if the value
// is not such a chain.
std::optional<std::string> attr_path(Value* v) {
  std::string path;
  while (v->node()->kind() == prim::GetAttr) {
    const std::string& name = v->node()->s(torch::jit::attr::name);
    path = path.empty() ? name : name + "." + path;
    v = v->node()->input(0);
  }
  if (v->node()->kind() != prim::Param) return std::nullopt;
  return path;
}

bool is_layer_op(const Node* n) {
  static const std::set<std::string> kOps = {"aten::conv1d", "aten::conv2d", "aten::conv3d",
                                             "aten::_convolution", "aten::linear"};
  return kOps.count(n->kind().toQualString()) > 0;
}

bool is_observe(const Node* n) {
  return std::string(n->kind().toQualString()) == "taoquant::observe";
}

// Ops that carry their input's quantization through unchanged (LibTorch's
// "general ops" for static quantization): the observer of their input is the
// observer of their output.
bool passes_quantization(const Node* n) {
  static const std::set<std::string> kOps = {"aten::max_pool1d",
                                             "aten::max_pool2d",
                                             "aten::max_pool3d",
                                             "aten::adaptive_max_pool2d",
                                             "aten::avg_pool1d",
                                             "aten::avg_pool2d",
                                             "aten::avg_pool3d",
                                             "aten::adaptive_avg_pool1d",
                                             "aten::adaptive_avg_pool2d",
                                             "aten::adaptive_avg_pool3d",
                                             "aten::flatten",
                                             "aten::reshape",
                                             "aten::view",
                                             "aten::relu",
                                             "aten::relu_",
                                             "aten::dropout",
                                             "aten::dropout_",
                                             "aten::contiguous",
                                             "aten::permute",
                                             "aten::transpose",
                                             "aten::squeeze",
                                             "aten::unsqueeze",
                                             "aten::hardtanh",
                                             "aten::hardtanh_",
                                             "aten::clamp",
                                             "aten::detach",
                                             "aten::mean",
                                             "aten::upsample_nearest2d",
                                             "aten::__getitem__",
                                             "prim::TupleIndex",
                                             "prim::ListUnpack",
                                             "aten::chunk",
                                             "aten::select",
                                             "aten::slice",
                                             "aten::t"};
  return kOps.count(n->kind().toQualString()) > 0;
}

// The observer (its module path) that a value is quantized with: the
// observe call that produced it, or one that it feeds, looking back through
// quantization-transparent ops.
std::optional<std::string> observer_of(Value* v) {
  for (int depth = 0; depth < 64; ++depth) {
    Node* def = v->node();
    if (is_observe(def)) return attr_path(def->input(1)->node()->input(0));
    for (const auto& u : v->uses())
      if (is_observe(u.user)) return attr_path(u.user->input(1)->node()->input(0));
    if (!passes_quantization(def) || def->inputs().empty()) return std::nullopt;
    v = def->input(0);
  }
  return std::nullopt;
}

// The layer path of a conv/linear op: its weight's GetAttr chain, seen
// through a weight observer if there is one.
std::optional<std::string> layer_of(Node* n) {
  Value* w = n->input(1);
  if (is_observe(w->node())) w = w->node()->input(0);
  if (w->node()->kind() != prim::GetAttr || w->node()->s(torch::jit::attr::name) != "weight")
    return std::nullopt;
  return attr_path(w->node()->input(0));
}

template <typename F>
void for_each_layer_op(Block* b, F&& f) {
  for (Node* n : b->nodes()) {
    for (Block* sub : n->blocks()) for_each_layer_op(sub, f);
    if (is_layer_op(n))
      if (auto layer = layer_of(n)) f(n, *layer);
  }
}

bool has_calls(Block* b) {
  for (Node* n : b->nodes()) {
    if (n->kind() == prim::CallMethod || n->kind() == prim::CallFunction) return true;
    for (Block* sub : n->blocks())
      if (has_calls(sub)) return true;
  }
  return false;
}

std::shared_ptr<torch::jit::Graph> inlined_forward(const torch::jit::Module& m) {
  auto g = m.get_method("forward").graph()->copy();
  inline_everything(*g);
  return g;
}

}  // namespace

double tensor_sqnr_db(const at::Tensor& ref, const at::Tensor& x) {
  // One pass with double accumulators and no temporaries: the weights of a
  // large layer are megabytes, and this runs once per layer.
  TORCH_CHECK(ref.numel() == x.numel(), "tensor_sqnr_db: ", ref.numel(), " vs ", x.numel(),
              " elements");
  const at::Tensor r = ref.to(at::kFloat).contiguous(), y = x.to(at::kFloat).contiguous();
  const float* a = r.data_ptr<float>();
  const float* b = y.data_ptr<float>();
  double num = 0, den = 0;
  for (int64_t i = 0, n = r.numel(); i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += static_cast<double>(a[i]) * a[i];
    den += d * d;
  }
  if (den == 0) return INFINITY;
  return 10.0 * std::log10(num / std::max(den, 1e-300));
}

nlohmann::json activation_stats(const QParams& q, const std::string& observer) {
  return {{"observer", observer},
          {"min", q.min_val},
          {"max", q.max_val},
          {"clip_min", q.clip_min},
          {"clip_max", q.clip_max},
          {"scale", q.scale.at(0)},
          {"zero_point", q.zero_point.empty() ? 0 : q.zero_point.at(0)}};
}

nlohmann::json activation_histogram(const at::Tensor& x, const QParams& q, int64_t bins) {
  bins = std::clamp<int64_t>(bins, 1, 128);
  const at::Tensor xf = x.detach().to(at::kFloat).flatten();
  const at::Tensor finite = xf.isfinite().all().item<bool>() ? xf : xf.nan_to_num(0, 0, 0);
  double lo = std::min(q.clip_min, q.min_val), hi = std::max(q.clip_max, q.max_val);
  if (finite.numel() > 0) {
    lo = std::min(lo, finite.min().item<double>());
    hi = std::max(hi, finite.max().item<double>());
  }
  if (!(hi > lo)) hi = lo + 1.0;
  const at::Tensor h = at::histc(finite, bins, lo, hi).to(at::kLong);
  const auto* c = h.data_ptr<int64_t>();
  return {{"min", lo},
          {"max", hi},
          {"counts", std::vector<int64_t>(c, c + h.numel())},
          {"samples", x.dim() > 0 ? x.size(0) : 1}};
}

void inline_everything(torch::jit::Graph& g) {
  // torch::jit::Inline inlines each callee's cached "optimized" graph, which
  // is itself inlined only when the executor's optimizations were on when it
  // was made: repeat until no call is left.
  for (int round = 0; round < 64 && has_calls(g.block()); ++round) torch::jit::Inline(g);
}

NoGraphOptimization::NoGraphOptimization() : previous_(torch::jit::getGraphExecutorOptimize()) {
  torch::jit::setGraphExecutorOptimize(false);
}
NoGraphOptimization::~NoGraphOptimization() {
  torch::jit::setGraphExecutorOptimize(previous_);
}

std::map<std::string, std::string> layer_input_observers(const torch::jit::Module& observed) {
  std::map<std::string, std::string> out;
  auto g = inlined_forward(observed);
  spdlog::trace("layer_input_observers: inlined graph\n{}", g->toString());
  for_each_layer_op(g->block(), [&](Node* n, const std::string& layer) {
    if (out.count(layer)) return;  // a layer called twice: its first call
    if (auto obs = observer_of(n->input(0))) out[layer] = *obs;
  });
  return out;
}

std::vector<LayerSite> layer_sites(torch::jit::Graph& g) {
  std::vector<LayerSite> out;
  std::set<std::string> seen;
  for_each_layer_op(g.block(), [&](Node* n, const std::string& layer) {
    if (seen.insert(layer).second) out.push_back({n, layer});
  });
  return out;
}

LayerCapture capture_layers(const torch::jit::Module& model, const std::vector<at::Tensor>& inputs,
                            const CaptureOptions& opts) {
  // A private copy (its own types and graphs; the tensors are shared, not
  // copied) whose forward is inlined, with taps around each layer.
  torch::jit::Module m = model.clone(/*inplace=*/true);
  auto g = m.get_method("forward").graph();
  inline_everything(*g);
  const auto tap_kind = c10::Symbol::fromQualString("taoquant::tap");
  std::vector<std::string> names;
  for (const LayerSite& site : layer_sites(*g)) {
    Node* n = site.op;
    const auto lid = static_cast<int64_t>(names.size());
    {
      torch::jit::WithInsertPoint guard(n);
      Value* id = g->insertConstant(lid);
      Node* tap = g->create(tap_kind, {n->input(0), id}, 1);
      tap->insertBefore(n);
      tap->output()->setType(n->input(0)->type());
      n->replaceInput(0, tap->output());
    }
    if (opts.outputs) {
      Value* y = n->output();
      torch::jit::WithInsertPoint guard(n->next());
      Value* id = g->insertConstant(lid + kOutputTap);
      Node* tap = g->create(tap_kind, {y, id}, 1);
      tap->insertAfter(id->node());
      tap->output()->setType(y->type());
      y->replaceAllUsesWith(tap->output());
      tap->replaceInput(0, y);
    }
    names.push_back(site.layer);
  }
  TapState state;
  state.names = &names;
  state.opts = &opts;
  LayerCapture out;
  {
    std::lock_guard<std::mutex> lock(g_tap_mutex);
    g_taps = &state;
  }
  try {
    torch::NoGradGuard no_grad;
    NoGraphOptimization no_opt;
    std::vector<c10::IValue> in(inputs.begin(), inputs.end());
    out.model_output = m.forward(in);
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_tap_mutex);
    g_taps = nullptr;
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(g_tap_mutex);
    g_taps = nullptr;
  }
  for (auto& [id, t] : state.in) out.inputs[names.at(static_cast<size_t>(id))] = std::move(t);
  for (auto& [id, t] : state.out) out.outputs[names.at(static_cast<size_t>(id))] = std::move(t);
  return out;
}

std::map<std::string, at::Tensor> capture_layer_inputs(const torch::jit::Module& model,
                                                       const std::vector<at::Tensor>& inputs,
                                                       c10::IValue* output) {
  auto c = capture_layers(model, inputs);
  if (output) *output = std::move(c.model_output);
  return std::move(c.inputs);
}

}  // namespace tq
