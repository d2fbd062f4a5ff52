#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "taoquant/backend.h"

namespace tq {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* r =
      new BackendRegistry();  // never destroyed: plugins may outlive statics
  return *r;
}

static std::string where(const BackendInfo& b) {
  return b.origin == "built-in" ? "built-in, registered at " + b.registered_at
                                : "plugin " + b.origin + " (registered at " + b.registered_at + ")";
}

static bool valid_backend_name(const std::string& n) {
  if (n.empty() || n.front() == '-' || n.front() == '.') return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return false;
  return true;
}

// A registration that cannot work is refused with where it came from.
static void validate_backend_info(const BackendInfo& b) {
  auto bad = [&](const std::string& what) {
    throw Error(ExitCode::kRuntime, "backend '" + b.name + "' (" + where(b) + "): " + what);
  };
  if (!valid_backend_name(b.name)) bad("invalid name; use letters, digits, '_', '-' and '.'");
  for (const auto& a : b.aliases)
    if (!valid_backend_name(a.name)) bad("invalid alias '" + a.name + "'");
  if (!b.factory) bad("no factory");
  if (b.caps.modes.empty()) bad("declares no modes (Capabilities::modes)");
  const auto& c = b.caps.constraints;
  if (!(c.min_scale >= 0) || !std::isfinite(c.min_scale))
    bad("constraints.min_scale must be a finite number >= 0");
  if (c.quant_min && c.quant_max && *c.quant_min >= *c.quant_max)
    bad("constraints.quant_min (" + std::to_string(*c.quant_min) + ") must be below quant_max (" +
        std::to_string(*c.quant_max) + ")");
  for (const auto& p : b.caps.fusion_patterns)
    if (p.empty() || p.front() == '-' || p.back() == '-' ||
        p.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
      bad("fusion pattern '" + p + "' is not of the form kind-kind (e.g. conv-bn-relu)");
}

void BackendRegistry::add(BackendInfo info) {
  if (pending_mode_) {
    // Never throws while a plugin loads (this runs inside dlopen); the checks
    // run in commit_pending().
    info.origin = current_origin_;
    pending_.push_back(std::move(info));
    return;
  }
  add_checked(std::move(info));
}

void BackendRegistry::begin_pending(const std::string& origin) {
  pending_mode_ = true;
  pending_.clear();
  current_origin_ = origin;
}

void BackendRegistry::commit_pending() {
  pending_mode_ = false;
  current_origin_ = "built-in";
  auto list = std::move(pending_);
  pending_.clear();
  // All or nothing: a plugin with one bad registration adds none.
  const size_t first = backends_.size();
  try {
    for (auto& b : list) add_checked(std::move(b));
  } catch (...) {
    backends_.erase(backends_.begin() + static_cast<std::ptrdiff_t>(first), backends_.end());
    throw;
  }
}

void BackendRegistry::drop_pending() {
  pending_mode_ = false;
  current_origin_ = "built-in";
  pending_.clear();
}

void BackendRegistry::add_checked(BackendInfo info) {
  validate_backend_info(info);
  std::vector<std::string> names{info.name};
  for (const auto& a : info.aliases) names.push_back(a.name);
  for (const auto& n : names) {
    for (const auto& b : backends_) {
      bool clash = b.name == n;
      for (const auto& a : b.aliases) clash = clash || a.name == n;
      if (clash)
        throw Error(ExitCode::kRuntime, "backend name '" + n + "' is registered twice: first by " +
                                            where(b) + ", again by " + where(info));
    }
  }
  backends_.push_back(std::move(info));
}

const BackendInfo* BackendRegistry::find(const std::string& name) const {
  for (const auto& b : backends_) {
    if (b.name == name) return &b;
    for (const auto& a : b.aliases)
      if (a.name == name) return &b;
  }
  return nullptr;
}

std::vector<std::string> BackendRegistry::all_names() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) {
    out.push_back(b.name);
    for (const auto& a : b.aliases) out.push_back(a.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

BackendRegistry::Resolved BackendRegistry::resolve(const std::string& name,
                                                   const SourceLoc& loc) const {
  Resolved r;
  r.requested = name;
  r.info = find(name);
  if (!r.info) {
    std::string known;
    for (const auto& n : all_names()) known += (known.empty() ? "" : ", ") + n;
    throw SpecError(loc, "quantize.backend: unknown backend '" + name + "' (available: " + known +
                             ")" + did_you_mean(name, all_names()));
  }
  r.modes = r.info->caps.modes;
  for (const auto& a : r.info->aliases) {
    if (a.name != name) continue;
    r.alias = &a;
    if (!a.modes.empty()) r.modes = a.modes;
  }
  return r;
}

std::vector<const BackendInfo*> BackendRegistry::list() const {
  std::vector<const BackendInfo*> out;
  for (const auto& b : backends_) out.push_back(&b);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

namespace {

template <class E>
std::string join_enum(const std::vector<E>& v) {
  std::string s;
  for (auto e : v) s += (s.empty() ? "" : ", ") + std::string(to_string(e));
  return s.empty() ? "none" : s;
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

void check_dtype(const Spec& spec, const BackendRegistry::Resolved& b, DType d, bool weights,
                 const std::string& key) {
  if (d == DType::kNative) return;
  const auto* allowed_p = weights ? &b.info->caps.weight_dtypes : &b.info->caps.activation_dtypes;
  for (const auto& dc : b.info->caps.dtype_configs)
    if (dc.mode == spec.quantize.mode)
      allowed_p = weights ? &dc.weight_dtypes : &dc.activation_dtypes;
  const auto& allowed = *allowed_p;
  if (contains(allowed, d)) return;
  throw SpecError(spec.loc(key), key + ": " + backend_label(b) + " does not support " +
                                     (weights ? "weight" : "activation") + " dtype '" +
                                     std::string(to_string(d)) + "' in mode " +
                                     std::string(to_string(spec.quantize.mode)) +
                                     " (supported: " + join_enum(allowed) + ")");
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
  auto int_kwarg = [&](const char* name) -> std::optional<long long> {
    auto it = kw.find(name);
    if (it == kw.end() || it->is_null()) return std::nullopt;
    const bool integral =
        it->is_number_integer() ||
        (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>());
    if (!integral)
      throw SpecError(spec.loc(kkey + "." + name),
                      kkey + "." + name + ": expected an integer, got " + it->dump());
    return it->is_number_integer() ? it->get<long long>()
                                   : static_cast<long long>(it->get<double>());
  };
  auto qmin = int_kwarg("quant_min"), qmax = int_kwarg("quant_max");
  if (qmin && c.quant_min && *qmin < *c.quant_min)
    throw SpecError(spec.loc(kkey + ".quant_min"),
                    kkey + ".quant_min: " + std::to_string(*qmin) +
                        " is below the lower bound of " + backend_label(b) +
                        " (allowed: quant_min >= " + std::to_string(*c.quant_min) + ")");
  if (qmax && c.quant_max && *qmax > *c.quant_max)
    throw SpecError(spec.loc(kkey + ".quant_max"),
                    kkey + ".quant_max: " + std::to_string(*qmax) +
                        " is above the upper bound of " + backend_label(b) +
                        " (allowed: quant_max <= " + std::to_string(*c.quant_max) + ")");
  if (qmin && qmax && *qmin >= *qmax)
    throw SpecError(spec.loc(kkey + ".quant_min"), kkey + ": quant_min " + std::to_string(*qmin) +
                                                       " must be below quant_max " +
                                                       std::to_string(*qmax));
  auto pot = kw.find("pot_scale");
  if (pot != kw.end() && pot->is_boolean() && !pot->get<bool>() && c.power_of_two_scale)
    throw SpecError(
        spec.loc(kkey + ".pot_scale"),
        kkey + ".pot_scale: " + backend_label(b) +
            " supports power-of-two scales only (allowed: pot_scale: true, or leave it unset)");
}

}  // namespace

void check_capabilities(const Spec& spec, const BackendRegistry::Resolved& b) {
  const auto& q = spec.quantize;
  const auto& caps = b.info->caps;
  if (!contains(b.modes, q.mode)) {
    std::string msg = "quantize.mode: " + backend_label(b) + " does not support mode '" +
                      std::string(to_string(q.mode)) + "' (supported: " + join_enum(b.modes) + ")";
    if (b.alias && contains(caps.modes, q.mode))
      msg += "; use backend '" + b.info->name + "' for " + std::string(to_string(q.mode));
    throw SpecError(spec.loc("quantize.mode"), msg);
  }
  bool acts = q.mode != Mode::kWeightOnly;
  check_dtype(spec, b, q.default_layer_dtype, true, "quantize.default_layer_dtype");
  if (acts)
    check_dtype(spec, b, q.default_activation_dtype, false, "quantize.default_activation_dtype");
  for (size_t i = 0; i < q.layers.size(); ++i) {
    const auto& r = q.layers[i];
    std::string base = "quantize.layers." + std::to_string(i);
    for (int w = 0; w < 2; ++w) {
      const auto& t = w == 0 ? r.weights : r.activations;
      if (!t) continue;
      std::string key = base + (w == 0 ? ".weights" : ".activations");
      if (t->dtype && (w == 0 || acts)) check_dtype(spec, b, *t->dtype, w == 0, key + ".dtype");
      if (t->granularity && !contains(caps.granularities, *t->granularity))
        throw SpecError(spec.loc(key + ".granularity"),
                        key + ".granularity: " + backend_label(b) +
                            " does not support granularity '" +
                            std::string(to_string(*t->granularity)) +
                            "' (supported: " + join_enum(caps.granularities) + ")");
      if (t->symmetric && !*t->symmetric && caps.constraints.symmetric_only)
        throw SpecError(spec.loc(key + ".symmetric"),
                        key + ".symmetric: " + backend_label(b) +
                            " supports symmetric quantization only (allowed: symmetric: true)");
      if (w == 0 || acts) check_constraint_kwargs(spec, b, *t, key);
    }
  }
}

void check_plan_capabilities(const Spec& spec, const Plan& plan,
                             const BackendRegistry::Resolved& b) {
  const auto& caps = b.info->caps;
  for (const auto& l : plan.layers) {
    if (!l.quantized()) continue;
    if (!contains(caps.layer_kinds, l.info.kind)) {
      std::string key = l.rule_index >= 0 ? "quantize.layers." + std::to_string(l.rule_index)
                                          : "quantize.default_layer_dtype";
      throw SpecError(spec.loc(key), "layer '" + l.info.name + "' (" + l.info.class_name +
                                         ", decided by " + l.decided_by + "): " + backend_label(b) +
                                         " cannot quantize layer kind " +
                                         std::string(to_string(l.info.kind)) + " (supported: " +
                                         join_enum(caps.layer_kinds) + "); add it to skip_names");
    }
    for (int w = 0; w < 2; ++w) {
      const TensorQuant& t = w == 0 ? l.weights : l.activations;
      if (!t.quantized() || (w == 1 && plan.mode == Mode::kWeightOnly)) continue;
      if (!contains(caps.granularities, t.granularity)) {
        std::string key =
            l.rule_index >= 0 ? "quantize.layers." + std::to_string(l.rule_index) : "quantize";
        throw SpecError(spec.loc(key), "layer '" + l.info.name + "' (decided by " + l.decided_by +
                                           "): " + backend_label(b) + " does not support " +
                                           (w == 0 ? "weight" : "activation") + " granularity '" +
                                           std::string(to_string(t.granularity)) +
                                           "' (supported: " + join_enum(caps.granularities) + ")");
      }
    }
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
  return {{"name", b.name},
          {"description", b.description},
          {"aliases", aliases},
          {"modes", names(b.caps.modes)},
          {"weight_dtypes", names(b.caps.weight_dtypes)},
          {"activation_dtypes", names(b.caps.activation_dtypes)},
          {"granularities", names(b.caps.granularities)},
          {"layer_kinds", names(b.caps.layer_kinds)},
          {"fusion_patterns", b.caps.fusion_patterns},
          {"dtype_configs",
           [&] {
             nlohmann::json a = nlohmann::json::array();
             for (const auto& dc : b.caps.dtype_configs)
               a.push_back({{"mode", std::string(to_string(dc.mode))},
                            {"weight_dtypes", names(dc.weight_dtypes)},
                            {"activation_dtypes", names(dc.activation_dtypes)}});
             return a;
           }()},
          {"constraints", cons},
          {"origin", b.origin},
          {"registered_at", b.registered_at}};
}

}  // namespace tq
