#include "static_ptq.h"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/quantization/finalize.h>
#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/csrc/jit/passes/quantization/insert_quant_dequant.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <spdlog/spdlog.h>

#include "latency.h"
#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/report.h"
#include "taoquant/steps.h"

namespace tq::libtorch {

using torch::jit::Module;
using torch::jit::QuantType;

// How many leading samples of a layer's held-out input its per-layer SQNR
// is measured on: at most ~2^17 input values (an SQNR over that many is
// stable to ~0.1 dB) and ~2^24 multiply-adds per pass, and at least one
// sample. A 224x224 CNN then pays about two float passes over one image per
// layer, not over the whole held-out batch.
int64_t sqnr_sample_count(const at::Tensor& x, const at::Tensor& w) {
  if (x.dim() < 2 || x.size(0) <= 1) return x.dim() > 0 ? x.size(0) : 1;
  if (w.dim() > 2 && x.dim() != w.dim()) return x.size(0);  // an unbatched conv input
  const int64_t per_sample = std::max<int64_t>(1, x.numel() / x.size(0));
  // Multiply-adds per sample: each weight meets each input position once
  // (conv: spatial positions; linear: rows of a [N, ..., in] input).
  const int64_t positions = std::max<int64_t>(1, per_sample / std::max<int64_t>(1, w.size(1)));
  const int64_t macs = std::max<int64_t>(1, w.numel() * positions);
  return std::min({x.size(0), std::max<int64_t>(1, (int64_t{1} << 17) / per_sample),
                   std::max<int64_t>(1, (int64_t{1} << 24) / macs)});
}

struct StaticSession {
  std::unique_ptr<ObserverTable> table;
  Module folded;    // BN-folded, specialized float model
  Module observed;  // folded + observers
  std::vector<at::Tensor> holdout;
  std::unique_ptr<StepTimer> steps;  // calibrate() through convert()
  bool check_speed = true;           // backend_kwargs.latency_check
  std::vector<int64_t> latency_batch_sizes = {1, 32};
  std::set<std::string> keep_float;            // layers kept float by the speed check
  std::map<std::string, std::string> reasons;  // layer -> why it stays float
  DataLoader* loader = nullptr;                // alive from calibrate() through convert()
  size_t samples = 0, batches = 0;
  // Each layer's float input and output (leading samples) and the model's
  // float output on the held-out batch: one pass of a tapped copy of
  // `folded`, or of `observed` when the held-out batch is also the only
  // calibration batch (that pass calibrates).
  LayerCapture cap;
  bool captured = false;
  Batch first;                 // the first calibration batch
  bool input_checked = false;  // a pass over `first` succeeded
  CaptureOptions capture_options() const {
    CaptureOptions o;
    o.outputs = true;
    o.samples = [this](const std::string& layer, const at::Tensor& x) {
      try {
        return sqnr_sample_count(x, find_submodule(folded, layer).attr("weight").toTensor());
      } catch (const std::exception&) {
        return x.dim() > 0 ? x.size(0) : int64_t{1};
      }
    };
    return o;
  }
  const LayerCapture& capture() {
    if (!captured) {
      cap = capture_layers(folded, holdout, capture_options());
      captured = true;
    }
    return cap;
  }
};

StaticPtq::StaticPtq() = default;
StaticPtq::~StaticPtq() = default;

std::string select_engine(const QuantizeContext& ctx) {
  const auto& kw = ctx.backend_kwargs();
  std::string engine;
#if defined(__aarch64__) || defined(__arm__)
  engine = "qnnpack";
#else
  engine = "onednn";
#endif
  if (kw.contains("engine")) {
    if (!kw["engine"].is_string())
      throw SpecError(
          ctx.spec.loc("quantize.backend_kwargs.engine"),
          "quantize.backend_kwargs.engine: expected a string (onednn, qnnpack, fbgemm)");
    engine = kw["engine"].get<std::string>();
  }
  const std::vector<std::pair<std::string, at::QEngine>> engines = {
      {"onednn", at::QEngine::ONEDNN},
      {"qnnpack", at::QEngine::QNNPACK},
      {"fbgemm", at::QEngine::FBGEMM}};
  std::vector<std::string> supported;
  for (const auto& [name, e] : engines) {
    const auto& sup = at::globalContext().supportedQEngines();
    if (std::find(sup.begin(), sup.end(), e) == sup.end()) continue;
    supported.push_back(name);
    if (name == engine) {
      at::globalContext().setQEngine(e);
      return engine;
    }
  }
  std::string list;
  for (const auto& s : supported) list += (list.empty() ? "" : ", ") + s;
  throw SpecError(ctx.spec.loc("quantize.backend_kwargs.engine"),
                  "quantize.backend_kwargs.engine: '" + engine +
                      "' is not available in this LibTorch (available: " + list + ")" +
                      did_you_mean(engine, supported));
}

namespace {

bool static_kind_supported(LayerKind k) {
  return k == LayerKind::kLinear || k == LayerKind::kConv1d || k == LayerKind::kConv2d ||
         k == LayerKind::kConv3d;
}

// Why a planned layer cannot be static int8 on LibTorch ("" if it can).
std::string static_blocker(const LayerPlan& lp) {
  if (!lp.quantized()) return lp.skipped ? lp.decided_by : "native, " + lp.decided_by;
  if (!static_kind_supported(lp.info.kind))
    return std::string(to_string(lp.info.kind)) + " has no static int8 kernel in LibTorch";
  if (lp.weights.dtype != DType::kInt8)
    return "weights " + std::string(to_string(lp.weights.dtype)) +
           ": LibTorch static kernels take int8 weights (use backend fakequant to simulate other "
           "formats)";
  if (!lp.activations.quantized())
    return "activations native: static int8 kernels need quantized activations "
           "(set default_activation_dtype or the layer's activations dtype)";
  return "";
}

std::string explicit_weight_observer(const Spec& spec, const LayerPlan& lp) {
  if (lp.rule_index < 0) return "minmax";
  const auto& r = spec.quantize.layers.at(static_cast<size_t>(lp.rule_index));
  return r.weights && r.weights->observer ? *r.weights->observer : "minmax";
}

ObserverTemplate act_template(const Spec& spec, const TensorQuant& t, const std::string& key) {
  ObserverTemplate a;
  a.observer = t.observer.empty() ? std::string(to_string(spec.quantize.algorithm)) : t.observer;
  a.cfg.dtype = DType::kUInt8;  // quint8 activations: what onednn/qnnpack kernels take
  a.cfg.symmetric = false;
  a.cfg.kwargs = t.observer_kwargs;
  a.loc = spec.loc(key);
  return a;
}

ObserverTemplate weight_template(const Spec& spec, const LayerPlan* lp) {
  ObserverTemplate w;
  w.weight = true;
  w.observer = lp ? explicit_weight_observer(spec, *lp) : "minmax";
  w.cfg.dtype = DType::kInt8;
  w.cfg.symmetric = true;
  w.cfg.per_channel = !lp || lp->weights.granularity != Granularity::kPerTensor;
  w.cfg.axis = 0;
  if (lp) w.cfg.kwargs = lp->weights.observer_kwargs;
  w.loc = spec.loc(lp && lp->rule_index >= 0 ? "quantize.layers." + std::to_string(lp->rule_index)
                                             : "quantize.algorithm");
  return w;
}

std::vector<at::Tensor> slice_batch(const std::vector<at::Tensor>& in, int64_t n) {
  std::vector<at::Tensor> out;
  for (const auto& t : in) out.push_back(t.slice(0, 0, std::min<int64_t>(n, t.size(0))));
  return out;
}

// Fills a layer result from its int8 weight qparams: scale range, weight
// SQNR and stored bytes. Returns the weight rounded to its grid.
at::Tensor weight_result(LayerResult& r, const at::Tensor& w, const QParams& wq) {
  auto [mn, mx] = std::minmax_element(wq.scale.begin(), wq.scale.end());
  r.scale_min = *mn;
  r.scale_max = *mx;
  r.bytes_after = static_cast<size_t>(w.numel()) + wq.scale.size() * 8;
  // Symmetric int8 on the grid of each channel (dim 0) or of the tensor, and
  // the SQNR, in one pass: these are the largest tensors of the model.
  const at::Tensor wf = w.to(at::kFloat).contiguous();
  at::Tensor fq = at::empty_like(wf);
  const int64_t channels = wq.per_channel ? wf.size(0) : 1;
  TORCH_CHECK(static_cast<int64_t>(wq.scale.size()) >= channels, "weight_result: ", wq.scale.size(),
              " scales for ", channels, " channels");
  const int64_t per = wf.numel() / std::max<int64_t>(1, channels);
  const float* src = wf.data_ptr<float>();
  float* dst = fq.data_ptr<float>();
  double num = 0, den = 0;
  for (int64_t c = 0; c < channels; ++c) {
    const auto scale = static_cast<float>(wq.scale[static_cast<size_t>(c)]);
    const float inv = 1.0f / scale;  // as LibTorch's fake_quantize
    for (int64_t i = c * per, end = i + per; i < end; ++i) {
      const float q = std::min(127.0f, std::max(-128.0f, std::nearbyint(src[i] * inv)));
      dst[i] = q * scale;
      const double d = static_cast<double>(src[i]) - dst[i];
      num += static_cast<double>(src[i]) * src[i];
      den += d * d;
    }
  }
  r.weight_sqnr_db = den == 0 ? INFINITY : 10.0 * std::log10(num / std::max(den, 1e-300));
  return fq.to(w.scalar_type());
}

bool same_settings(const ObserverTemplate& a, const ObserverTemplate& b) {
  return a.observer == b.observer && a.cfg.dtype == b.cfg.dtype &&
         a.cfg.symmetric == b.cfg.symmetric && a.cfg.per_channel == b.cfg.per_channel &&
         a.cfg.axis == b.cfg.axis && a.cfg.reduce_range == b.cfg.reduce_range &&
         a.cfg.kwargs == b.cfg.kwargs;
}

// backend_kwargs of the never-slower check, validated before any work.
void speed_options(const QuantizeContext& ctx, StaticSession& s) {
  const auto& kw = ctx.backend_kwargs();
  if (kw.contains("latency_check") && !kw["latency_check"].is_boolean())
    throw SpecError(ctx.spec.loc("quantize.backend_kwargs.latency_check"),
                    "quantize.backend_kwargs.latency_check: expected true or false");
  s.check_speed = !kw.contains("latency_check") || kw["latency_check"].get<bool>();
  if (kw.contains("latency_batch_sizes")) {
    const auto& v = kw["latency_batch_sizes"];
    bool ok = v.is_array() && !v.empty();
    for (const auto& e : v) ok = ok && e.is_number_integer() && e.get<int64_t>() > 0;
    if (!ok)
      throw SpecError(ctx.spec.loc("quantize.backend_kwargs.latency_batch_sizes"),
                      "quantize.backend_kwargs.latency_batch_sizes: expected a non-empty list of "
                      "positive integers, e.g. [1, 32]");
    s.latency_batch_sizes = v.get<std::vector<int64_t>>();
  }
}

// Inserts observers for the plan (minus `keep_float`) and runs the calibration
// batches. Fills s.table, s.observed.
void observe_and_run(QuantizeContext& ctx, StaticSession& s) {
  DataLoader* loader = s.loader;
  const Spec& spec = ctx.spec;
  s.table.reset();  // the old table first: a table is the active one until it is destroyed
  s.table = std::make_unique<ObserverTable>();
  auto& table = *s.table;
  torch::jit::QConfigDict qd;
  int act_default = table.add_template(act_template(spec, TensorQuant{}, "quantize.algorithm"));
  int w_default = table.add_template(weight_template(spec, nullptr));
  qd[""] = std::make_tuple(table.make_module(act_default), table.make_module(w_default));
  for (const auto& lp : ctx.plan.layers) {
    std::string why = static_blocker(lp);
    if (why.empty() && s.keep_float.count(lp.info.name)) why = s.reasons[lp.info.name];
    if (!why.empty()) {
      s.reasons[lp.info.name] = why;
      qd[lp.info.name] = c10::nullopt;
      continue;
    }
    std::string key = lp.rule_index >= 0
                          ? "quantize.layers." + std::to_string(lp.rule_index) + ".activations"
                          : "quantize.default_activation_dtype";
    auto at = act_template(spec, lp.activations, key);
    auto wt = weight_template(spec, &lp);
    // Layers with the default settings share the root qconfig: a per-layer
    // entry would give instances of one TorchScript type different observers,
    // which LibTorch's pass cannot express.
    if (same_settings(at, table.templates()[static_cast<size_t>(act_default)]) &&
        same_settings(wt, table.templates()[static_cast<size_t>(w_default)]))
      continue;
    int a = table.add_template(std::move(at));
    int w = table.add_template(std::move(wt));
    qd[lp.info.name] = std::make_tuple(table.make_module(a), table.make_module(w));
  }
  try {
    // On a shallow copy (own types and graphs, shared tensors): the pass
    // adds observers and never writes the float tensors.
    Module copy = s.folded.clone(/*inplace=*/true);
    s.observed =
        torch::jit::InsertObservers(copy, "forward", qd, /*inplace=*/true, QuantType::STATIC);
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    throw RuntimeError(
        "static_ptq: LibTorch could not place observers in this model: " +
        msg.substr(0, msg.find('\n')) +
        " (a branch or pattern tao-quant could not specialize; keep that module float with "
        "skip_names, or use mode weight_only_ptq / dynamic_ptq)");
  }
  table.bind(s.observed);
  spdlog::debug("static_ptq: {} observers inserted", table.slots().size());
  s.steps->step("insert observers");

  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;
  // `tapped`: the pass also captures the layer inputs and the output.
  auto run = [&](const std::vector<at::Tensor>& in, bool tapped = false) {
    std::vector<c10::IValue> iv(in.begin(), in.end());
    try {
      if (tapped) {
        s.cap = capture_layers(s.observed, in, s.capture_options());
        s.captured = true;
      } else {
        s.observed.forward(iv);
      }
    } catch (const std::exception&) {
      // The first pass over the data: does the data fit the model at all?
      if (!s.input_checked) check_input_fits(ctx.model, s.first, "calibration data");
      throw;
    }
    s.input_checked = true;
  };
  s.samples = s.batches = 0;
  {
    // All batches but the last observe; the last is held out for fidelity
    // measurements (a single batch is both).
    loader->reset();
    size_t total = loader->num_batches();
    Batch b;
    std::vector<at::Tensor> prev;
    size_t done = 0;
    while (loader->next(b)) {
      if (!prev.empty()) {
        run(prev);
        s.samples += static_cast<size_t>(prev[0].size(0));
        ++s.batches;
      }
      prev = b.inputs;
      if (ctx.on_progress) ctx.on_progress("calibrate", ++done, total);
    }
    if (s.batches == 0) {
      run(prev, /*tapped=*/true);
      s.samples += static_cast<size_t>(prev[0].size(0));
      ++s.batches;
    }
    s.holdout = prev;
  }
  s.steps->step("calibration batches");
}

}  // namespace

void StaticPtq::calibrate(QuantizeContext& ctx, DataLoader& loader) {
  s_ = std::make_unique<StaticSession>();
  auto& s = *s_;
  s.loader = &loader;
  s.steps = std::make_unique<StepTimer>("static_ptq");
  auto step = [&](const char* what) { s.steps->step(what); };
  ctx.backend_meta["engine"] = select_engine(ctx);
  speed_options(ctx, s);

  loader.reset();
  Batch first;
  if (!loader.next(first)) throw RuntimeError("calibration data is empty: " + loader.describe());
  s.first = first;
  step("first batch");

  // FoldConvBatchNorm works on its own deep copy; this shallow one (tensors
  // shared) only sets eval mode without touching the caller's module.
  Module work = ctx.model.clone(/*inplace=*/true);
  work.eval();
  s.folded = torch::jit::FoldConvBatchNorm(work);
  step("BatchNorm folding");
  BranchSpecialization br;
  try {
    br = specialize_branches(s.folded, slice_batch(first.inputs, 2));
  } catch (const std::exception&) {
    // Its run is the first pass over the data. If the data does not fit the
    // model, say so; otherwise the error is specialization's own.
    check_input_fits(ctx.model, first, "calibration data");
    throw;
  }
  s.input_checked = br.ran;
  ctx.backend_meta["specialized_branches"] = {{"removed", br.removed}, {"kept", br.kept}};
  step("branch specialization");

  observe_and_run(ctx, s);
  double secs = s.steps->total_seconds();
  ctx.calibration = {{"samples", s.samples},
                     {"batches", s.batches},
                     {"holdout_samples", s.holdout.empty() ? 0 : s.holdout[0].size(0)},
                     {"seconds", secs},
                     {"data", loader.describe()}};
}

namespace {

// InsertQuantDeQuant treats a tuple built from a quantized tensor (e.g.
// MultiheadAttention's `(attn_output, None)`) as quantized and dequantizes
// the tuple itself, which TorchScript cannot run. Dequantize its tensor
// elements instead and rebuild the tuple.
void dequantize_tuple_elements(torch::jit::Block* b, torch::jit::Graph& g) {
  using namespace torch::jit;
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it++;
    for (Block* sub : n->blocks()) dequantize_tuple_elements(sub, g);
    if (n->kind() != aten::dequantize || n->inputs().size() != 1 ||
        !n->input(0)->type()->cast<c10::TupleType>())
      continue;
    Value* t = n->input(0);
    WithInsertPoint guard(n);
    std::vector<Value*> elems;
    if (t->node()->kind() == prim::TupleConstruct) {
      elems.assign(t->node()->inputs().begin(), t->node()->inputs().end());
    } else {
      Node* unpack = g.insertNode(g.createTupleUnpack(t));
      elems.assign(unpack->outputs().begin(), unpack->outputs().end());
    }
    std::vector<Value*> out;
    for (Value* e : elems) {
      if (!e->type()->isSubtypeOf(*c10::TensorType::get())) {
        out.push_back(e);
        continue;
      }
      Node* dq = g.insertNode(g.create(aten::dequantize, {e}));
      dq->output()->setType(e->type());
      out.push_back(dq->output());
    }
    Node* tuple = g.insertNode(g.createTuple(out));
    n->output()->replaceAllUsesWith(tuple->output());
    n->destroy();
  }
}

// Module instances whose objects lack attributes that their (shared) type
// declares: LibTorch's InsertQuantDeQuant converts a module type once, for
// the instances it reaches first, and gives only those the new attributes
// (scales, packed weights). When whole parent modules share a type (e.g.
// two identical DenseNet blocks), the others are left incomplete, and
// Finalize would crash on them.
// Module paths that the (inlined) forward graph reads.
std::set<std::string> used_module_paths(const Module& m) {
  using namespace torch::jit;
  auto g = m.get_method("forward").graph()->copy();
  inline_everything(*g);
  std::set<std::string> out;
  std::function<void(Block*)> walk = [&](Block* b) {
    for (Node* n : b->nodes()) {
      for (Block* sub : n->blocks()) walk(sub);
      if (n->kind() != prim::GetAttr || !n->output()->type()->cast<c10::ClassType>()) continue;
      std::string path;
      Value* v = n->output();
      while (v->node()->kind() == prim::GetAttr) {
        const std::string& name = v->node()->s(attr::name);
        path = path.empty() ? name : name + "." + path;
        v = v->node()->input(0);
      }
      out.insert(path);
    }
  };
  walk(g->block());
  return out;
}

// Instances whose objects lack attributes their type declares. Unused ones
// (a BatchNorm folded away) get a sibling's values, so that later passes can
// copy them; used ones are returned: they would run without their qparams.
void complete_or_find_incomplete(Module& root, const std::set<std::string>& used,
                                 std::vector<std::string>& out) {
  struct Inst {
    Module m;
    std::string path;
  };
  std::vector<Inst> all;
  std::function<void(const Module&, const std::string&)> collect = [&](const Module& m,
                                                                       const std::string& path) {
    all.push_back({m, path});
    const auto type = m.type();
    const auto obj = m._ivalue();
    for (size_t i = 0; i < type->numAttributes() && i < obj->slots().size(); ++i) {
      if (!type->getAttribute(i)->cast<c10::ClassType>() || !type->getAttribute(i)->is_module())
        continue;
      if (!obj->getSlot(i).isObject()) continue;
      const std::string name = type->getAttributeName(i);
      collect(Module(obj->getSlot(i).toObject()), path.empty() ? name : path + "." + name);
    }
  };
  collect(root, "");
  std::map<std::pair<const c10::ClassType*, size_t>, c10::IValue> donors;
  for (const auto& inst : all) {
    const auto obj = inst.m._ivalue();
    for (size_t i = 0; i < obj->slots().size(); ++i)
      donors.emplace(std::make_pair(inst.m.type().get(), i), obj->getSlot(i));
  }
  for (auto& inst : all) {
    const auto type = inst.m.type();
    const auto obj = inst.m._ivalue();
    if (obj->slots().size() >= type->numAttributes()) continue;
    spdlog::debug("{}: {} of {} attributes have values", inst.path.empty() ? "<model>" : inst.path,
                  obj->slots().size(), type->numAttributes());
    if (inst.path.empty() || used.count(inst.path)) {
      out.push_back(inst.path.empty() ? "<model>" : inst.path);
      continue;
    }
    for (size_t i = obj->slots().size(); i < type->numAttributes(); ++i) {
      auto d = donors.find({type.get(), i});
      obj->setSlot(i, d != donors.end() ? d->second : c10::IValue());
    }
  }
}

// InsertQuantDeQuant's output -> the final int8 module: completes or
// refuses instances it left without values, fixes tuple dequantization,
// then Finalize (fusion into quantized ops, packing, freezing).
Module finish_quantized(Module q, QuantType qt) {
  std::vector<std::string> incomplete;
  complete_or_find_incomplete(q, used_module_paths(q), incomplete);
  if (!incomplete.empty()) {
    std::string list;
    for (size_t i = 0; i < incomplete.size() && i < 4; ++i) list += (i ? ", " : "") + incomplete[i];
    if (incomplete.size() > 4) list += ", ... (" + std::to_string(incomplete.size()) + " in all)";
    throw RuntimeError(
        std::string(qt == QuantType::STATIC ? "static_ptq" : "dynamic_ptq") +
        ": unsupported pattern: module instances that forward calls share a TorchScript type with "
        "another "
        "instance, and LibTorch's InsertQuantDeQuant left them without their quantization "
        "parameters: " +
        list +
        ". Keep them float with skip_names, or use mode weight_only_ptq or backend fakequant");
  }
  std::function<void(Module&)> fix = [&](Module& m) {
    for (const auto& method : m.get_methods()) {
      auto g = method.graph();
      dequantize_tuple_elements(g->block(), *g);
    }
    for (auto child : m.children()) fix(child);
  };
  fix(q);
  q = torch::jit::Finalize(q, qt, {});
  auto g = q.get_method("forward").graph();
  torch::jit::ConstantPropagation(g);
  torch::jit::EliminateDeadCode(g);
  return q;
}

Module convert_observed(Module& observed) {
  // A shallow copy again: the pass adds attributes and rewrites graphs; the
  // quantized weights it makes are new tensors.
  Module copy = observed.clone(/*inplace=*/true);
  return finish_quantized(torch::jit::InsertQuantDeQuant(copy, "forward", /*inplace=*/true,
                                                         /*debug=*/false, QuantType::STATIC),
                          QuantType::STATIC);
}

const ObserverSlot* input_slot(const ObserverTable& t,
                               const std::map<std::string, std::string>& inputs,
                               const std::string& layer) {
  auto it = inputs.find(layer);
  return it == inputs.end() ? nullptr : t.find_path(it->second);
}

}  // namespace

