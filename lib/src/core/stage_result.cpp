#include "taoquant/stage_result.h"

#include <algorithm>

namespace tq {

void StageResult::declare(std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (std::none_of(rejected.begin(), rejected.end(), [&](const auto& r) { return r.first == k; }))
      rejected.emplace_back(k, std::vector<std::string>{});
}

void StageResult::reject(const std::string& key, const std::string& layer) {
  auto it =
      std::find_if(rejected.begin(), rejected.end(), [&](const auto& r) { return r.first == key; });
  if (it == rejected.end()) it = rejected.insert(rejected.end(), {key, {}});
  it->second.push_back(layer);
}

const std::vector<std::string>& StageResult::rejected_layers(const std::string& key) const {
  static const std::vector<std::string> none;
  auto it =
      std::find_if(rejected.begin(), rejected.end(), [&](const auto& r) { return r.first == key; });
  return it == rejected.end() ? none : it->second;
}

std::vector<std::string> StageResult::rejection_warnings() const {
  std::vector<std::string> out;
  for (const auto& [key, layers] : rejected) {
    if (layers.empty()) continue;
    std::string names;
    for (size_t i = 0; i < layers.size() && i < 8; ++i) names += (i ? ", " : "") + layers[i];
    if (layers.size() > 8) names += ", ... (" + std::to_string(layers.size()) + " in all)";
    out.push_back(key + ": the held-out batch says it made " + std::to_string(layers.size()) +
                  " layer(s) worse; not applied to " + names + " (the report's algorithms." + key +
                  ".rejected says why)");
  }
  return out;
}

nlohmann::json StageResult::to_json() const {
  nlohmann::json j = counts.is_object() ? counts : nlohmann::json::object();
  j["seconds"] = seconds;
  return j;
}

}  // namespace tq
