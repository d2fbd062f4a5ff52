// Backend capability tables: what a backend does per mode, checked against
// the spec before the model loads and applied to the plan after it loads.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "core/messages.h"
#include "taoquant/backend.h"
#include "taoquant/observer.h"
#include "taoquant/strings.h"

namespace tq {

namespace {

template <class E>
std::string join_enum(const std::vector<E>& v) {
  return v.empty() ? "none" : join(names_of(v));
}

template <class E>
bool contains(const std::vector<E>& v, E e) {
  return std::find(v.begin(), v.end(), e) != v.end();
}

std::string backend_label(const BackendRegistry::Resolved& b) {
  std::string s = "backend '" + b.requested + "'";
  if (b.requested != b.info->name) s += " (= '" + b.info->name + "')";
  return s;
}

// Granularities a spec may ask for in a mode: the mode's own and those it narrows.
std::vector<Granularity> accepted_granularities(const ModeCaps& mc) {
  std::vector<Granularity> out = mc.granularities;
  for (const auto& [from, to] : mc.granularity_as)
    if (!contains(out, from)) out.push_back(from);
  return out;
}

void check_dtype(const Spec& spec, const BackendRegistry::Resolved& b, const ModeCaps& mc, DType d,
                 bool weights, const std::string& key) {
  if (d == DType::kNative) return;
  const auto& allowed = weights ? mc.weight_dtypes : mc.activation_dtypes;
  if (contains(allowed, d)) return;
  throw SpecError(spec.loc(key), key + ": " + backend_label(b) + " does not support " +
                                     (weights ? "weight" : "activation") + " dtype '" +
                                     std::string(to_string(d)) + "' in mode " +
                                     std::string(to_string(mc.mode)) +
                                     " (supported: " + join_enum(allowed) + ")");
}

std::optional<long long> int_kwarg(const Spec& spec, const nlohmann::json& kw,
                                   const std::string& kkey, const char* name) {
  auto it = kw.find(name);
  if (it == kw.end() || it->is_null()) return std::nullopt;
  const bool integral =
      it->is_number_integer() ||
      (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>());
  if (!integral)
    throw SpecError(spec.loc(kkey + "." + name),
                    kkey + "." + name + ": expected an integer, got " + it->dump());
  return it->is_number_integer() ? it->get<long long>() : static_cast<long long>(it->get<double>());
}

// observer_or_fake_quant_kwargs that contradict the backend's declared
// qparam constraints (PyTorch's DTypeWithConstraints bounds, MQBench's
// pot_scale): refused before any work, naming the bound.
void check_constraint_kwargs(const Spec& spec, const BackendRegistry::Resolved& b,
                             const TensorQuantSpec& t, const std::string& key) {
  const auto& c = b.info->caps.constraints;
  const auto& kw = t.observer_kwargs;
  if (!kw.is_object()) return;
  const std::string kkey = key + ".observer_or_fake_quant_kwargs";
  auto qmin = int_kwarg(spec, kw, kkey, "quant_min"), qmax = int_kwarg(spec, kw, kkey, "quant_max");
  auto fail = [&](const std::string& k, const std::string& msg) {
    throw SpecError(spec.loc(kkey + k), kkey + k + ": " + msg);
  };
  if (qmin && c.quant_min && *qmin < *c.quant_min)
    fail(".quant_min", std::to_string(*qmin) + " is below the lower bound of " + backend_label(b) +
                           " (allowed: quant_min >= " + std::to_string(*c.quant_min) + ")");
  if (qmax && c.quant_max && *qmax > *c.quant_max)
    fail(".quant_max", std::to_string(*qmax) + " is above the upper bound of " + backend_label(b) +
                           " (allowed: quant_max <= " + std::to_string(*c.quant_max) + ")");
  if (qmin && qmax && *qmin >= *qmax)
    throw SpecError(spec.loc(kkey + ".quant_min"), kkey + ": quant_min " + std::to_string(*qmin) +
                                                       " must be below quant_max " +
                                                       std::to_string(*qmax));
  auto pot = kw.find("pot_scale");
  if (pot != kw.end() && pot->is_boolean() && !pot->get<bool>() && c.power_of_two_scale)
    fail(".pot_scale", backend_label(b) +
                           " supports power-of-two scales only (allowed: pot_scale: true, or "
                           "leave it unset)");
}

void check_tensor_rule(const Spec& spec, const BackendRegistry::Resolved& b, const ModeCaps& mc,
                       const TensorQuantSpec& t, bool weights, const std::string& key) {
  const bool acts = mc.mode != Mode::kWeightOnly;
  if (!weights && !acts) return;
  if (t.dtype) check_dtype(spec, b, mc, *t.dtype, weights, key + ".dtype");
  const auto grans = accepted_granularities(mc);
  if (t.granularity && !contains(grans, *t.granularity))
    throw SpecError(spec.loc(key + ".granularity"), key + ".granularity: " + backend_label(b) +
                                                        " does not support granularity '" +
                                                        std::string(to_string(*t.granularity)) +
                                                        "' (supported: " + join_enum(grans) + ")");
  if (t.symmetric && !*t.symmetric && b.info->caps.constraints.symmetric_only)
    throw SpecError(spec.loc(key + ".symmetric"),
                    key + ".symmetric: " + backend_label(b) +
                        " supports symmetric quantization only (allowed: symmetric: true)");
  check_constraint_kwargs(spec, b, t, key);
}

// An observer name (quantize.algorithm, observer_or_fake_quant) must be in
// the observer registry, which plugins extend: checked before the model loads.
void check_observer_name(const Spec& spec, const std::string& name, const std::string& key) {
  const auto names = ObserverRegistry::instance().names();
  if (contains(names, name)) return;
  throw SpecError(spec.loc(key), key + ": " + quote_value(name) +
                                     " is not a registered observer (registered: " + join(names) +
                                     ")" + did_you_mean(name, names));
}

}  // namespace

ModeCaps Capabilities::for_mode(Mode m) const {
  ModeCaps mc;
  mc.mode = m;
  for (const auto& pm : per_mode)
    if (pm.mode == m) mc = pm;
  if (mc.weight_dtypes.empty()) mc.weight_dtypes = weight_dtypes;
  if (mc.activation_dtypes.empty()) mc.activation_dtypes = activation_dtypes;
  if (mc.layer_kinds.empty()) mc.layer_kinds = layer_kinds;
  if (mc.granularities.empty()) mc.granularities = granularities;
  if (m == Mode::kWeightOnly) mc.activation_dtypes.clear();
  return mc;
}

namespace {

// Whether a pass can run in `mode` with this backend: a library stage runs
// it, or the backend does (static bias correction, the one pass a backend
// runs: ModeCaps::bias_correction).
bool runs_in(const AlgorithmPass& p, Mode mode, const ModeCaps& mc) {
  return !p.stage(mode).empty() || mc.bias_correction;
}

// The pass table's keys that apply in `mode` with this backend (backends --json).
nlohmann::json algorithms_in(Mode mode, const ModeCaps& mc) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : algorithm_passes())
    if (std::find(p.modes.begin(), p.modes.end(), mode) != p.modes.end() && runs_in(p, mode, mc))
      out.push_back(std::string(p.key));
  return out;
}

}  // namespace

