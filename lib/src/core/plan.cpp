#include "taoquant/plan.h"

#include <algorithm>

namespace tq {

namespace {

// Matches a `[...]` class at p[i] (p[i] == '['). Returns the index after the
// closing ']' and sets `ok` when the class is well formed.
size_t match_class(const std::string& p, size_t i, char c, bool& matched, bool& ok) {
  size_t j = i + 1;
  bool negate = false;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
    negate = true;
    ++j;
  }
  bool any = false;
  bool first = true;
  while (j < p.size() && (p[j] != ']' || first)) {
    first = false;
    char lo = p[j];
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      char hi = p[j + 2];
      if (lo <= c && c <= hi) any = true;
      j += 3;
    } else {
      if (lo == c) any = true;
      ++j;
    }
  }
  if (j >= p.size()) {  // no closing bracket: treat '[' literally
    ok = false;
    return i + 1;
  }
  ok = true;
  matched = negate ? !any : any;
  return j + 1;
}

bool match_from(const std::string& p, size_t pi, const std::string& t, size_t ti) {
  while (pi < p.size()) {
    char pc = p[pi];
    if (pc == '*') {
      while (pi < p.size() && p[pi] == '*') ++pi;
      if (pi == p.size()) return true;
      for (size_t k = ti; k <= t.size(); ++k)
        if (match_from(p, pi, t, k)) return true;
      return false;
    }
    if (ti >= t.size()) return false;
    if (pc == '?') {
      ++pi;
      ++ti;
      continue;
    }
    if (pc == '[') {
      bool matched = false, ok = false;
      size_t next = match_class(p, pi, t[ti], matched, ok);
      if (ok) {
        if (!matched) return false;
        pi = next;
        ++ti;
        continue;
      }
    }
    if (pc == '\\' && pi + 1 < p.size()) pc = p[++pi];
    if (pc != t[ti]) return false;
    ++pi;
    ++ti;
  }
  return ti == t.size();
}

int default_axis(LayerKind k) {
  switch (k) {
    case LayerKind::kConvTranspose1d:
    case LayerKind::kConvTranspose2d:
    case LayerKind::kConvTranspose3d:
      return 1;  // weight is [in, out/groups, k...]
    default:
      return 0;
  }
}

TensorQuant default_weight(const Spec& spec, const LayerInfo& layer) {
  TensorQuant q;
  q.dtype = spec.quantize.default_layer_dtype;
  q.granularity = dtype_traits(q.dtype).default_granularity;
  q.axis = default_axis(layer.kind);
  q.symmetric = q.dtype != DType::kUInt8;
  q.observer = spec.quantize.algorithm;
  q.rounding = spec.quantize.algorithms.weight_rounding;
  q.loc = spec.loc("quantize.default_layer_dtype");
  return q;
}

TensorQuant default_activation(const Spec& spec) {
  TensorQuant q;
  q.dtype = spec.quantize.default_activation_dtype;
  q.granularity = Granularity::kPerTensor;
  q.symmetric = dtype_traits(q.dtype).is_float8 || q.dtype == DType::kInt4;
  q.observer = spec.quantize.algorithm;
  q.loc = spec.loc("quantize.default_activation_dtype");
  return q;
}

void apply(TensorQuant& q, const TensorQuantSpec& s, const LayerInfo& layer) {
  if (s.dtype) {
    q.dtype = *s.dtype;
    q.granularity = dtype_traits(q.dtype).default_granularity;
    q.symmetric = q.dtype != DType::kUInt8;
  }
  if (s.granularity) q.granularity = *s.granularity;
  if (s.quant_axis) q.axis = *s.quant_axis;
  if (s.group_size) q.group_size = *s.group_size;
  if (s.symmetric) q.symmetric = *s.symmetric;
  if (s.rounding) q.rounding = *s.rounding;
  if (s.observer) {
    q.observer = *s.observer;
    q.observer_explicit = true;
  }
  if (!s.observer_kwargs.empty()) q.observer_kwargs = s.observer_kwargs;
  q.loc = s.loc;
  (void)layer;
}

