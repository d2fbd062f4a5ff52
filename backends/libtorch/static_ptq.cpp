#include "static_ptq.h"
#include "static_session.h"

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <spdlog/spdlog.h>

#include "latency.h"
#include "ptq_common.h"
#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/report.h"
#include "taoquant/sqnr.h"
#include "taoquant/steps.h"
#include "taoquant/timing_cache.h"
#include "taoquant/weight_algorithms.h"

namespace tq::libtorch {

using torch::jit::Module;
using QuantType = jit::QuantMode;

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

// Weights: minmax unless a `layers` rule names an observer.
ObserverTemplate weight_template(const Plan& plan, const LayerPlan* lp) {
  ObserverTemplate w;
  w.weight = true;
  w.observer = lp && lp->weights.observer_explicit ? lp->weights.observer : "minmax";
  w.cfg.dtype = DType::kInt8;
  w.cfg.symmetric = true;
  w.cfg.per_channel = !lp || lp->weights.granularity != Granularity::kPerTensor;
  w.cfg.axis = 0;
  if (lp) w.cfg.kwargs = lp->weights.observer_kwargs;
  w.loc = lp && lp->rule_index >= 0 ? lp->loc : plan.algorithm_loc;
  return w;
}

// Fills a layer result from its int8 weight qparams: scale range, weight
// SQNR and stored bytes. Returns the weight rounded to its grid.
bool same_settings(const ObserverTemplate& a, const ObserverTemplate& b) {
  return a.observer == b.observer && a.cfg.dtype == b.cfg.dtype &&
         a.cfg.symmetric == b.cfg.symmetric && a.cfg.per_channel == b.cfg.per_channel &&
         a.cfg.axis == b.cfg.axis && a.cfg.reduce_range == b.cfg.reduce_range &&
         a.cfg.kwargs == b.cfg.kwargs;
}

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
  SqnrEnergy e;
  for (int64_t c = 0; c < channels; ++c) {
    const auto scale = static_cast<float>(wq.scale[static_cast<size_t>(c)]);
    const float inv = 1.0f / scale;  // as LibTorch's fake_quantize
    for (int64_t i = c * per, end = i + per; i < end; ++i) {
      const float q = std::min(127.0f, std::max(-128.0f, std::nearbyint(src[i] * inv)));
      dst[i] = q * scale;
      e.add(src[i], dst[i]);
    }
  }
  r.weight_sqnr_db = e.db();
  return fq.to(w.scalar_type());
}

// InsertQuantDeQuant's output -> the final int8 module: completes or
// refuses instances it left without values, fixes tuple dequantization,
// then Finalize (fusion into quantized ops, packing, freezing).
Module finish_quantized(Module q, QuantType qt) {
  const std::vector<std::string> incomplete = jit::complete_unused_instances(q);
  if (!incomplete.empty()) {
    std::string list;
    for (size_t i = 0; i < incomplete.size() && i < 4; ++i) list += (i ? ", " : "") + incomplete[i];
    if (incomplete.size() > 4) list += ", ... (" + std::to_string(incomplete.size()) + " in all)";
    throw RuntimeError(
        std::string(qt == QuantType::kStatic ? "static_ptq" : "dynamic_ptq") +
        ": unsupported pattern: module instances that forward calls share a TorchScript type with "
        "another "
        "instance, and LibTorch's InsertQuantDeQuant left them without their quantization "
        "parameters: " +
        list +
        ". Keep them float with skip_names, or use mode weight_only_ptq or backend fakequant");
  }
  jit::dequantize_tuple_elements(q);
  return jit::finalize(q, qt);
}