void StaticPtq::convert(QuantizeContext& ctx) {
  if (!s_) throw RuntimeError("static_ptq: quantize called before calibrate");
  auto& s = *s_;
  const bool check_speed = s.check_speed;
  const std::vector<int64_t>& batch_sizes = s.latency_batch_sizes;

  // Never slower than float: measure the int8 model against the float one;
  // if it is slower at a batch size, time each layer alone and keep the
  // layers whose int8 op is slower float; if it is still slower, keep all.
  auto step = [&](const char* what) { s.steps->step(what); };
  Module q = convert_observed(s.observed);
  step("convert");
  nlohmann::json speed = nlohmann::json::array();
  auto slower_than_float = [&](const Module& qm, const char* stage) {
    auto cmp = compare_model_latency(ctx.model, qm, s.holdout, batch_sizes);
    bool slower = false;
    std::string detail;
    for (const auto& c : cmp) {
      if (c.inferred_from > 0) {
        speed.push_back({{"stage", stage},
                         {"batch_size", c.batch_size},
                         {"fp32_ms_estimate", c.fp32_ms},
                         {"inferred_from_batch_size", c.inferred_from}});
        continue;
      }
      speed.push_back({{"stage", stage},
                       {"batch_size", c.batch_size},
                       {"fp32_ms", c.fp32_ms},
                       {"int8_ms", c.int8_ms}});
      slower = slower || c.int8_ms > c.fp32_ms;
      detail += (detail.empty() ? "" : "; ") + std::string("bs ") + std::to_string(c.batch_size) +
                ": int8 " + format_ms(c.int8_ms) + " vs fp32 " + format_ms(c.fp32_ms);
    }
    return slower ? detail : std::string();
  };
  if (check_speed) {
    std::string why = slower_than_float(q, "planned");
    if (!why.empty()) {
      auto slower =
          slower_int8_layers(ctx, s.folded, s.observed, *s.table, s.capture().inputs, batch_sizes);
      for (const auto& [name, reason] : slower) {
        s.keep_float.insert(name);
        s.reasons[name] = reason;
      }
      step("latency check");
      bool any_int8 = false;  // a layer still planned for int8
      for (const auto& lp : ctx.plan.layers)
        any_int8 = any_int8 || (static_blocker(lp).empty() && !s.keep_float.count(lp.info.name));
      if (!any_int8) {
        ctx.warn(
            "static_ptq: every planned layer is slower in int8 than in fp32 on this machine; "
            "the artifact keeps every layer float");
        q = ctx.model.clone();  // the original float model: its fused inference paths intact
      } else if (!slower.empty()) {
        observe_and_run(ctx, s);  // re-observe without them
        q = convert_observed(s.observed);
        step("convert");
        why = slower_than_float(q, "without slower layers");
        step("latency check");
      }
      if (any_int8 && !why.empty()) {
        why = "int8 model slower than fp32 on this machine (" + why + ")";
        ctx.warn("static_ptq: " + why + "; the artifact keeps every layer float");
        for (const auto& lp : ctx.plan.layers)
          if (!s.reasons.count(lp.info.name)) s.reasons[lp.info.name] = why;
        q = ctx.model.clone();  // the original float model: its fused inference paths intact
      }
    } else {
      step("latency check");
    }
  }
  ctx.backend_meta["latency_check"] = speed;

  // Fidelity on the held-out batch: one float pass captures each layer's
  // input (for the per-layer SQNR) and the model's output.
  const auto& cap = s.capture();
  const c10::IValue& ref = cap.model_output;
  const auto input_observers = layer_input_observers(s.observed);
  for (const auto& [layer, obs] : input_observers)
    spdlog::debug("input of {}: observer {}", layer, obs);
  spdlog::debug("{} layer inputs captured", cap.inputs.size());
  {
    torch::NoGradGuard ng;
    std::vector<c10::IValue> in(s.holdout.begin(), s.holdout.end());
    auto out = q.forward(in);
    if (ref.isTensor() && out.isTensor())
      ctx.backend_meta["holdout_output_sqnr_db"] =
          json_number(tensor_sqnr_db(ref.toTensor(), out.toTensor()));
  }
  step("fidelity pass");
  for (const auto& lp : ctx.plan.layers) {
    LayerResult r;
    r.name = lp.info.name;
    r.class_name = lp.info.class_name;
    r.weight_shape = lp.info.weight_shape;
    auto layer = find_submodule(s.folded, lp.info.name);
    auto w = layer.attr("weight").toTensor();
    r.bytes_before = static_cast<size_t>(w.numel()) * w.element_size();
    auto it = s.reasons.find(lp.info.name);
    if (it != s.reasons.end()) {
      r.kept_float = true;
      r.reason = it->second;
      r.bytes_after = r.bytes_before;
      ctx.add_layer_result(std::move(r));
      continue;
    }
    const ObserverSlot* ws = s.table->find_label(lp.info.name + ":weight");
    const ObserverSlot* as = input_slot(*s.table, input_observers, lp.info.name);
    r.weight_format =
        lp.weights.granularity == Granularity::kPerTensor ? "int8/per_tensor" : "int8/per_channel";
    r.activation_format = "uint8/per_tensor";
    if (ws) {
      const at::Tensor fq = weight_result(r, w, s.table->qparams(ws->id));
      if (as) {
        const QParams& aq = s.table->qparams(as->id);
        r.extra["activation"] = activation_stats(aq, as->obs->name());
        auto xi = cap.inputs.find(lp.info.name);
        if (xi != cap.inputs.end()) {
          // Output SQNR of this layer alone, float vs int8-simulated, on
          // leading samples of the held-out batch.
          torch::NoGradGuard ng;
          NoGraphOptimization no_opt;
          const at::Tensor& x = xi->second;
          r.extra["activation"]["histogram"] = activation_histogram(x, aq);
          auto yi = cap.outputs.find(lp.info.name);
          const at::Tensor ref = yi != cap.outputs.end() && yi->second.dim() > 0 && x.dim() > 0 &&
                                         yi->second.size(0) == x.size(0)
                                     ? yi->second
                                     : layer.forward({x}).toTensor();
          auto xq = at::fake_quantize_per_tensor_affine(x, aq.scale[0], aq.zero_point[0], 0, 255);
          layer.setattr("weight", fq);
          auto y = layer.forward({xq}).toTensor();
          layer.setattr("weight", w);
          r.extra["output_sqnr_db"] = json_number(tensor_sqnr_db(ref, y));
          r.extra["output_sqnr_samples"] = x.size(0);
        }
      }
    }
    ctx.add_layer_result(std::move(r));
  }
  step("layer SQNR");
  ctx.backend_meta["steps"] = s.steps->to_json();
  ctx.model = q;
}

}  // namespace tq::libtorch

