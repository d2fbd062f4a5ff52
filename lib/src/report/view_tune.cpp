// The sensitivity table and the tune search in the quantize report's view:
// each layer alone per format (ranked, with a bar chart of its worst SQNR),
// the reverse view, and tune's result and trace.
#include "charts.h"
#include "views.h"

namespace tq::html_view {

using nlohmann::json;

namespace {

// "alone" holds one entry per format: {sqnr_db, top1_agreement, top1_drop}.
json sensitivity_cells(const json& alone, const json& formats) {
  json cells = json::array();
  for (const auto& f : formats) {
    const json& e = get(alone, f.get<std::string>().c_str());
    const json& db = get(e, "sqnr_db");
    cells.push_back({{"text", e.is_null()      ? "-"
                              : db.is_number() ? num(db, 2)
                                               : "exact"},
                     {"key", sort_key(db)}});
    const json& ag = get(e, "top1_agreement");
    cells.push_back({{"text", num(ag, 2)}, {"key", sort_key(ag)}});
  }
  return cells;
}

json sensitivity_chart(const json& layers) {
  std::vector<charts::BarRow> rows;
  for (const auto& l : layers) {
    charts::BarRow r;
    r.label = str(l, "name");
    const json& w = get(l, "worst_sqnr_db");
    if (w.is_number()) {
      r.value = w.get<double>();
    } else {
      r.css = "exact";
      r.note = "exact";
    }
    rows.push_back(std::move(r));
  }
  return charts::horizontal_bars(rows, "dB");
}

std::string all_quantized_text(const json& s) {
  const json& a = get(s, "all_quantized");
  std::string t =
      num(get(a, "sqnr_db"), 2) + " dB, top-1 agreement " + num(get(a, "top1_agreement"), 2) + " %";
  if (get(a, "top1").is_number())
    t += ", top-1 " + num(get(a, "top1"), 2) + " % (float " + num(get(s, "float_top1"), 2) + " %)";
  if (get(a, "note").is_string()) t += " (" + str(a, "note") + ")";
  return t;
}

json trace_row(const json& t) {
  const json& db = get(t, "sqnr_db");
  const std::string gates = str(t, "gates");
  return {{"step", str(t, "step")},
          {"kind", str(t, "kind")},
          {"change", str(t, "change")},
          {"sqnr", db.is_number() ? num(db, 2) : "exact"},
          {"sqnr_key", sort_key(db)},
          {"agree", num(get(t, "top1_agreement"), 2)},
          {"top1", num(get(t, "top1"), 2)},
          {"bits", num(get(t, "effective_bits"), 2)},
          {"float_layers", str(t, "float_layers")},
          {"gates", gates},
          {"pass", gates == "pass"},
          {"seconds", num(get(t, "seconds"), 2)}};
}

}  // namespace

json sensitivity(const json& s) {
  if (!s.is_object() || !get(s, "layers").is_array()) return {{"has", false}};
  const json& formats = get(s, "formats").is_array() ? s["formats"] : json::array();
  const bool reverse = !s["layers"].empty() && get(s["layers"][0], "reverse_rank").is_number();
  json rows = json::array();
  for (const auto& l : s["layers"])
    rows.push_back({{"rank", str(l, "rank")},
                    {"name", str(l, "name")},
                    {"kind", str(l, "kind")},
                    {"params", str(l, "weight_params")},
                    {"cells", sensitivity_cells(get(l, "alone"), formats)},
                    {"has_reverse", reverse},
                    {"gain", num(get(l, "float_gain_db"), 2)},
                    {"gain_key", sort_key(get(l, "float_gain_db"))},
                    {"rev_rank", str(l, "reverse_rank")}});
  return {{"has", true},
          {"formats", formats},
          {"has_reverse", reverse},
          {"rows", rows},
          {"chart", sensitivity_chart(s["layers"])},
          {"all_quantized", all_quantized_text(s)},
          {"data", str(s, "data")},
          {"samples", str(s, "samples")},
          {"forward_passes", str(s, "forward_passes")}};
}

json tune(const json& t) {
  if (!t.is_object() || !get(t, "result").is_object()) return {{"has", false}};
  const json& r = t["result"];
  std::string top1 = num(get(r, "top1"), 2) + " % (float " + num(get(r, "float_top1"), 2) + " %)";
  json result = json::array(
      {{{"k", "status"},
        {"v",
         str(t, "status") + (str(t, "failed_gate").empty() ? "" : ": " + str(t, "failed_gate"))}},
       {{"k", "float layers"}, {"v", str(r, "float_layers")}},
       {{"k", "effective bits"}, {"v", num(get(r, "effective_bits"), 3)}},
       {{"k", "output SQNR"}, {"v", num(get(r, "sqnr_db"), 2) + " dB"}},
       {{"k", "top-1 agreement"}, {"v", num(get(r, "top1_agreement"), 2) + " %"}},
       {{"k", "top-1"}, {"v", get(r, "top1").is_number() ? top1 : "-"}},
       {{"k", "speedup"}, {"v", get(r, "speedup").is_number() ? num(r["speedup"], 2) + "x" : "-"}},
       {{"k", "data"}, {"v", str(t, "data")}},
       {{"k", "tuned spec"}, {"v", str(t, "tuned_spec")}},
       {{"k", "search"},
        {"v", str(get(t, "settings"), "search") + ", " + str(t, "quantize_runs") +
                  " quantize runs, " + str(t, "simulated_forward_passes") +
                  " simulated forward passes, " + num(get(t, "seconds"), 1) + " s"}}});
  if (get(t, "test").is_object()) {  // selected on other data: the test set's figures
    const json& x = t["test"];
    result.push_back(
        {{"k", "test set"},
         {"v", "top-1 " + num(get(x, "top1"), 2) + " % (float " + num(get(x, "float_top1"), 2) +
                   " %), output SQNR " + num(get(x, "sqnr_db"), 2) + " dB, on " + str(x, "data")}});
  }
  if (get(t, "budget_cut").is_string())
    result.push_back({{"k", "time budget"}, {"v", str(t, "budget_cut")}});
  json trace = json::array();
  for (const auto& s : get(t, "trace")) trace.push_back(trace_row(s));
  return {{"has", true},
          {"passed", str(t, "status") == "passed"},
          {"result", result},
          {"trace", trace}};
}

}  // namespace tq::html_view