BackendOptions check_capabilities(const Spec& spec, const BackendRegistry::Resolved& b) {
  const auto& q = spec.quantize;
  if (!contains(b.modes, q.mode)) {
    std::string msg = "quantize.mode: " + backend_label(b) + " does not support mode '" +
                      std::string(to_string(q.mode)) + "' (supported: " + join_enum(b.modes) + ")";
    if (b.alias && contains(b.info->caps.modes, q.mode))
      msg += "; use backend '" + b.info->name + "' for " + std::string(to_string(q.mode));
    throw SpecError(spec.loc("quantize.mode"), msg);
  }
  const ModeCaps mc = b.info->caps.for_mode(q.mode);
  for (const auto& p : algorithm_passes())
    if (p.on(q.algorithms) && !runs_in(p, q.mode, mc))
      throw SpecError(p.loc(q.algorithms),
                      "quantize." + std::string(p.key) + ": " + backend_label(b) + " rounds its " +
                          std::string(to_string(q.mode)) + " weights itself and does not apply " +
                          std::string(p.key) + " (backends that do: libtorch, fakequant)");
  check_observer_name(spec, q.algorithm, "quantize.algorithm");
  check_dtype(spec, b, mc, q.default_layer_dtype, true, "quantize.default_layer_dtype");
  if (q.mode != Mode::kWeightOnly)
    check_dtype(spec, b, mc, q.default_activation_dtype, false,
                "quantize.default_activation_dtype");
  for (size_t i = 0; i < q.layers.size(); ++i) {
    const auto& r = q.layers[i];
    const std::string base = "quantize.layers." + std::to_string(i);
    for (const auto* t : {&r.weights, &r.activations}) {
      if (!*t) continue;
      const bool weights = t == &r.weights;
      const std::string key = base + (weights ? ".weights" : ".activations");
      check_tensor_rule(spec, b, mc, **t, weights, key);
      if ((*t)->observer)
        check_observer_name(spec, *(*t)->observer, key + ".observer_or_fake_quant");
    }
  }
  return resolve_options(b.info->caps.options, q.backend_kwargs, q.mode, backend_label(b),
                         spec.locs, spec.loc("quantize"));
}

