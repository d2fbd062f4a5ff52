// The quantize report's view-model: summary, per-step times, warnings, the
// per-layer table, the SQNR chart and the activation histograms.
#include <algorithm>
#include <cmath>

#include "charts.h"
#include "views.h"

namespace tq::html_view {

using nlohmann::json;

namespace {

std::string shape_text(const json& s) {
  if (!s.is_array()) return "";
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + s[i].dump();
  return out + "]";
}

// SQNR text: null means the quantized weights equal the float ones.
std::string sqnr_text(const json& layer, const char* key) {
  if (!layer.contains(key)) return "-";
  const json& v = layer[key];
  return v.is_number() ? num(v, 1) + " dB" : "exact";
}

// Per-layer time: the backend's measured float/quantized latency if present.
json layer_time(const json& l) {
  const json& lat = get(l, "latency_ms");
  if (lat.is_object()) {
    const json& q = get(lat, "quantized");
    const json& f = get(lat, "float");
    if (q.is_number() || f.is_number())
      return {{"text", num(f, 3) + " / " + num(q, 3)}, {"key", sort_key(q.is_number() ? q : f)}};
  }
  const json& t = get(l, "time_ms");
  return {{"text", t.is_number() ? num(t, 3) : "-"}, {"key", sort_key(t)}};
}

json layer_row(const json& l, size_t i) {
  const bool kept = get(l, "kept_float").is_boolean() && l["kept_float"].get<bool>();
  std::string wfmt = str(l, "weight_format"), afmt = str(l, "activation_format");
  const json t = layer_time(l);
  return {{"index", i + 1},
          {"name", str(l, "name")},
          {"class", str(l, "class")},
          {"shape", shape_text(get(l, "shape"))},
          {"weight_format", kept || wfmt.empty() ? "float" : wfmt},
          {"activation_format", afmt.empty() ? "float" : afmt},
          {"sqnr", kept ? "-" : sqnr_text(l, "weight_sqnr_db")},
          {"sqnr_key", kept ? "" : sort_key(get(l, "weight_sqnr_db"))},
          {"out_sqnr", sqnr_text(l, "output_sqnr_db")},
          {"out_sqnr_key", sort_key(get(l, "output_sqnr_db"))},
          {"size", bytes(get(l, "bytes_before")) + " \u2192 " + bytes(get(l, "bytes_after"))},
          {"size_key", sort_key(get(l, "bytes_after"))},
          {"kept_float", kept},
          {"reason", str(l, "reason")},
          {"decided_by", str(l, "decided_by")},
          {"time", t["text"]},
          {"time_key", t["key"]}};
}

json sqnr_chart(const json& layers) {
  std::vector<charts::BarRow> rows;
  for (const auto& l : layers) {
    charts::BarRow r;
    r.label = str(l, "name");
    const bool kept = get(l, "kept_float").is_boolean() && l["kept_float"].get<bool>();
    const json& w = get(l, "weight_sqnr_db");
    const json& o = get(l, "output_sqnr_db");
    if (o.is_number() && !kept) r.marker = o.get<double>();
    if (kept) {
      r.css = "float";
      r.note = "kept float: " + str(l, "reason");
    } else if (w.is_number()) {
      r.value = w.get<double>();
      r.note = str(l, "reason");
    } else {
      r.css = "exact";
      r.note = "exact (quantized weights equal float)";
    }
    rows.push_back(std::move(r));
  }
  return charts::horizontal_bars(rows, "dB");
}

json histograms(const json& layers) {
  json out = json::array();
  for (const auto& l : layers) {
    const json& a = get(l, "activation");
    const json& h = get(a, "histogram");
    if (!h.is_object() || !get(h, "counts").is_array()) continue;
    const auto counts = h["counts"].get<std::vector<double>>();
    const double lo = get(h, "min").is_number() ? h["min"].get<double>() : 0.0;
    const double hi = get(h, "max").is_number() ? h["max"].get<double>() : 1.0;
    const double clo = get(a, "clip_min").is_number() ? a["clip_min"].get<double>() : lo;
    const double chi = get(a, "clip_max").is_number() ? a["clip_max"].get<double>() : hi;
    out.push_back(
        {{"name", str(l, "name")},
         {"observer", str(a, "observer")},
         {"format", str(l, "activation_format")},
         {"clip", "[" + charts::short_number(clo) + ", " + charts::short_number(chi) + "]"},
         {"range", "[" + charts::short_number(lo) + ", " + charts::short_number(hi) + "]"},
         {"chart", charts::histogram(counts, lo, hi, clo, chi)}});
  }
  return out;
}

json timings(const json& report) {
  // Pipeline order first, then any other step.
  std::vector<std::string> keys = {"load_s", "plan_s", "calibrate_s", "quantize_s", "save_s"};
  for (const auto& [k, v] : get(report, "timings").items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end() && k != "total_s") keys.push_back(k);
  keys.push_back("total_s");
  json out = json::array();
  for (const auto& k : keys) {
    const json& v = get(get(report, "timings"), k.c_str());
    if (!v.is_number()) continue;
    std::string name =
        k.size() > 2 && k.substr(k.size() - 2) == "_s" ? k.substr(0, k.size() - 2) : k;
    out.push_back({{"step", name}, {"seconds", num(v, 3)}});
  }
  json steps = json::array();
  for (const auto& s : get(get(get(report, "backend"), "meta"), "steps"))
    steps.push_back({{"step", str(s, "step")}, {"seconds", num(get(s, "seconds"), 3)}});
  return {{"pipeline", out}, {"backend", steps}, {"has_backend", !steps.empty()}};
}

// The backend's whole-model latency check: "batch 1: 191.2 ms float, 24.8 ms quantized".
std::string latency_text(const json& checks) {
  std::string out;
  for (const auto& c : checks) {
    const json &f = get(c, "fp32_ms"), &q = get(c, "int8_ms");
    if (!f.is_number() || !q.is_number()) continue;
    out += (out.empty() ? "" : "; ") + std::string("batch ") + str(c, "batch_size") + ": " +
           num(f, 1) + " ms float, " + num(q, 1) + " ms quantized";
  }
  return out;
}

json summary(const json& r) {
  const json& b = get(r, "backend");
  const json& t = get(r, "totals");
  std::string backend = str(b, "requested");
  if (str(b, "resolved") != backend) backend += " (" + str(b, "resolved") + ")";
  return json::array(
      {{{"k", "model"}, {"v", str(get(r, "model"), "path")}},
       {{"k", "backend"}, {"v", backend}},
       {{"k", "mode"}, {"v", str(r, "mode")}},
       {{"k", "layers quantized"}, {"v", str(t, "quantized_layers") + " / " + str(t, "layers")}},
       {{"k", "weights"},
        {"v", bytes(get(t, "weight_bytes_before")) + " \u2192 " +
                  bytes(get(t, "weight_bytes_after")) + " (" + num(get(t, "weight_ratio"), 3) +
                  "x)"}},
       {{"k", "model file"},
        {"v", bytes(get(t, "file_bytes_before")) + " \u2192 " + bytes(get(t, "file_bytes_after")) +
                  " (" + num(get(t, "file_ratio"), 3) + "x)"}},
       {{"k", "model latency"},
        {"v", latency_text(get(get(get(r, "backend"), "meta"), "latency_check"))}},
       {{"k", "artifact"}, {"v", str(get(r, "artifact"), "path")}},
       {{"k", "spec"}, {"v", str(r, "spec_file")}},
       {{"k", "tool"},
        {"v", "tao-quant " + str(get(r, "tool"), "version") + ", LibTorch " +
                  str(get(r, "tool"), "libtorch")}}});
}

// The exported files (quantize.export / tao-quant export): one row each,
// and what they hold.
json exports(const json& r) {
  const json& e = get(r, "exports");
  json files = json::array(), kept = json::array();
  std::string tensors = "-";
  for (const auto& f : get(e, "files").is_array() ? e["files"] : json::array()) {
    const json& facts = get(f, "facts");
    files.push_back(
        {{"format", str(f, "format")},
         {"file", str(f, "file")},
         {"size", bytes(get(f, "bytes"))},
         {"xxh64", str(f, "xxh64")},
         {"what", str(facts, "target").empty() ? "" : "target " + str(facts, "target")}});
    if (str(f, "format") != "onnx_qdq") continue;
    tensors = std::to_string(get(facts, "weights_quantized").is_number()
                                 ? facts["weights_quantized"].get<int64_t>()
                                 : 0) +
              " weights, " +
              std::to_string(get(facts, "activation_qdq_pairs").is_number()
                                 ? facts["activation_qdq_pairs"].get<int64_t>()
                                 : 0) +
              " activation Q/DQ pairs";
    for (const auto& l :
         get(facts, "float_layers").is_array() ? facts["float_layers"] : json::array())
      kept.push_back({{"layer", str(l, "layer")}, {"reason", str(l, "reason")}});
  }
  return {{"has", !files.empty()},      {"files", files},     {"opset", num(get(e, "opset"), 0)},
          {"target", str(e, "target")}, {"tensors", tensors}, {"float_layers", kept},
          {"has_float", !kept.empty()}};
}

}  // namespace

json quantize(const json& r) {
  const json& layers = get(r, "layers").is_array() ? r["layers"] : json::array();
  json rows = json::array();
  bool has_time = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    rows.push_back(layer_row(layers[i], i));
    has_time = has_time || rows.back()["time"] != "-";
  }
  json hist = histograms(layers);
  json notes = get(r, "notes").is_array() ? r["notes"] : json::array();
  const json& sens =
      get(r, "sensitivity").is_object() ? r["sensitivity"] : get(get(r, "tune"), "sensitivity");
  return {{"heading", "Quantize report"},
          {"title", "tao-quant quantize: " + str(get(r, "model"), "path")},
          {"summary", summary(r)},
          {"timings", timings(r)},
          {"warnings", get(r, "warnings").is_array() ? r["warnings"] : json::array()},
          {"has_warnings", !get(r, "warnings").empty()},
          {"notes", notes},
          {"has_notes", !notes.empty()},
          {"layers", rows},
          {"has_time", has_time},
          {"num_layers", layers.size()},
          {"sqnr_chart", sqnr_chart(layers)},
          {"histograms", hist},
          {"has_histograms", !hist.empty()},
          {"sensitivity", sensitivity(sens)},
          {"exports", exports(r)},
          {"tune", tune(get(r, "tune"))}};
}

}  // namespace tq::html_view