namespace tq::libtorch {

void StaticPtq::dynamic(QuantizeContext& ctx) {
  ctx.backend_meta["engine"] = select_engine(ctx);
  ObserverTable table;
  torch::jit::QConfigDict qd;
  qd[""] = c10::nullopt;
  std::map<std::string, std::string> reasons;
  for (const auto& lp : ctx.plan.layers) {
    std::string why;
    if (!lp.weights.quantized())
      why = lp.skipped ? lp.decided_by : "native, " + lp.decided_by;
    else if (lp.info.kind != LayerKind::kLinear)
      why = "dynamic_ptq quantizes Linear layers (quantized::linear_dynamic); " +
            std::string(to_string(lp.info.kind)) + " stays float";
    else if (lp.weights.dtype != DType::kInt8)
      why = "weights " + std::string(to_string(lp.weights.dtype)) +
            ": quantized::linear_dynamic takes int8 weights";
    if (!why.empty()) {
      reasons[lp.info.name] = why;
      continue;
    }
    ObserverTemplate a;  // activations: qparams are chosen at run time
    a.observer = "minmax";
    a.cfg.dtype = DType::kUInt8;
    int ai = table.add_template(a);
    int wi = table.add_template(weight_template(ctx.spec, &lp));
    qd[lp.info.name] = std::make_tuple(table.make_module(ai), table.make_module(wi));
  }
  Module work = ctx.model.clone();
  work.eval();
  Module observed;
  try {
    observed =
        torch::jit::InsertObservers(work, "forward", qd, /*inplace=*/false, QuantType::DYNAMIC);
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    throw RuntimeError("dynamic_ptq: LibTorch could not place observers in this model: " +
                       msg.substr(0, msg.find('\n')));
  }
  table.bind(observed);
  // No data is needed: weight observers see the weights directly; activation
  // observers only need to exist (their qparams are chosen at run time).
  for (const auto& slot : table.slots()) {
    auto colon = slot->label.rfind(':');
    std::string owner = slot->label.substr(0, colon);
    if (slot->label.compare(colon, std::string::npos, ":weight") == 0)
      table.observe(slot->id, find_submodule(observed, owner).attr("weight").toTensor());
    else
      table.observe(slot->id, torch::tensor({0.0f, 1.0f}));
  }
  Module q = finish_quantized(
      torch::jit::InsertQuantDeQuant(observed, "forward", false, false, QuantType::DYNAMIC),
      QuantType::DYNAMIC);

  for (const auto& lp : ctx.plan.layers) {
    LayerResult r;
    r.name = lp.info.name;
    r.class_name = lp.info.class_name;
    r.weight_shape = lp.info.weight_shape;
    auto w = find_submodule(work, lp.info.name).attr("weight").toTensor();
    r.bytes_before = static_cast<size_t>(w.numel()) * w.element_size();
    auto it = reasons.find(lp.info.name);
    if (it != reasons.end()) {
      r.kept_float = true;
      r.reason = it->second;
      r.bytes_after = r.bytes_before;
    } else {
      r.weight_format = lp.weights.granularity == Granularity::kPerTensor ? "int8/per_tensor"
                                                                          : "int8/per_channel";
      r.activation_format = "uint8/dynamic";
      if (const ObserverSlot* ws = table.find_label(lp.info.name + ":weight"))
        weight_result(r, w, table.qparams(ws->id));
    }
    ctx.add_layer_result(std::move(r));
  }
  ctx.model = q;
}

}  // namespace tq::libtorch
