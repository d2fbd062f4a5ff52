// The tuned spec: written as YAML (spec_yaml), with one exact-name rule per
// quantized layer, and checked to plan what tune chose.
#include "tuned_spec.h"

#include <algorithm>
#include <cctype>

#include "taoquant/error.h"
#include "taoquant/tune.h"

namespace tq {

namespace {

// A key as YAML reads it back: plain when it is a word, else quoted.
std::string key_text(const std::string& k) {
  const bool word = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  return word ? k : nlohmann::json(k).dump();
}

// A value in YAML flow style: {key: value, ...}, [a, b]; strings quoted
// (JSON's escapes are YAML's), so that they read back as strings.
std::string flow(const nlohmann::json& v) {
  std::string out;
  if (v.is_object()) {
    for (const auto& [k, x] : v.items())
      out += (out.empty() ? "" : ", ") + key_text(k) + ": " + flow(x);
    return "{" + out + "}";
  }
  if (v.is_array()) {
    for (const auto& x : v) out += (out.empty() ? "" : ", ") + flow(x);
    return "[" + out + "]";
  }
  return v.dump();
}

void emit_yaml(const nlohmann::json& j, const std::string& indent, std::string& out) {
  for (const auto& [key, v] : j.items()) {
    out += indent + key_text(key) + ":";
    if (v.is_object() && !v.empty()) {
      out += "\n";
      emit_yaml(v, indent + "  ", out);
    } else if (v.is_array() && !v.empty()) {
      out += "\n";
      for (const auto& item : v) out += indent + "  - " + flow(item) + "\n";
    } else {
      out += " " + flow(v) + "\n";
    }
  }
}

}  // namespace

std::string spec_yaml(const nlohmann::json& tree) {
  std::string out =
      "# Written by tao-quant tune: an ordinary spec (tao-quant quantize -e "
      "this file reproduces the tuned artifact).\n";
  emit_yaml(tree, "", out);
  return out;
}

}  // namespace tq

namespace tq::tune {

namespace {

// The explicit weight setting of a layer in the tuned spec: what the
// simulator quantized it with.
nlohmann::json weights_rule(const Plan& plan, const std::string& layer, DType d) {
  const LayerPlan* lp = plan.find(layer);
  if (!lp) return {{"dtype", std::string(to_string(d))}};
  const TensorQuant w = weight_setting(*lp, d);
  nlohmann::json j{{"dtype", std::string(to_string(d))},
                   {"granularity", std::string(to_string(w.granularity))},
                   {"symmetric", w.symmetric}};
  if (w.granularity == Granularity::kPerGroup) j["group_size"] = w.group_size;
  return j;
}

}  // namespace

nlohmann::json tuned_tree(const Spec& spec, const Plan& plan, const std::vector<SimLayer>& layers,
                          const Assignment& a, const std::string& timing_cache) {
  nlohmann::json tree = spec.resolved;
  auto& q = tree["quantize"];
  q.erase("tune");
  q.erase("sensitivity");  // the tune report has it; the real runs do without
  auto rules = q.value("layers", nlohmann::json::array());
  auto skips = q.value("skip_names", nlohmann::json::array());
  for (const auto& l : layers) {
    auto it = a.find(l.name);
    if (it == a.end()) {
      skips.push_back(exact_name_pattern(l.name));
      continue;
    }
    rules.push_back({{"module_name", exact_name_pattern(l.name)},
                     {"weights", weights_rule(plan, l.name, it->second)}});
  }
  q["layers"] = rules;
  q["skip_names"] = skips;
  if (!timing_cache.empty()) q["timing_cache"] = timing_cache;
  return tree;
}

void check_tuned_plan(const Spec& tuned, const Plan& plan, const std::vector<SimLayer>& layers,
                      const Assignment& a) {
  std::vector<LayerInfo> infos;
  for (const auto& lp : plan.layers) infos.push_back(lp.info);
  const Plan got = build_plan(tuned, infos);
  for (const auto& l : layers) {
    const LayerPlan* lp = got.find(l.name);
    auto it = a.find(l.name);
    const DType want = it == a.end() ? DType::kNative : it->second;
    const DType planned = !lp || lp->skipped ? DType::kNative : lp->weights.dtype;
    if (planned == want) continue;
    throw RuntimeError("tune: the tuned spec plans " + std::string(to_string(planned)) +
                       " for layer '" + l.name + "' (" + (lp ? lp->decided_by : "no plan") +
                       ") where tune chose " + std::string(to_string(want)) +
                       "; a rule selects more than the layer it names, so the spec was not "
                       "written or run");
  }
}

}  // namespace tq::tune
