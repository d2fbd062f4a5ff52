// The batch summary's view-model: one row per job (linking to its reports)
// and a scatter of top-1 drop against speed-up.
#include "charts.h"
#include "views.h"

namespace tq::html_view {

using nlohmann::json;

namespace {

json job_row(const json& j) {
  const std::string status = str(j, "status"), model = str(j, "model");
  return {{"index", str(j, "index")},
          {"id", str(j, "id")},
          {"model", model},  // the full path, as a tooltip; the table shows the file name
          {"model_name", model.substr(model.find_last_of('/') + 1)},
          {"backend", str(j, "backend")},
          {"mode", str(j, "mode")},
          {"status", status},
          {"status_css", status == "passed"    ? "pass"
                         : status == "skipped" ? "skip"
                                               : "fail"},
          {"stage", str(j, "stage")},
          {"size_ratio", num(get(j, "size_ratio"), 3)},
          {"size_key", sort_key(get(j, "size_ratio"))},
          {"fp32_top1", num(get(j, "fp32_top1"), 2)},
          {"quant_top1", num(get(j, "quant_top1"), 2)},
          {"drop", num(get(j, "top1_drop"), 2)},
          {"drop_key", sort_key(get(j, "top1_drop"))},
          {"speedup", num(get(j, "speedup"), 2)},
          {"speedup_key", sort_key(get(j, "speedup"))},
          {"duration", num(get(j, "duration_s"), 1)},
          {"duration_key", sort_key(get(j, "duration_s"))},
          {"message", str(j, "message")},
          {"exports", get(j, "exports").is_array() ? get(j, "exports") : json::array()},
          {"quantize_html", get(j, "html_quantize_report")},
          {"evaluate_html", get(j, "html_evaluate_report")}};
}

}  // namespace

json batch(const json& s) {
  json rows = json::array();
  std::vector<charts::Point> points;
  for (const auto& j : get(s, "jobs")) {
    rows.push_back(job_row(j));
    const json &d = get(j, "top1_drop"), &x = get(j, "speedup");
    if (d.is_number() && x.is_number())
      points.push_back({x.get<double>(), d.get<double>(), "#" + str(j, "index"),
                        str(j, "status") == "passed" ? "pass" : "fail"});
  }
  const json& m = get(s, "manifest");
  const json& t = get(s, "totals");
  const json& sh = get(s, "shard");
  std::string shard = str(sh, "count") == "1" || sh.is_null()
                          ? "none"
                          : str(sh, "index") + " of " + str(sh, "count");
  return {{"heading", "Batch summary"},
          {"title", "tao-quant batch: " + str(m, "name")},
          {"summary", json::array({{{"k", "manifest"}, {"v", str(m, "path")}},
                                   {{"k", "jobs"}, {"v", str(t, "jobs")}},
                                   {{"k", "passed"}, {"v", str(t, "passed")}},
                                   {{"k", "failed"}, {"v", str(t, "failed")}},
                                   {{"k", "gate failures"}, {"v", str(t, "gate_failures")}},
                                   {{"k", "skipped / resumed"},
                                    {"v", str(t, "skipped") + " / " + str(t, "resumed")}},
                                   {{"k", "shard"}, {"v", shard}},
                                   {{"k", "wall time"}, {"v", num(get(s, "wall_s"), 1) + " s"}}})},
          {"jobs", rows},
          {"scatter_chart", points.empty()
                                ? json(nullptr)
                                : charts::scatter(points, "speed-up (float / quantized latency)",
                                                  "top-1 drop (pp)")}};
}

}  // namespace tq::html_view