void validate_weight(const TensorQuant& q, const LayerInfo& layer, const SourceLoc& loc,
                     const std::string& rule) {
  if (!q.quantized()) return;
  auto allowed = weight_granularities(q.dtype);
  if (std::find(allowed.begin(), allowed.end(), q.granularity) == allowed.end()) {
    const std::string names = join(names_of(allowed));
    throw SpecError(loc, rule + ": granularity '" + std::string(to_string(q.granularity)) +
                             "' is not available for dtype '" + std::string(to_string(q.dtype)) +
                             "' weights (expected one of: " + names + ")");
  }
  int rank = static_cast<int>(layer.weight_shape.size());
  if (q.granularity == Granularity::kPerChannel && (q.axis < 0 || q.axis >= rank)) {
    throw SpecError(loc, rule + ": quant_axis " + std::to_string(q.axis) +
                             " is out of range for layer '" + layer.name + "' whose weight has " +
                             std::to_string(rank) + " dimensions (expected 0.." +
                             std::to_string(rank - 1) + ")");
  }
  if (q.granularity == Granularity::kPerGroup && q.group_size <= 0) {
    throw SpecError(loc,
                    rule + ": group_size must be positive, got " + std::to_string(q.group_size));
  }
  if (q.dtype == DType::kUInt8 && q.symmetric) {
    throw SpecError(loc,
                    rule +
                        ": uint8 weights are affine; 'symmetric: true' is not available for uint8 "
                        "(use int8 for symmetric)");
  }
}

}  // namespace

bool wildcard_match(const std::string& pattern, const std::string& text) {
  return match_from(pattern, 0, text, 0);
}

bool pattern_selects(const std::string& pattern, const LayerInfo& layer) {
  if (!pattern.empty() && pattern[0] == '=')
    return pattern.compare(1, std::string::npos, layer.name) == 0;
  if (wildcard_match(pattern, layer.name)) return true;
  if (wildcard_match(pattern, layer.class_name)) return true;
  std::string kind(to_string(layer.kind));
  return kind != layer.class_name && wildcard_match(pattern, kind);
}

std::string exact_name_pattern(const std::string& name) {
  return "=" + name;
}

std::string TensorQuant::str() const {
  if (!quantized()) return "float";
  std::string s(to_string(dtype));
  switch (granularity) {
    case Granularity::kPerTensor:
      return s + "/per_tensor";
    case Granularity::kPerChannel:
      return s + "/per_channel";
    case Granularity::kPerGroup:
      return s + "/g" + std::to_string(group_size);
  }
  return s;
}

std::string LayerPlan::why_float() const {
  if (skipped) return decided_by;
  if (!float_reason.empty()) return float_reason;
  if (!weights.quantized() && !activations.quantized()) return "native, " + decided_by;
  return "";
}

std::vector<std::string> LayerPlan::algorithms(const Plan& plan) const {
  return layer_algorithms(*this, plan);
}

size_t Plan::num_quantized() const {
  return static_cast<size_t>(std::count_if(layers.begin(), layers.end(),
                                           [](const LayerPlan& l) { return l.quantized(); }));
}

const LayerPlan* Plan::find(const std::string& name) const {
  for (const auto& l : layers)
    if (l.info.name == name) return &l;
  return nullptr;
}

// "spec.yaml:7:5: skip_names[1] 'nothing.here' matches no quantizable layer"
static void warn_unused(Plan& plan, const SourceLoc& loc, const std::string& rule,
                        const std::string& pattern) {
  plan.warnings.push_back(loc.str() + ": " + rule + " " + quote_value(pattern) +
                          " matches no quantizable layer");
}

// How often each quantize.layers rule and skip_names pattern selected a layer.
struct RuleHits {
  std::vector<int> rules, skips;
};

// One layer's plan: the defaults, then every `layers` rule that selects it
// (the last wins), then skip_names (the first names it).
static LayerPlan plan_layer(const Spec& spec, const LayerInfo& layer, RuleHits& hits) {
  const auto& q = spec.quantize;
  LayerPlan lp;
  lp.info = layer;
  lp.weights = default_weight(spec, layer);
  lp.activations = default_activation(spec);
  lp.decided_by = "default";
  SourceLoc decided_loc = spec.loc("quantize.default_layer_dtype");
  lp.loc = decided_loc;
  for (size_t i = 0; i < q.layers.size(); ++i) {
    const auto& rule = q.layers[i];
    if (!pattern_selects(rule.module_name, layer)) continue;
    ++hits.rules[i];
    if (rule.weights) apply(lp.weights, *rule.weights, layer);
    if (rule.activations) apply(lp.activations, *rule.activations, layer);
    lp.rule_index = static_cast<int>(i);
    lp.decided_by = "layers[" + std::to_string(i) + "] '" + rule.module_name + "'";
    decided_loc = rule.loc;
    lp.loc = rule.loc;
  }
  for (size_t j = 0; j < q.skip_names.size(); ++j) {
    if (!pattern_selects(q.skip_names[j].pattern, layer)) continue;
    ++hits.skips[j];
    if (!lp.skipped) {
      lp.skipped = true;
      lp.decided_by = "skip_names[" + std::to_string(j) + "] '" + q.skip_names[j].pattern + "'";
      lp.loc = q.skip_names[j].loc;
    }
  }
  if (lp.skipped) {
    lp.weights.dtype = DType::kNative;
    lp.activations.dtype = DType::kNative;
  } else {
    validate_weight(lp.weights, layer, decided_loc, lp.decided_by);
  }
  return lp;
}

