#include <cmath>
#include <cstdio>

#include "views.h"

namespace tq::html_view {

const nlohmann::json& get(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null;
  if (!j.is_object()) return null;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}

std::string bytes(const nlohmann::json& v) {
  if (!v.is_number()) return "-";
  double b = v.get<double>();
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) {
    b /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string num(const nlohmann::json& v, int decimals) {
  if (!v.is_number()) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v.get<double>());
  return buf;
}

std::string str(const nlohmann::json& j, const char* key) {
  const auto& v = get(j, key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::string sort_key(const nlohmann::json& v) {
  if (!v.is_number()) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", v.get<double>());
  return buf;
}

}  // namespace tq::html_view
