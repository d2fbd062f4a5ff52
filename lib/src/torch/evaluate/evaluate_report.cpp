// Quality gates, the evaluate report (JSON) and the console table.
#include <cmath>
#include <cstdio>

#include "eval_impl.h"
#include "taoquant/pipeline.h"
#include "taoquant/report.h"

namespace tq {

namespace {

std::string num(double v, int prec = 4) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

// "+0.25", "-1.50", "0.00" (no "-0.00").
std::string signed_num(double v, int prec) {
  if (std::fabs(v) < 0.5 * std::pow(10.0, -prec)) return num(0.0, prec);
  return (v > 0 ? "+" : "") + num(v, prec);
}

std::string sig(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

nlohmann::json opt_json(const std::optional<double>& v) {
  return v ? json_number(*v) : nlohmann::json(nullptr);
}

}  // namespace

const LatencyStats* ModelResult::latency_at(int batch_size) const {
  for (const auto& l : latency)
    if (l.batch_size == batch_size) return &l;
  return nullptr;
}

const ModelResult* EvaluateOutcome::find(const std::string& role) const {
  for (const auto& m : models)
    if (m.role == role) return &m;
  return nullptr;
}

const ModelResult& EvaluateOutcome::primary() const {
  const ModelResult* q = find("quantized");
  return q ? *q : models.front();
}

bool EvaluateOutcome::gates_passed() const {
  for (const auto& g : gates)
    if (!g.passed) return false;
  return true;
}

std::string EvaluateOutcome::gate_failure_message() const {
  std::string s;
  size_t n = 0;
  for (const auto& g : gates) {
    if (g.passed) continue;
    ++n;
    s += (s.empty() ? "" : "; ") + g.name + ": " +
         (g.value ? "measured " + sig(*g.value) + g.unit : std::string("not measured")) +
         ", limit " + g.op + " " + sig(g.limit) + g.unit;
  }
  if (n == 0) return "";
  return std::to_string(n) + " quality gate" + (n == 1 ? "" : "s") + " failed: " + s;
}

void throw_if_gates_failed(const EvaluateOutcome& out) {
  if (!out.gates_passed()) throw Error(ExitCode::kGate, out.gate_failure_message());
}

namespace eval {

bool gates_need_reference(const GatesSpec& g) {
  for (const auto& [gate, limit] : g.limits)
    if (gate_def(gate).needs_reference) return true;
  return false;
}

namespace {

// What the evaluation measured for `gate` (nullopt: not measured). Speedup
// is per batch size (check_gates).
std::optional<double> measured(Gate gate, const EvaluateOutcome& out) {
  const std::optional<Fidelity>& f = out.fidelity;
  switch (gate) {
    case Gate::kMaxTop1Drop:
      return out.top1_drop;
    case Gate::kMinTop1:
      return out.models.empty() ? std::nullopt : out.primary().top1;
    case Gate::kMinCosine:
      return f ? std::optional<double>(f->cosine) : std::nullopt;
    case Gate::kMinSqnrDb:
      return f ? std::optional<double>(f->sqnr_db) : std::nullopt;
    case Gate::kMinTop1Agreement:
      return f ? std::optional<double>(f->top1_agreement) : std::nullopt;
    case Gate::kMaxSizeRatio:
      return out.size_ratio;
    case Gate::kMinSpeedup:
    case Gate::kEffectiveBits:
      break;
  }
  return std::nullopt;
}

}  // namespace

std::vector<GateResult> check_gates(const GatesSpec& g, const EvaluateOutcome& out) {
  std::vector<GateResult> r;
  auto add = [&](const GateDef& d, const std::string& name, std::optional<double> value) {
    GateResult gr;
    gr.name = name;
    gr.op = d.at_most ? "<=" : ">=";
    gr.limit = *g.get(d.gate);
    gr.value = value;
    gr.unit = d.unit;
    gr.passed = value && !std::isnan(*value) && g.holds(d.gate, *value);
    r.push_back(gr);
  };
  for (const auto& d : gate_table()) {
    if (!g.has(d.gate)) continue;
    if (d.gate != Gate::kMinSpeedup) {
      add(d, d.name, measured(d.gate, out));
      continue;
    }
    if (out.speedup.empty()) add(d, d.name, std::nullopt);
    for (size_t i = 0; i < out.speedup.size(); ++i)
      add(d, std::string(d.name) + " (batch " + std::to_string(out.latency_batch_sizes[i]) + ")",
          out.speedup[i]);
  }
  return r;
}

namespace {

using nlohmann::json;

// A model's latency (ms statistics) and throughput, keyed by batch size.
std::pair<json, json> latency_json(const ModelResult& m) {
  json lat = json::object(), thr = json::object();
  for (const auto& l : m.latency) {
    lat[std::to_string(l.batch_size)] = {{"median", l.median_ms},
                                         {"p90", l.p90_ms},
                                         {"mean", l.mean_ms},
                                         {"min", l.min_ms},
                                         {"iters", l.iters},
                                         {"contended", l.contended},
                                         {"rounds_dropped", l.rounds_dropped}};
    thr[std::to_string(l.batch_size)] = l.throughput;
  }
  return {lat, thr};
}

json model_json(const ModelResult& m) {
  auto [lat, thr] = latency_json(m);
  return json{{"path", m.path},
              {"size_bytes", m.file_bytes},
              {"qengine", m.qengine},
              {"top1", opt_json(m.top1)},
              {"top5", opt_json(m.top5)},
              {"top1_correct", m.top1 ? json(m.correct1) : json(nullptr)},
              {"top5_correct", m.top5 ? json(m.correct5) : json(nullptr)},
              {"latency_ms", lat},
              {"throughput", thr},
              {"forward_s", m.forward_s}};
}

// The primary model's accuracy, fidelity against float, size and speed.
json metrics_json(const EvaluateOutcome& out) {
  const ModelResult& p = out.primary();
  json metrics{
      {"top1", opt_json(p.top1)}, {"top5", opt_json(p.top5)}, {"num_samples", out.num_samples}};
  const std::optional<Fidelity>& f = out.fidelity;
  metrics["cosine"] = f ? json_number(f->cosine) : json(nullptr);
  metrics["sqnr_db"] = f ? json_number(f->sqnr_db) : json(nullptr);
  metrics["max_abs_error"] = f ? json_number(f->max_abs_error) : json(nullptr);
  metrics["mean_abs_error"] = f ? json_number(f->mean_abs_error) : json(nullptr);
  metrics["top1_agreement"] = f ? json_number(f->top1_agreement) : json(nullptr);
  metrics["top1_drop"] = opt_json(out.top1_drop);
  metrics["size_ratio"] = opt_json(out.size_ratio);
  metrics["latency_ms"] = latency_json(p).first;
  json speedup = json::object();
  for (size_t i = 0; i < out.speedup.size(); ++i)
    speedup[std::to_string(out.latency_batch_sizes[i])] = json_number(out.speedup[i]);
  metrics["speedup"] = speedup;
  return metrics;
}

}  // namespace

nlohmann::json make_evaluate_report(const Spec& spec, const EvaluateOutcome& out) {
  const json metrics = metrics_json(out);
  json gates = json::array();
  for (const auto& g : out.gates)
    gates.push_back({{"name", g.name},
                     {"op", g.op},
                     {"limit", g.limit},
                     {"value", opt_json(g.value)},
                     {"passed", g.passed}});
  json j{{"schema_version", kEvaluateReportSchema},
         {"tool", tool_info()},
         {"spec", spec.path},
         {"data",
          {{"source", out.data_description},
           {"num_samples", out.num_samples},
           {"has_labels", out.has_labels},
           {"num_classes", out.num_classes}}},
         {"metrics", metrics},
         {"threads", out.threads},
         {"gates", {{"passed", out.gates_passed()}, {"results", gates}}},
         {"notes", out.notes},
         {"timings", out.timings},
         {"metric_definitions",
          {{"top1", "percent of samples whose argmax is the label"},
           {"cosine", "mean over samples of the cosine similarity of the flattened outputs"},
           {"sqnr_db",
            "10*log10(sum(float^2) / sum((float-quantized)^2)) over all outputs; null = identical"},
           {"top1_agreement", "percent of samples where float and quantized argmax agree"},
           {"speedup", "float median latency / quantized median latency, per batch size"},
           {"size_ratio", "quantized file size / float file size"}}}};
  for (const auto& m : out.models) j[m.role] = model_json(m);
  return j;
}

}  // namespace eval

namespace {

// The console table's rows: metric, float, quantized, change (or metric and
// the one model's value).
struct TableRows {
  bool both;
  std::vector<std::vector<std::string>> rows;
  void add(const std::string& name, const std::string& a, const std::string& b,
           const std::string& c) {
    if (both)
      rows.push_back({name, a, b, c});
    else
      rows.push_back({name, a});
  }
};

std::string pct(const std::optional<double>& v) {
  return v ? num(*v, 2) : std::string("-");
}

// Latency and throughput per batch size; `q` is null for one model.
void add_latency_rows(TableRows& t, const EvaluateOutcome& out, const ModelResult& a,
                      const ModelResult* q) {
  for (size_t i = 0; i < out.latency_batch_sizes.size(); ++i) {
    const int bs = out.latency_batch_sizes[i];
    const LatencyStats* la = a.latency_at(bs);
    const LatencyStats* lb = q ? q->latency_at(bs) : nullptr;
    if (!la) continue;
    const bool dirty = la->contended || (lb && lb->contended);
    const std::string sp = i < out.speedup.size()
                               ? num(out.speedup[i], 2) + "x speedup" +
                                     (dirty ? " (contended: not a clean figure)" : "")
                               : "";
    t.add("latency bs=" + std::to_string(bs) + " median", num(la->median_ms, 3) + " ms",
          lb ? num(lb->median_ms, 3) + " ms" : "", sp);
    t.add("latency bs=" + std::to_string(bs) + " p90", num(la->p90_ms, 3) + " ms",
          lb ? num(lb->p90_ms, 3) + " ms" : "", "");
    t.add("throughput bs=" + std::to_string(bs), num(la->throughput, 1) + "/s",
          lb ? num(lb->throughput, 1) + "/s" : "", "");
  }
}

void add_fidelity_rows(TableRows& t, const Fidelity& f) {
  t.add("cosine (vs float)", "", num(f.cosine, 6), "");
  t.add("SQNR (vs float)", "",
        std::isinf(f.sqnr_db) ? "inf (identical)" : num(f.sqnr_db, 2) + " dB", "");
  t.add("max abs error", "", sig(f.max_abs_error), "");
  t.add("mean abs error", "", sig(f.mean_abs_error), "");
  t.add("top-1 agreement (%)", "", num(f.top1_agreement, 2), "");
}

// What follows the table: notes, gates, the report's path.
std::string table_footer(const EvaluateOutcome& out) {
  std::string s;
  for (const auto& n : out.notes) s += "note: " + n + "\n";
  if (!out.gates.empty()) {
    s += "\ngates:\n";
    for (const auto& g : out.gates)
      s += std::string(g.passed ? "  PASS " : "  FAIL ") + g.name + ": " +
           (g.value ? sig(*g.value) + g.unit : std::string("not measured")) + " (limit " + g.op +
           " " + sig(g.limit) + g.unit + ")\n";
  }
  if (!out.report_path.empty()) s += "\nreport: " + out.report_path + "\n";
  return s;
}

}  // namespace

std::string format_evaluate_table(const EvaluateOutcome& out) {
  const ModelResult* fl = out.find("float");
  const ModelResult* q = out.find("quantized");
  const bool both = fl && q;
  TableRows t{both, {}};
  const ModelResult& one = out.primary();
  const ModelResult& a = both ? *fl : one;
  if (out.has_labels) {
    t.add("top-1 (%)", pct(a.top1), both ? pct(q->top1) : "",
          out.top1_drop ? signed_num(-*out.top1_drop, 2) + " pp" : "");
    if (a.top5)
      t.add("top-5 (%)", pct(a.top5), both ? pct(q->top5) : "",
            both && q->top5 ? signed_num(*q->top5 - *a.top5, 2) + " pp" : "");
  }
  t.add("model file", format_bytes(static_cast<double>(a.file_bytes)),
        both ? format_bytes(static_cast<double>(q->file_bytes)) : "",
        out.size_ratio ? "x" + num(*out.size_ratio, 3) + " size" : "");
  add_latency_rows(t, out, a, both ? q : nullptr);
  if (out.fidelity) add_fidelity_rows(t, *out.fidelity);
  std::string s = "data: " + out.data_description + ", " + std::to_string(out.threads) + " thread" +
                  (out.threads == 1 ? "" : "s") + "\n";
  for (const auto& m : out.models)
    s += m.role + ": " + m.path + (m.qengine.empty() ? "" : " (qengine " + m.qengine + ")") + "\n";
  s += "\n";
  if (both)
    s +=
        format_table({"metric", "float", "quantized", "change"}, t.rows, {false, true, true, true});
  else
    s += format_table({"metric", one.role}, t.rows, {false, true});
  return s + table_footer(out);
}

}  // namespace tq