// The plan's warnings: activations that static_ptq leaves native, and rules
// and patterns that select nothing.
static void warn_plan(const Spec& spec, const RuleHits& hits, Plan& plan) {
  const auto& q = spec.quantize;
  if (q.mode == Mode::kStatic &&
      std::none_of(plan.layers.begin(), plan.layers.end(), [](const LayerPlan& lp) {
        return lp.quantized() && lp.activations.quantized();
      }))
    plan.warnings.push_back(
        "static_ptq quantized no activation: they are native. Set "
        "quantize.default_activation_dtype=int8 (or remove it: static_ptq then defaults to "
        "int8), or use quantize.mode=weight_only_ptq");
  for (size_t i = 0; i < q.layers.size(); ++i)
    if (hits.rules[i] == 0)
      warn_unused(plan, q.layers[i].loc, "layers[" + std::to_string(i) + "] module_name",
                  q.layers[i].module_name);
  for (size_t j = 0; j < q.skip_names.size(); ++j)
    if (hits.skips[j] == 0)
      warn_unused(plan, q.skip_names[j].loc, "skip_names[" + std::to_string(j) + "]",
                  q.skip_names[j].pattern);
}

Plan build_plan(const Spec& spec, const std::vector<LayerInfo>& layers) {
  const auto& q = spec.quantize;
  Plan plan;
  plan.mode = q.mode;
  plan.algorithm = q.algorithm;
  plan.algorithms = q.algorithms;
  plan.algorithm_loc = spec.loc("quantize.algorithm");
  plan.device = q.device;
  RuleHits hits{std::vector<int>(q.layers.size(), 0), std::vector<int>(q.skip_names.size(), 0)};
  bool ignored_activations = false;
  for (const auto& layer : layers) {
    LayerPlan lp = plan_layer(spec, layer, hits);
    if (q.mode == Mode::kWeightOnly && lp.activations.quantized()) {
      ignored_activations = true;
      lp.activations.dtype = DType::kNative;
    }
    plan.layers.push_back(std::move(lp));
  }
  if (ignored_activations)
    plan.warnings.push_back("activation dtypes are ignored in mode weight_only_ptq");
  warn_plan(spec, hits, plan);
  return plan;
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json layers = nlohmann::json::array();
  auto tq_json = [](const TensorQuant& t) {
    nlohmann::json j{{"dtype", std::string(to_string(t.dtype))}, {"format", t.str()}};
    if (t.quantized()) {
      j["granularity"] = std::string(to_string(t.granularity));
      j["symmetric"] = t.symmetric;
      if (t.granularity == Granularity::kPerChannel) j["axis"] = t.axis;
      if (t.granularity == Granularity::kPerGroup) j["group_size"] = t.group_size;
      j["observer"] = t.observer;
      if (!t.observer_kwargs.empty()) j["observer_kwargs"] = t.observer_kwargs;
      if (t.rounding != Rounding::kNearest) j["rounding"] = std::string(to_string(t.rounding));
    }
    return j;
  };
  for (const auto& l : plan.layers) {
    layers.push_back({{"name", l.info.name},
                      {"class", l.info.class_name},
                      {"kind", std::string(to_string(l.info.kind))},
                      {"weight_shape", l.info.weight_shape},
                      {"weights", tq_json(l.weights)},
                      {"activations", tq_json(l.activations)},
                      {"decided_by", l.decided_by},
                      {"skipped", l.skipped},
                      {"quantized", l.quantized()},
                      {"algorithms", l.algorithms(plan)}});
    if (!l.quantized()) layers.back()["float_reason"] = l.why_float();
    if (!l.equalized_with.empty()) layers.back()["equalized_with"] = l.equalized_with;
    if (!l.smoothed_by.empty()) layers.back()["smoothed_by"] = l.smoothed_by;
  }
  return {{"mode", std::string(to_string(plan.mode))},
          {"algorithm", plan.algorithm},
          {"algorithms", algorithms_to_json(plan.algorithms)},
          {"backend_options", plan.options.values()},
          {"layers", layers},
          {"num_layers", plan.layers.size()},
          {"num_quantized", plan.num_quantized()},
          {"warnings", plan.warnings}};
}

}  // namespace tq
