// Layer taps: which observer quantizes each layer's input, and the actual
// input tensor of each layer on a given batch. Both work on an inlined copy of
// the forward graph, where each conv/linear call is an aten op whose weight is
// read through a chain of prim::GetAttr nodes that spells the layer's path.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"
#include "taoquant/sqnr.h"

namespace tq {

namespace {

using torch::jit::Node;
using torch::jit::Value;

// The capture in progress, the context of the taoquant::tap op. Output taps
// use ids offset by kOutputTap and keep as many samples as the same layer's
// input tap.
constexpr int64_t kOutputTap = int64_t{1} << 32;
struct TapState {
  const std::vector<std::string>* names = nullptr;
  const CaptureOptions* opts = nullptr;
  const LayerInputFn* on_input = nullptr;  // streaming: every input call, nothing kept
  int64_t stop_after = -1;                 // streaming: the tap id after which the model stops
  bool stopped = false;
  std::map<int64_t, at::Tensor> in, out;
  std::map<int64_t, int64_t> kept;  // samples kept per layer id
};
using TapScope = jit::OpScope<TapState>;

// Thrown from a tap to end the model's run early (run_until).
struct StopForward : std::exception {
  const char* what() const noexcept override { return "taoquant: stop after the last tap"; }
};

at::Tensor tap_op(const at::Tensor& x, int64_t id) {
  TapState* taps = TapScope::current();
  if (!taps) return x;
  const bool is_out = id >= kOutputTap;
  if (taps->on_input) {
    if (!is_out) (*taps->on_input)(taps->names->at(static_cast<size_t>(id)), x);
    if (id == taps->stop_after) {
      taps->stopped = true;
      throw StopForward();
    }
    return x;
  }
  const int64_t lid = is_out ? id - kOutputTap : id;
  auto& dst = is_out ? taps->out : taps->in;
  if (dst.count(lid)) return x;  // a layer called twice: its first call
  const int64_t n = x.dim() > 0 ? x.size(0) : 0;
  int64_t keep = n;
  if (is_out) {
    auto k = taps->kept.find(lid);
    if (k != taps->kept.end()) keep = k->second;
  } else {
    if (taps->opts->samples && n > 0)
      keep = std::clamp<int64_t>(taps->opts->samples(taps->names->at(static_cast<size_t>(lid)), x),
                                 1, n);
    taps->kept[lid] = keep;
  }
  at::Tensor t = x.detach();
  if (keep < n) t = t.narrow(0, 0, keep);
  dst[lid] = t.clone();
  return x;
}

TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def("tap(Tensor(a) x, int id) -> Tensor(a)", tap_op);
}

bool is_observe(const Node* n) {
  return std::string(n->kind().toQualString()) == "taoquant::observe";
}

// The observer (its module path) that a value is quantized with: the
// observe call that produced it, or one that it feeds, looking back through
// ops that pass quantization ranges through.
std::optional<std::string> observer_of(Value* v) {
  for (int depth = 0; depth < 64; ++depth) {
    Node* def = v->node();
    if (is_observe(def)) return jit::attr_path(def->input(1)->node()->input(0));
    for (const auto& u : v->uses())
      if (is_observe(u.user)) return jit::attr_path(u.user->input(1)->node()->input(0));
    if (!jit::passes_ranges(def) || def->inputs().empty()) return std::nullopt;
    v = def->input(0);
  }
  return std::nullopt;
}

}  // namespace