namespace {

ObserverTemplate act_template(const Plan& plan, const TensorQuant* t, bool reduce_range) {
  ObserverTemplate a;
  a.observer = t ? t->observer : plan.algorithm;
  a.cfg.dtype = DType::kUInt8;  // quint8 activations: what onednn/qnnpack kernels take
  a.cfg.symmetric = false;
  a.cfg.reduce_range = reduce_range;
  if (t) a.cfg.kwargs = t->observer_kwargs;
  a.loc = t ? t->loc : plan.algorithm_loc;
  return a;
}

std::vector<at::Tensor> slice_batch(const std::vector<at::Tensor>& in, int64_t n) {
  std::vector<at::Tensor> out;
  for (const auto& t : in) out.push_back(t.slice(0, 0, std::min<int64_t>(n, t.size(0))));
  return out;
}

// Whether `path` is `module` or inside it.
bool is_within(const std::string& path, const std::string& module) {
  return path.compare(0, module.size(), module) == 0 &&
         (path.size() == module.size() || path[module.size()] == '.');
}

// The modules whose layers are all float, outermost first: under the root
// qconfig LibTorch's pass would still quantize the ops among those layers
// that it quantizes with observers of their own (a Hardswish module; an add
// or a multiply only when its inputs are quantized already), each a
// quantize, an int8 op and a dequantize between float layers. On
// MobileNetV3-small with only its two Linear layers int8 that made the model
// 2.7x slower than float at batch 1 (14.65 against 5.47 ms) and 5.5x at 32;
// with these modules float, 7.4 against 6.7 ms. A module with no layer (an
// activation between two layers) keeps its parent's qconfig.
std::vector<std::string> float_only_modules(const Module& folded,
                                            const std::set<std::string>& float_layers,
                                            const std::set<std::string>& int8_layers) {
  // Whether a layer is `path` or inside it (those sort from `path` on,
  // among the names that begin with it).
  auto holds_any = [](const std::set<std::string>& layers, const std::string& path) {
    for (auto it = layers.lower_bound(path);
         it != layers.end() && it->compare(0, path.size(), path) == 0; ++it)
      if (is_within(*it, path)) return true;
    return false;
  };
  std::vector<std::string> out;
  // module_instances lists a module before what it holds, and all of that
  // right after it: a module inside one already taken follows it.
  for (const auto& inst : jit::module_instances(folded)) {
    if (inst.path.empty() || float_layers.count(inst.path)) continue;
    if (!out.empty() && inst.path.rfind(out.back() + ".", 0) == 0) continue;  // inside one
    if (holds_any(float_layers, inst.path) && !holds_any(int8_layers, inst.path))
      out.push_back(inst.path);
  }
  return out;
}

// Each module above a layer of `own` (float, or its own settings) gets a
// qconfig of its own, with the root's settings (`root_copy`), where it has
// none and is not inside a float module (which it inherits None from).
// LibTorch's pass gives an instance whose qconfig differs from its type's
// other instances a type of its own, keyed by the type and the instance's
// qconfig only: an encoder layer of a ViT above a float Linear has the
// root's qconfig, like its siblings, so it was given the type already made
// for a sibling whose Linear is int8, and the pass refused the model (any
// one Linear of an encoder layer kept float, or given per-tensor weights:
// exit 1).
void separate_modules_above(jit::QConfigs& qd, const std::set<std::string>& own,
                            const std::vector<std::string>& float_modules,
                            const std::function<jit::QConfig()>& root_copy) {
  auto in_float_module = [&](const std::string& path) {
    return std::any_of(float_modules.begin(), float_modules.end(),
                       [&](const std::string& m) { return is_within(path, m); });
  };
  for (const auto& name : own)
    for (auto dot = name.rfind('.'); dot != std::string::npos && dot > 0;
         dot = name.rfind('.', dot - 1)) {
      const std::string above = name.substr(0, dot);
      if (!qd.count(above) && !in_float_module(above)) qd[above] = root_copy();
    }
}

// A fresh observer table (s.table) and the qconfig of each layer of the plan
// (minus `keep_float`), for LibTorch's InsertObservers.
jit::QConfigs static_qconfig(const Plan& plan, StaticSession& s) {
  s.table.reset();  // the old table first: a table is the active one until it is destroyed
  s.table = std::make_unique<ObserverTable>();
  auto& table = *s.table;
  using Settings = std::pair<ObserverTemplate, ObserverTemplate>;  // activation, weight
  auto same = [](const Settings& a, const Settings& b) {
    return same_settings(a.first, b.first) && same_settings(a.second, b.second);
  };
  jit::QConfigs qd;
  std::vector<std::pair<const LayerPlan*, Settings>> layers;
  std::vector<Settings> all;
  std::set<std::string> float_layers, int8_layers;
  for (const auto& lp : plan.layers) {
    std::string why = lp.why_float();
    if (why.empty() && s.keep_float.count(lp.info.name)) why = s.reasons[lp.info.name];
    if (!why.empty()) {
      s.reasons[lp.info.name] = why;
      qd[lp.info.name] = std::nullopt;
      float_layers.insert(lp.info.name);
      continue;
    }
    int8_layers.insert(lp.info.name);
    all.push_back(
        {act_template(plan, &lp.activations, s.reduce_range), weight_template(plan, &lp)});
    layers.emplace_back(&lp, all.back());
  }
  // Layers with the most common settings share the root qconfig: one entry
  // per layer would give two layers that read one value (a ResNet block's
  // conv1 and downsample) qconfigs LibTorch's pass cannot place an observer
  // for (ptq_common.h). A layer with its own settings gets its own entry,
  // and the modules above it theirs (separate_modules_above).
  const Settings root = most_common(
      all, same,
      Settings{act_template(plan, nullptr, s.reduce_range), weight_template(plan, nullptr)});
  auto module_of = [&](const ObserverTemplate& t) {
    return table.make_module(table.add_template(t));
  };
  qd[""] = std::make_tuple(module_of(root.first), module_of(root.second));
  s.float_modules = float_only_modules(s.folded, float_layers, int8_layers);
  for (const auto& path : s.float_modules) qd[path] = std::nullopt;
  std::set<std::string> own = float_layers;  // the layers whose qconfig is not the root's
  for (const auto& [lp, settings] : layers)
    if (!same(settings, root)) {
      qd[lp->info.name] = std::make_tuple(module_of(settings.first), module_of(settings.second));
      own.insert(lp->info.name);
    }
  separate_modules_above(qd, own, s.float_modules, [&] {
    return std::make_tuple(module_of(root.first), module_of(root.second));
  });
  return qd;
}

}  // namespace

