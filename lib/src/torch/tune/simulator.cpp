#include "simulator.h"

#include <algorithm>
#include <optional>

#include <ATen/ATen.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/formats.h"
#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/observer.h"
#include "taoquant/weight_quant.h"

namespace tq::tune {

namespace {

// How a layer's input is quantized while the layer is.
struct ActQuant {
  bool dynamic = false;  // qparams from each call's own range
  QParams q;
  DType dtype = DType::kUInt8;
};

// The simulator in progress: what the taoquant::perturb op does.
struct SimState {
  std::vector<size_t> site_layer;       // tap id -> layer index
  std::vector<const ActQuant*> active;  // per layer; null: input left alone
};
using SimScope = jit::OpScope<SimState>;

at::Tensor fake_quant(const at::Tensor& x, const ActQuant& a) {
  QParams q = a.q;
  if (a.dynamic) {
    ObserverConfig cfg;
    cfg.dtype = DType::kUInt8;
    q = qparams_from_range({std::min(0.f, x.min().item<float>())},
                           {std::max(0.f, x.max().item<float>())}, cfg);
  }
  if (!dtype_traits(a.dtype).is_float8 || a.dynamic)
    return at::fake_quantize_per_tensor_affine(x, q.scale.at(0), q.zero_point.at(0), q.quant_min,
                                               q.quant_max);
  // fp8: x / scale rounded to the format's grid (saturating), times scale.
  const auto f = a.dtype == DType::kFp8E5M2 ? wformat::Fp8::kE5M2 : wformat::Fp8::kE4M3FN;
  at::Tensor y = x.contiguous().to(at::kFloat).clone();
  float* p = y.data_ptr<float>();
  const float s = q.scale.at(0), fmax = wformat::fp8_max(f);
  for (int64_t i = 0; i < y.numel(); ++i)
    p[i] = wformat::fp8_decode(wformat::fp8_encode(std::clamp(p[i] / s, -fmax, fmax), f), f) * s;
  return y.to(x.scalar_type());
}

at::Tensor perturb_op(const at::Tensor& x, int64_t id) {
  SimState* s = SimScope::current();
  if (!s || !x.is_floating_point()) return x;
  const ActQuant* a = s->active.at(s->site_layer.at(static_cast<size_t>(id)));
  return a ? fake_quant(x, *a) : x;
}

TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def("perturb(Tensor x, int id) -> Tensor", perturb_op);
}

bool contains(const std::vector<LayerKind>& v, LayerKind k) {
  return std::find(v.begin(), v.end(), k) != v.end();
}

}  // namespace

TensorQuant weight_setting(const LayerPlan& lp, DType format) {
  TensorQuant t = lp.weights;
  if (!t.quantized()) {
    t = TensorQuant{};
    t.granularity = Granularity::kPerChannel;
  }
  t.dtype = format;
  const auto g = weight_granularities(format);
  if (std::find(g.begin(), g.end(), t.granularity) == g.end())
    t.granularity = Granularity::kPerChannel;
  if (dtype_traits(format).is_float8) t.symmetric = true;
  if (format == DType::kUInt8) t.symmetric = false;
  return t;
}

struct Simulator::Impl {
  const Plan* plan = nullptr;
  torch::jit::Module model;                 // the private copy, tapped
  std::vector<const LayerPlan*> plans;      // per simulated layer
  std::vector<torch::jit::Module> modules;  // per simulated layer
  std::vector<at::Tensor> float_weights;    // per simulated layer
  std::map<std::pair<size_t, DType>, wformat::QuantizedWeight> rounded;
  std::vector<std::optional<ActQuant>> acts;  // per simulated layer
  SimState state;

  const wformat::QuantizedWeight& rounded_weight(size_t i, DType format) {
    auto key = std::make_pair(i, format);
    auto it = rounded.find(key);
    if (it != rounded.end()) return it->second;
    const at::Tensor w = float_weights[i].to(at::kFloat).contiguous();
    const std::vector<int64_t> shape(w.sizes().begin(), w.sizes().end());
    const auto f = weight_format_of(weight_setting(*plans[i], format));
    return rounded.emplace(key, wformat::quantize_weight(w.data_ptr<float>(), shape, f))
        .first->second;
  }