double tensor_sqnr_db(const at::Tensor& ref, const at::Tensor& x) {
  // One pass with double accumulators and no temporaries: the weights of a
  // large layer are megabytes, and this runs once per layer.
  TORCH_CHECK(ref.numel() == x.numel(), "tensor_sqnr_db: ", ref.numel(), " vs ", x.numel(),
              " elements");
  const at::Tensor r = ref.to(at::kFloat).contiguous(), y = x.to(at::kFloat).contiguous();
  return sqnr_db(r.data_ptr<float>(), y.data_ptr<float>(), static_cast<size_t>(r.numel()));
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

NoGraphOptimization::NoGraphOptimization() : previous_(torch::jit::getGraphExecutorOptimize()) {
  torch::jit::setGraphExecutorOptimize(false);
}
NoGraphOptimization::~NoGraphOptimization() {
  torch::jit::setGraphExecutorOptimize(previous_);
}

ObservedLinears observed_linears(const torch::jit::Module& observed) {
  ObservedLinears out;
  std::set<std::string> biases;
  auto g = jit::inlined_graph(observed);
  spdlog::trace("observed_linears: inlined graph\n{}", g->toString());
  jit::for_each_node(g->block(), [&](Node* n) {
    if (!jit::is_layer_op(n)) return;
    if (auto layer = jit::layer_of(n)) {
      if (out.layer_inputs.count(*layer)) return;
      if (auto obs = observer_of(n->input(0))) out.layer_inputs[*layer] = *obs;
      return;
    }
    if (n->kind() != torch::jit::aten::linear || !jit::unowned_weight(n)) return;
    Value* b = n->input(2);
    while (b->node()->kind() == torch::jit::prim::unchecked_cast) b = b->node()->input(0);
    const auto bias = jit::attr_path(b);
    const auto in = observer_of(n->input(0)), w = observer_of(n->input(1));
    if (bias && in && w && biases.insert(*bias).second) out.unplanned.push_back({*in, *w, *bias});
  });
  return out;
}

namespace {

// A private copy of `model` (its own types and graphs; the tensors are
// shared, not copied) whose forward is inlined, with taps around each layer.
// `every_call`: a tap at every call of a layer (both branches of an `if`,
// a module called twice), else at its first call.
torch::jit::Module tapped_copy(const torch::jit::Module& model, bool outputs,
                               std::vector<std::string>& names, bool every_call = false,
                               std::vector<bool>* top_level = nullptr) {
  torch::jit::Module m = model.clone(/*inplace=*/true);
  auto g = m.get_method("forward").graph();
  jit::inline_calls(*g);
  jit::onednn_max_pools(*g);  // the same values, faster (jit.h)
  std::vector<jit::LayerSite> sites;
  if (every_call)
    for (auto* n : jit::find_nodes(g->block(), jit::is_layer_op)) {
      if (auto layer = jit::layer_of(n)) sites.push_back({n, *layer});
    }
  else
    sites = jit::layer_sites(*g);
  for (const jit::LayerSite& site : sites) {
    const auto lid = static_cast<int64_t>(names.size());
    jit::insert_call_on_input(site.op, 0, "taoquant::tap", lid);
    if (top_level) top_level->push_back(site.op->owningBlock() == g->block());
    if (outputs) jit::insert_call_on_output(site.op, "taoquant::tap", lid + kOutputTap);
    names.push_back(site.layer);
  }
  return m;
}

c10::IValue run_tapped(torch::jit::Module& m, TapState& state,
                       const std::vector<at::Tensor>& inputs) {
  TapScope scope(state);
  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;
  std::vector<c10::IValue> in(inputs.begin(), inputs.end());
  try {
    return m.forward(in);
  } catch (...) {  // the interpreter may rethrow StopForward as another type
    if (!state.stopped) throw;
    return {};
  }
}

}  // namespace

LayerCapture capture_layers(const torch::jit::Module& model, const std::vector<at::Tensor>& inputs,
                            const CaptureOptions& opts) {
  std::vector<std::string> names;
  torch::jit::Module m = tapped_copy(model, opts.outputs, names);
  TapState state;
  state.names = &names;
  state.opts = &opts;
  LayerCapture out;
  out.model_output = run_tapped(m, state, inputs);
  for (auto& [id, t] : state.in) out.inputs[names.at(static_cast<size_t>(id))] = std::move(t);
  for (auto& [id, t] : state.out) out.outputs[names.at(static_cast<size_t>(id))] = std::move(t);
  return out;
}

struct LayerInputStream::Impl {
  std::vector<std::string> names;
  std::vector<bool> top_level;  // per tap: outside any loop or branch
  torch::jit::Module m;
  CaptureOptions opts;
};

LayerInputStream::LayerInputStream(const torch::jit::Module& model) : impl_(new Impl) {
  impl_->m =
      tapped_copy(model, /*outputs=*/false, impl_->names, /*every_call=*/true, &impl_->top_level);
}
LayerInputStream::~LayerInputStream() = default;

void LayerInputStream::run(const std::vector<at::Tensor>& inputs, const LayerInputFn& fn) {
  TapState state;
  state.names = &impl_->names;
  state.opts = &impl_->opts;
  state.on_input = &fn;
  run_tapped(impl_->m, state, inputs);
}

void LayerInputStream::run_until(const std::vector<at::Tensor>& inputs, const LayerInputFn& fn,
                                 const std::set<std::string>& layers) {
  TapState state;
  state.names = &impl_->names;
  state.opts = &impl_->opts;
  state.on_input = &fn;
  for (size_t id = 0; id < impl_->names.size(); ++id) {
    if (!layers.count(impl_->names[id])) continue;
    if (!impl_->top_level[id]) {  // where the last call is, is known only at run time
      state.stop_after = -1;
      break;
    }
    state.stop_after = static_cast<int64_t>(id);
  }
  run_tapped(impl_->m, state, inputs);
}

std::map<std::string, at::Tensor> capture_layer_inputs(const torch::jit::Module& model,
                                                       const std::vector<at::Tensor>& inputs,
                                                       c10::IValue* output) {
  auto c = capture_layers(model, inputs);
  if (output) *output = std::move(c.model_output);
  return std::move(c.inputs);
}

}  // namespace tq