void observe_and_run(QuantizeContext& ctx, StaticSession& s) {
  const jit::QConfigs qd = static_qconfig(ctx.plan, s);
  auto& table = *s.table;
  try {
    // On a shallow copy (own types and graphs, shared tensors): the pass
    // adds observers and never writes the float tensors.
    Module copy = s.folded.clone(/*inplace=*/true);
    s.observed = jit::insert_observers(copy, qd, QuantType::kStatic);
    s.linears = observed_linears(s.observed);
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
  ctx.backend_meta["float_modules"] = s.float_modules;
  s.steps->step("insert observers");

  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;
  // The observed model as calibration runs it: its own graphs, with max
  // pooling through oneDNN (the same values, jit.h); the observers are the
  // table's, bound above.
  Module runner = s.observed.clone(/*inplace=*/true);
  jit::onednn_max_pools(runner);
  // `tapped`: the pass also captures the layer inputs and the output.
  auto run = [&](const std::vector<at::Tensor>& in, bool tapped = false) {
    std::vector<c10::IValue> iv(in.begin(), in.end());
    try {
      if (tapped) {
        s.cap = capture_layers(s.observed, in, s.capture_options());
        s.captured = true;
      } else {
        runner.forward(iv);
      }
    } catch (const std::exception&) {
      // The first pass over the data: does the data fit the model at all?
      if (!s.input_checked) check_input_fits(ctx.model, s.first, "calibration data");
      throw;
    }
    s.input_checked = true;
  };
  // All batches but the last observe; the last is held out for fidelity
  // measurements (a single batch is both: that pass also captures, the first
  // time only: observing again, after the speed check, the biases of the
  // layers still int8 are on their accumulator grid, not the float model's).
  s.data->pass([&](const std::vector<at::Tensor>& in, bool also_holdout) {
    run(in, also_holdout && !s.captured);
  });
  s.holdout = s.data->holdout();
  s.steps->step("calibration batches");
}

std::shared_ptr<StaticSession> calibrate_static(QuantizeContext& ctx, CalibrationData& data) {
  auto session = std::make_shared<StaticSession>();
  auto& s = *session;
  s.data = &data;
  s.steps = std::make_unique<StepTimer>("static_ptq");
  auto step = [&](const char* what) { s.steps->step(what); };
  const std::string engine = select_engine(ctx);
  ctx.backend_meta["engine"] = engine;
  const ActivationRange range = activation_range(ctx, engine);
  s.reduce_range = range.reduced;
  ctx.backend_meta["activation_range"] = range.why;
  if (range.reduced && range.automatic)
    ctx.warn("backend 'libtorch' static_ptq: activations " + range.why +
             "; backend_kwargs.activation_range: full for an artifact meant for VNNI CPUs");
  s.check_speed = ctx.options().get_bool("latency_check");
  s.latency_batch_sizes = ctx.options().get_int_list("latency_batch_sizes");

  const Batch& first = data.first();
  s.first = first;
  step("first batch");

  // FoldConvBatchNorm works on its own deep copy; this shallow one (tensors
  // shared) only sets eval mode without touching the caller's module.
  Module work = ctx.model.clone(/*inplace=*/true);
  work.eval();
  s.folded = jit::fold_conv_batchnorm(work);
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
  return session;
}

const ObserverSlot* input_slot(const ObserverTable& t,
                               const std::map<std::string, std::string>& inputs,
                               const std::string& layer) {
  auto it = inputs.find(layer);
  return it == inputs.end() ? nullptr : t.find_path(it->second);
}

Module convert_observed(Module& observed) {
  // A shallow copy again: the pass adds attributes and rewrites graphs; the
  // quantized weights it makes are new tensors.
  Module copy = observed.clone(/*inplace=*/true);
  return finish_quantized(jit::insert_quant_dequant(copy, QuantType::kStatic), QuantType::kStatic);
}

namespace {

// The observed copy is what converts: a bias shift made in `folded` goes
// there too, unless the two share the tensor.
void shift_observed(StaticSession& s, const BiasShift& b, double sign) {
  const auto dot = b.target.rfind('.');
  const std::string mod = b.target.substr(0, dot), attr = b.target.substr(dot + 1);
  const at::Tensor f = find_submodule(s.folded, mod).attr(attr).toTensor();
  const at::Tensor o = find_submodule(s.observed, mod).attr(attr).toTensor();
  if (!f.is_same(o)) shift_bias(s.observed, b, sign);
}

// Static bias correction (quantize.bias_correction): from the weights
// LibTorch will store (the observers' qparams on the folded weights) and
// each layer's input qparams, into the folded biases, which the observed
// copy shares.
void correct_static_biases(QuantizeContext& ctx, StaticSession& s) {
  const auto& inputs = s.linears.layer_inputs;
  const auto layers =
      static_bias_layers(ctx.plan, [&](const LayerPlan& lp) -> std::optional<StaticBiasLayer> {
        const ObserverSlot* ws = s.table->find_label(lp.info.name + ":weight");
        if (!ws || s.reasons.count(lp.info.name)) return std::nullopt;
        LayerResult scratch;
        StaticBiasLayer b;
        b.weight =
            weight_result(scratch, find_submodule(s.folded, lp.info.name).attr("weight").toTensor(),
                          s.table->qparams(ws->id));
        if (const ObserverSlot* as = input_slot(*s.table, inputs, lp.info.name))
          b.set_input(s.table->qparams(as->id));
        return b;
      });
  s.shifts = correct_biases(ctx, s.folded, s.folded, *s.data, layers);
  for (const auto& [layer, b] : s.shifts) shift_observed(s, b, 1.0);
  s.steps->step("bias correction");
}

}  // namespace

void undo_bias_corrections(QuantizeContext& ctx, StaticSession& s) {
  for (auto it = s.shifts.begin(); it != s.shifts.end();) {
    if (!s.keep_float.count(it->first)) {
      ++it;
      continue;
    }
    shift_bias(s.folded, it->second, -1.0);
    shift_observed(s, it->second, -1.0);
    ctx.algorithm_facts[it->first]["bias_correction"] = {
        {"skipped", "the layer stays float: " + s.reasons[it->first]}};
    it = s.shifts.erase(it);
  }
  // Snapping moved them too (after the correction): the saved float bias,
  // in place, so that the observed copy, which shares it, has it as well.
  torch::NoGradGuard ng;
  for (const auto& name : s.keep_float) {
    auto fb = s.float_biases.find(name + ".bias");
    if (fb == s.float_biases.end()) continue;
    for (Module* m : {&s.folded, &s.observed}) {
      at::Tensor b = find_submodule(*m, name).attr("bias").toTensor();
      if (!b.equal(fb->second)) b.detach().copy_(fb->second);
    }
  }
}

void convert_static(QuantizeContext& ctx, StaticSession& s) {
  keep_batch_change_safe(ctx, s);
  // The float reference of every fidelity figure (the layers' and the held-out
  // output's) is the float model's: captured before bias correction and
  // snapping move the folded biases, whichever step asks for it first.
  (void)s.capture();
  for (const auto& lp : ctx.plan.layers) {  // the float biases, before they move
    auto layer = find_submodule(s.folded, lp.info.name);
    if (layer.hasattr("bias") && layer.attr("bias").isTensor())
      s.float_biases.emplace(lp.info.name + ".bias",
                             layer.attr("bias").toTensor().detach().clone());
  }
  if (ctx.plan.algorithms.bias_correction) correct_static_biases(ctx, s);
  snap_biases(ctx, s);
  Module q = convert_observed(s.observed);
  s.steps->step("convert");
  if (s.check_speed || (ctx.timing_cache && ctx.timing_cache->profile_all))
    q = never_slower(ctx, s, q);
  else
    ctx.backend_meta["latency_check"] = nlohmann::json::array();
  report_static(ctx, s);
  bool any_int8 = false;  // the artifact runs a layer in int8
  for (const auto& lp : ctx.plan.layers)
    any_int8 = any_int8 || (lp.quantized() && !s.reasons.count(lp.info.name));
  record_static(ctx, s, !any_int8);
  ctx.backend_meta["steps"] = s.steps->to_json();
  ctx.model = q;
}

}  // namespace tq::libtorch
