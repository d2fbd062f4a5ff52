// The evaluate report's view-model: float vs quantized metrics, gates,
// accuracy and latency charts.
#include <algorithm>

#include "charts.h"
#include "views.h"

namespace tq::html_view {

using nlohmann::json;

namespace {

// The model blocks present, in display order.
std::vector<std::string> roles(const json& r) {
  std::vector<std::string> out;
  for (const char* k : {"float", "quantized"})
    if (get(r, k).is_object()) out.emplace_back(k);
  return out;
}

json metric_rows(const json& r, const std::vector<std::string>& rs) {
  json rows = json::array();
  auto add = [&](const std::string& name, auto&& cell, const std::string& change) {
    json cells = json::array();
    for (const auto& role : rs) cells.push_back(cell(get(r, role.c_str())));
    rows.push_back({{"metric", name}, {"cells", cells}, {"change", change}});
  };
  const json& m = get(r, "metrics");
  const json& drop = get(m, "top1_drop");
  add(
      "top-1 (%)", [](const json& b) { return num(get(b, "top1"), 2); },
      drop.is_number() ? "drop " + num(drop, 2) + " pp" : "");
  add(
      "top-5 (%)", [](const json& b) { return num(get(b, "top5"), 2); }, "");
  add(
      "file size", [](const json& b) { return bytes(get(b, "size_bytes")); },
      get(m, "size_ratio").is_number() ? num(m["size_ratio"], 3) + "x" : "");
  add(
      "qengine", [](const json& b) { return str(b, "qengine"); }, "");
  return rows;
}

json fidelity(const json& m) {
  json out = json::array();
  const std::pair<const char*, const char*> keys[] = {{"cosine", "cosine similarity"},
                                                      {"sqnr_db", "output SQNR (dB)"},
                                                      {"top1_agreement", "top-1 agreement (%)"},
                                                      {"max_abs_error", "max |error|"},
                                                      {"mean_abs_error", "mean |error|"}};
  for (const auto& [k, label] : keys)
    if (get(m, k).is_number()) out.push_back({{"k", label}, {"v", num(m[k], 4)}});
  return out;
}

json gates(const json& r) {
  json out = json::array();
  for (const auto& g : get(get(r, "gates"), "results")) {
    const bool ok = get(g, "passed").is_boolean() && g["passed"].get<bool>();
    out.push_back({{"name", str(g, "name")},
                   {"rule", str(g, "op") + " " +
                                charts::short_number(
                                    get(g, "limit").is_number() ? g["limit"].get<double>() : 0.0)},
                   {"value", num(get(g, "value"), 3)},
                   {"passed", ok},
                   {"status", ok ? "pass" : "FAIL"}});
  }
  return out;
}

json latency_chart(const json& r, const std::vector<std::string>& rs) {
  std::vector<std::string> sizes;
  for (const auto& role : rs)
    for (const auto& [bs, v] : get(get(r, role.c_str()), "latency_ms").items())
      if (std::find(sizes.begin(), sizes.end(), bs) == sizes.end()) sizes.push_back(bs);
  std::sort(sizes.begin(), sizes.end(),
            [](const std::string& a, const std::string& b) { return std::stoi(a) < std::stoi(b); });
  std::vector<charts::BarGroup> groups;
  const json& speed = get(get(r, "metrics"), "speedup");
  for (const auto& bs : sizes) {
    charts::BarGroup g;
    g.label = "batch " + bs;
    if (get(speed, bs.c_str()).is_number()) g.sublabel = num(speed[bs], 2) + "x faster";
    for (const auto& role : rs) {
      const json& v = get(get(get(get(r, role.c_str()), "latency_ms"), bs.c_str()), "median");
      g.values.push_back(v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt);
    }
    groups.push_back(std::move(g));
  }
  return groups.empty() ? json(nullptr) : charts::grouped_bars(groups, rs, "ms (median)");
}

json accuracy_chart(const json& r, const std::vector<std::string>& rs) {
  std::vector<charts::BarGroup> groups;
  for (const char* k : {"top1", "top5"}) {
    charts::BarGroup g;
    g.label = k == std::string("top1") ? "top-1" : "top-5";
    bool any = false;
    for (const auto& role : rs) {
      const json& v = get(get(r, role.c_str()), k);
      any = any || v.is_number();
      g.values.push_back(v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt);
    }
    if (any) groups.push_back(std::move(g));
  }
  return groups.empty() ? json(nullptr) : charts::grouped_bars(groups, rs, "%");
}

}  // namespace

json evaluate(const json& r) {
  const auto rs = roles(r);
  json heads = json::array();
  for (const auto& role : rs) heads.push_back(role);
  const json& data = get(r, "data");
  const json g = gates(r);
  const json& passed = get(get(r, "gates"), "passed");
  const json fid = fidelity(get(r, "metrics"));
  return {{"heading", "Evaluate report"},
          {"title", "tao-quant evaluate: " + str(r, "spec")},
          {"summary",
           json::array({{{"k", "spec"}, {"v", str(r, "spec")}},
                        {{"k", "data"}, {"v", str(data, "source")}},
                        {{"k", "samples"}, {"v", str(data, "num_samples")}},
                        {{"k", "threads"}, {"v", str(r, "threads")}},
                        {{"k", "tool"}, {"v", "tao-quant " + str(get(r, "tool"), "version")}}})},
          {"roles", heads},
          {"metrics", metric_rows(r, rs)},
          {"fidelity", fid},
          {"has_fidelity", !fid.empty()},
          {"gates", g},
          {"has_gates", !g.empty()},
          {"gates_passed", passed.is_boolean() && passed.get<bool>()},
          {"notes", get(r, "notes").is_array() ? r["notes"] : json::array()},
          {"has_notes", get(r, "notes").is_array() && !r["notes"].empty()},
          {"accuracy_chart", accuracy_chart(r, rs)},
          {"latency_chart", latency_chart(r, rs)}};
}

}  // namespace tq::html_view