namespace {

// Why the mode keeps a planned layer float ("" if it quantizes it).
std::string mode_float_reason(const ModeCaps& mc, const LayerPlan& lp) {
  if (!contains(mc.layer_kinds, lp.info.kind))
    return std::string(to_string(lp.info.kind)) + " has no " + mc.kernel;
  if (mc.needs_quantized_weights && !lp.weights.quantized())
    return "weights native: " + mc.kernel + " need quantized weights";
  if (mc.needs_quantized_activations && !lp.activations.quantized())
    return "activations native: " + mc.kernel +
           " need quantized activations (set default_activation_dtype or the layer's "
           "activations dtype)";
  return "";
}

// Rewrites the formats the mode narrows; returns one warning per narrowing.
void narrow_formats(const ModeCaps& mc, const std::string& who, Plan& plan) {
  std::map<std::string, size_t> counts;
  for (auto& lp : plan.layers) {
    if (!lp.quantized()) continue;
    for (const auto& [from, to] : mc.activation_as)
      if (lp.activations.dtype == from) {
        lp.activations.dtype = to;
        lp.activations.symmetric = to != DType::kUInt8 && lp.activations.symmetric;
        ++counts["activations " + std::string(to_string(from)) + " are computed as " +
                 std::string(to_string(to))];
      }
    for (const auto& [from, to] : mc.granularity_as)
      if (lp.weights.quantized() && lp.weights.granularity == from) {
        lp.weights.granularity = to;
        ++counts["weights " + std::string(to_string(from)) + " are stored " +
                 std::string(to_string(to))];
      }
  }
  for (const auto& [what, n] : counts)
    plan.warnings.push_back(who + " " + std::string(to_string(mc.mode)) + ": " + what + " (" +
                            mc.kernel + "; " + std::to_string(n) + " layer" + (n == 1 ? "" : "s") +
                            ")");
}

}  // namespace

void apply_capabilities(const Spec& spec, Plan& plan, const BackendRegistry::Resolved& b,
                        BackendOptions options) {
  const auto& caps = b.info->caps;
  const ModeCaps mc = caps.for_mode(plan.mode);
  plan.backend_requested = b.requested;
  plan.backend_resolved = b.info->name;
  plan.options = std::move(options);
  plan.constraints = caps.constraints;
  for (auto& l : plan.layers) {
    if (!l.quantized()) continue;
    if (!contains(caps.layer_kinds, l.info.kind))
      throw SpecError(l.loc.line ? l.loc : spec.loc("quantize.default_layer_dtype"),
                      "layer '" + l.info.name + "' (" + l.info.class_name + ", decided by " +
                          l.decided_by + "): " + backend_label(b) + " cannot quantize layer kind " +
                          std::string(to_string(l.info.kind)) + " (supported: " +
                          join_enum(caps.layer_kinds) + "); add it to skip_names");
    l.float_reason = mode_float_reason(mc, l);
  }
  narrow_formats(mc, backend_label(b), plan);
  const auto grans = accepted_granularities(mc);
  for (const auto& l : plan.layers) {
    if (!l.quantized() || !l.weights.quantized() ||
        contains(mc.granularities, l.weights.granularity))
      continue;
    throw SpecError(l.loc.line ? l.loc : spec.loc("quantize"),
                    "layer '" + l.info.name + "' (decided by " + l.decided_by +
                        "): " + backend_label(b) + " does not support weight granularity '" +
                        std::string(to_string(l.weights.granularity)) +
                        "' (supported: " + join_enum(grans) + ")");
  }
}

nlohmann::json backend_to_json(const BackendInfo& b) {
  auto names = [](auto const& v) {
    nlohmann::json a = nlohmann::json::array();
    for (auto e : v) a.push_back(std::string(to_string(e)));
    return a;
  };
  nlohmann::json aliases = nlohmann::json::array();
  for (const auto& a : b.aliases)
    aliases.push_back({{"name", a.name},
                       {"modes", names(a.modes.empty() ? b.caps.modes : a.modes)},
                       {"note", a.note}});
  const auto& c = b.caps.constraints;
  nlohmann::json cons{{"symmetric_only", c.symmetric_only},
                      {"power_of_two_scale", c.power_of_two_scale},
                      {"min_scale", c.min_scale}};
  if (c.quant_min) cons["quant_min"] = *c.quant_min;
  if (c.quant_max) cons["quant_max"] = *c.quant_max;
  nlohmann::json per_mode = nlohmann::json::array();
  for (auto m : b.caps.modes) {
    const ModeCaps mc = b.caps.for_mode(m);
    per_mode.push_back({{"mode", std::string(to_string(m))},
                        {"weight_dtypes", names(mc.weight_dtypes)},
                        {"activation_dtypes", names(mc.activation_dtypes)},
                        {"layer_kinds", names(mc.layer_kinds)},
                        {"granularities", names(mc.granularities)},
                        {"kernel", mc.kernel},
                        {"bias_correction", m == Mode::kWeightOnly || mc.bias_correction},
                        {"algorithms", algorithms_in(m, mc)},
                        {"times_model", mc.times_model},
                        {"quantizes_unowned_calls", mc.quantizes_unowned_calls}});
  }
  return {{"name", b.name},
          {"description", b.description},
          {"aliases", aliases},
          {"modes", names(b.caps.modes)},
          {"weight_dtypes", names(b.caps.weight_dtypes)},
          {"activation_dtypes", names(b.caps.activation_dtypes)},
          {"granularities", names(b.caps.granularities)},
          {"layer_kinds", names(b.caps.layer_kinds)},
          {"per_mode", per_mode},
          {"options", options_to_json(b.caps.options)},
          {"constraints", cons},
          {"origin", b.origin},
          {"registered_at", b.registered_at}};
}

}  // namespace tq
