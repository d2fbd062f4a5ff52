// The spec's vocabulary, from the tables that define it: observers (the
// observer registry, plugins included), algorithms, gates and every enum's
// values with their help. `tao-quant backends` prints it; --json carries it.
#pragma once

#include <string>

#include "taoquant/json.h"

namespace tq {

nlohmann::json spec_reference_json();
// One line per entry, grouped by table, for people.
std::string format_spec_reference(const nlohmann::json& ref);

}  // namespace tq