  // Taps each simulated layer's input; returns the weights (attribute
  // paths) of the layer calls no planned layer owns.
  std::vector<std::string> tap(const std::vector<SimLayer>& layers) {
    auto g = model.get_method("forward").graph();
    jit::inline_calls(*g);
    jit::onednn_max_pools(*g);  // the same values, faster (jit.h)
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < layers.size(); ++i) index[layers[i].name] = i;
    std::vector<std::string> outside;
    for (auto* n : jit::find_nodes(g->block(), jit::is_layer_op)) {
      if (auto w = jit::unowned_weight(n)) {
        if (std::find(outside.begin(), outside.end(), *w) == outside.end()) outside.push_back(*w);
        continue;
      }
      auto layer = jit::layer_of(n);
      if (!layer || !index.count(*layer)) continue;
      jit::insert_call_on_input(n, 0, "taoquant::perturb",
                                static_cast<int64_t>(state.site_layer.size()));
      state.site_layer.push_back(index[*layer]);
    }
    return outside;
  }

  // Static mode: the planned observer over the calibration inputs of each
  // layer in `which` (indices into `layers`).
  void calibrate(const std::vector<SimLayer>& layers, const std::vector<size_t>& which,
                 CalibrationData& data) {
    std::map<std::string, std::unique_ptr<Observer>> obs;
    std::map<std::string, DType> dtypes;
    const LayerPlan* fallback = nullptr;  // a quantized input setting for unplanned layers
    for (const auto* lp : plans)
      if (!fallback && lp->activations.quantized()) fallback = lp;
    if (!fallback) return;
    for (size_t i : which) {
      const auto& t =
          plans[i]->activations.quantized() ? plans[i]->activations : fallback->activations;
      ObserverConfig cfg;
      cfg.dtype = t.dtype;
      cfg.symmetric = t.symmetric;
      cfg.kwargs = t.observer_kwargs;
      obs[layers[i].name] = ObserverRegistry::instance().create(t.observer, cfg, t.loc);
      dtypes[layers[i].name] = t.dtype;
    }
    LayerInputStream stream(model);
    data.pass([&](const std::vector<at::Tensor>& in, bool) {
      stream.run(in, [&](const std::string& layer, const at::Tensor& x) {
        auto it = obs.find(layer);
        if (it != obs.end() && x.is_floating_point()) it->second->observe(x);
      });
    });
    for (size_t i : which)
      acts[i] = ActQuant{false, obs[layers[i].name]->finalize(), dtypes[layers[i].name]};
  }
};

Simulator::Simulator(const Plan& plan, torch::jit::Module float_model,
                     const std::vector<DType>& candidates, const ModeCaps& backend)
    : impl_(new Impl) {
  auto& I = *impl_;
  I.plan = &plan;
  float_model.eval();
  I.model = plan.mode == Mode::kStatic && backend.folds_batchnorm
                ? jit::fold_conv_batchnorm(float_model)
                : float_model;
  const auto& backend_dtypes = backend.weight_dtypes;
  const auto& backend_kinds = backend.layer_kinds;
  for (const auto& lp : plan.layers) {
    if (!lp.float_reason.empty() || lp.skipped || !contains(backend_kinds, lp.info.kind)) continue;
    SimLayer l{
        lp.info.name, lp.info.kind, 0, {}, lp.quantized() ? lp.weights.dtype : DType::kNative};
    for (DType d : candidates)
      if (std::find(backend_dtypes.begin(), backend_dtypes.end(), d) != backend_dtypes.end())
        l.formats.push_back(d);
    if (l.formats.empty()) continue;
    auto module = find_submodule(I.model, lp.info.name);
    at::Tensor w = module.attr("weight").toTensor();
    l.weight_params = static_cast<size_t>(w.numel());
    layers_.push_back(l);
    I.plans.push_back(&lp);
    I.modules.push_back(module);
    I.float_weights.push_back(w);
  }
  I.acts.resize(layers_.size());
  I.state.active.assign(layers_.size(), nullptr);
  if (plan.mode == Mode::kDynamic)
    for (auto& a : I.acts) a = ActQuant{true, {}, DType::kUInt8};
  outside_plan_ = I.tap(layers_);
}

Simulator::~Simulator() = default;

size_t Simulator::quantize_inputs(const InputRanges& known,
                                  const std::function<CalibrationData*()>& calib) {
  auto& I = *impl_;
  if (I.plan->mode != Mode::kStatic) return 0;
  std::vector<size_t> unknown;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto it = known.find(layers_[i].name);
    if (it == known.end()) {
      unknown.push_back(i);
      continue;
    }
    I.acts[i] = ActQuant{false, it->second, it->second.dtype};
  }
  CalibrationData* data = unknown.empty() ? nullptr : calib();
  if (data) I.calibrate(layers_, unknown, *data);
  return data ? unknown.size() : 0;
}

void Simulator::assign(const Assignment& a) {
  auto& I = *impl_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto it = a.find(layers_[i].name);
    const bool quantized = it != a.end() && it->second != DType::kNative;
    at::Tensor w = I.float_weights[i];
    if (quantized) {
      const auto& q = I.rounded_weight(i, it->second);
      w = at::from_blob(const_cast<float*>(q.dequant.data()), w.sizes(), at::kFloat)
              .to(w.scalar_type())
              .clone();
    }
    I.modules[i].setattr("weight", w);
    I.state.active[i] = quantized && I.acts[i] ? &*I.acts[i] : nullptr;
  }
}

at::Tensor Simulator::run(const std::vector<at::Tensor>& inputs) {
  auto& I = *impl_;
  SimScope scope(I.state);
  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;
  std::vector<c10::IValue> in(inputs.begin(), inputs.end());
  c10::IValue out = I.model.forward(in);
  if (out.isTuple()) out = out.toTupleRef().elements().at(0);
  return out.toTensor();
}

int format_bits(DType d) {
  return dtype_traits(d).bits;
}

double effective_bits(const std::vector<SimLayer>& layers, const Assignment& a) {
  double bits = 0, n = 0;
  for (const auto& l : layers) {
    auto it = a.find(l.name);
    const DType d = it == a.end() ? DType::kNative : it->second;
    bits += static_cast<double>(format_bits(d)) * static_cast<double>(l.weight_params);
    n += static_cast<double>(l.weight_params);
  }
  return n > 0 ? bits / n : 32.0;
}

}  // namespace tq::tune
