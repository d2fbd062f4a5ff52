// What an algorithm did, typed: a library stage (algorithm_stages.h) or a
// backend-run pass (static bias correction) returns one; the pipeline reads
// its fields, never JSON, and the report is made from it
// (QuantizeContext::record_algorithms, StageResult::to_json). Torch-free.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "taoquant/json.h"

namespace tq {

struct StageResult {
  // The stage's own counts (pairs, sweeps, groups, passes, ...): with
  // `seconds`, the report's calibration.algorithms.<stage>.
  nlohmann::json counts = nlohmann::json::object();
  double seconds = 0;
  // What each pass did to each layer: layer -> {facts key: facts}, the
  // report's layers[].algorithms. Report content: no code reads it back.
  std::map<std::string, nlohmann::json> layers;
  // The layers whose held-out check refused a pass, by the pass's facts key,
  // keys in the order the stage declared them (declare) or first refused.
  std::vector<std::pair<std::string, std::vector<std::string>>> rejected;

  // Declares the keys the stage may refuse under, in warning order.
  void declare(std::initializer_list<const char*> keys);
  void reject(const std::string& key, const std::string& layer);
  // The layers refused under `key` (empty when none).
  const std::vector<std::string>& rejected_layers(const std::string& key) const;
  // One warning per key with refused layers, naming up to 8 of them.
  std::vector<std::string> rejection_warnings() const;
  nlohmann::json to_json() const;  // counts and seconds
};

}  // namespace tq
