// View-models of the HTML reports (one builder per report kind) and the
// formatting helpers they share.
#pragma once

#include <string>

#include "taoquant/json.h"

namespace tq::html_view {

nlohmann::json quantize(const nlohmann::json& report);
nlohmann::json evaluate(const nlohmann::json& report);
nlohmann::json batch(const nlohmann::json& summary);
// Parts of the quantize view: a sensitivity table ({"has": false} when
// absent) and tune's result and trace.
nlohmann::json sensitivity(const nlohmann::json& sensitivity);
nlohmann::json tune(const nlohmann::json& tune);

// Formatting: "3.1 MiB", "12.34", "-" for null/absent.
std::string bytes(const nlohmann::json& v);
std::string num(const nlohmann::json& v, int decimals);
std::string str(const nlohmann::json& j, const char* key);
// A numeric sort key for the table script ("" for null).
std::string sort_key(const nlohmann::json& v);
// j[key] if present, else null (never throws, never inserts).
const nlohmann::json& get(const nlohmann::json& j, const char* key);

}  // namespace tq::html_view
