#include <algorithm>

#include "taoquant/backend.h"

namespace tq {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* r = new BackendRegistry();  // never destroyed: plugins may outlive statics
  return *r;
}

static std::string where(const BackendInfo& b) {
  return b.origin == "built-in" ? "built-in, registered at " + b.registered_at
                                : "plugin " + b.origin + " (registered at " + b.registered_at + ")";
}

void BackendRegistry::add(BackendInfo info) {
  if (info.origin == "built-in") info.origin = current_origin_;
  if (pending_mode_) {
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
  for (auto& b : list) add_checked(std::move(b));
}

void BackendRegistry::drop_pending() {
  pending_mode_ = false;
  current_origin_ = "built-in";
  pending_.clear();
}

void BackendRegistry::add_checked(BackendInfo info) {
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

BackendRegistry::Resolved BackendRegistry::resolve(const std::string& name, const SourceLoc& loc) const {
  Resolved r;
  r.requested = name;
  r.info = find(name);
  if (!r.info) {
    std::string known;
    for (const auto& n : all_names()) known += (known.empty() ? "" : ", ") + n;
    throw SpecError(loc, "quantize.backend: unknown backend '" + name + "' (available: " + known + ")" +
                             did_you_mean(name, all_names()));
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
  const auto& allowed = weights ? b.info->caps.weight_dtypes : b.info->caps.activation_dtypes;
  if (contains(allowed, d)) return;
  throw SpecError(spec.loc(key), key + ": " + backend_label(b) + " does not support " +
                                     (weights ? "weight" : "activation") + " dtype '" +
                                     std::string(to_string(d)) + "' (supported: " + join_enum(allowed) + ")");
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
  bool acts = q.mode == Mode::kStatic;
  check_dtype(spec, b, q.default_layer_dtype, true, "quantize.default_layer_dtype");
  if (acts) check_dtype(spec, b, q.default_activation_dtype, false, "quantize.default_activation_dtype");
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
                        key + ".granularity: " + backend_label(b) + " does not support granularity '" +
                            std::string(to_string(*t->granularity)) +
                            "' (supported: " + join_enum(caps.granularities) + ")");
      if (t->symmetric && !*t->symmetric && caps.constraints.symmetric_only)
        throw SpecError(spec.loc(key + ".symmetric"),
                        key + ".symmetric: " + backend_label(b) + " supports symmetric quantization only");
    }
  }
}

void check_plan_capabilities(const Spec& spec, const Plan& plan, const BackendRegistry::Resolved& b) {
  const auto& caps = b.info->caps;
  for (const auto& l : plan.layers) {
    if (!l.quantized()) continue;
    if (!contains(caps.layer_kinds, l.info.kind)) {
      std::string key = l.rule_index >= 0 ? "quantize.layers." + std::to_string(l.rule_index)
                                          : "quantize.default_layer_dtype";
      throw SpecError(spec.loc(key), "layer '" + l.info.name + "' (" + l.info.class_name + ", decided by " +
                                         l.decided_by + "): " + backend_label(b) +
                                         " cannot quantize layer kind " + std::string(to_string(l.info.kind)) +
                                         " (supported: " + join_enum(caps.layer_kinds) +
                                         "); add it to skip_names");
    }
    if (l.weights.quantized() && !contains(caps.granularities, l.weights.granularity))
      throw SpecError(spec.loc("quantize"), "layer '" + l.info.name + "': " + backend_label(b) +
                                                " does not support granularity '" +
                                                std::string(to_string(l.weights.granularity)) +
                                                "' (supported: " + join_enum(caps.granularities) + ")");
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
    aliases.push_back({{"name", a.name}, {"modes", names(a.modes.empty() ? b.caps.modes : a.modes)},
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
          {"constraints", cons},
          {"origin", b.origin},
          {"registered_at", b.registered_at}};
}

}  // namespace tq
