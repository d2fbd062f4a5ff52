// The quantize report (JSON) and the console lines and tables: torch-free,
// made from the outcome the pipeline returns.
#include "taoquant/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "taoquant/pipeline.h"
#include "taoquant/strings.h"

namespace tq {

nlohmann::json tool_info() {
  return {{"name", "tao-quant"}, {"version", TQ_VERSION}, {"libtorch", TQ_LIBTORCH_VERSION}};
}

nlohmann::json json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string fixed(double v, int prec) {
  return format_fixed(v, prec);
}

}  // namespace

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fixed(b, 0) + " B" : fixed(b, 1) + " " + units[u];
}

nlohmann::json layers_to_json(const Plan& plan, const std::vector<LayerResult>& layers) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : layers) {
    const LayerPlan* lp = plan.find(r.name);
    nlohmann::json j{{"name", r.name},
                     {"class", r.class_name},
                     {"shape", r.weight_shape},
                     {"weight_format", r.weight_format},
                     {"activation_format", r.activation_format},
                     {"scale_min", r.scale_min},
                     {"scale_max", r.scale_max},
                     {"weight_sqnr_db", json_number(r.weight_sqnr_db)},
                     {"bytes_before", r.bytes_before},
                     {"bytes_after", r.bytes_after},
                     {"kept_float", r.kept_float},
                     {"reason", r.reason},
                     {"decided_by", lp ? lp->decided_by : ""}};
    for (const auto& [k, v] : r.extra.items()) j[k] = v;
    arr.push_back(std::move(j));
  }
  return arr;
}

nlohmann::json make_quantize_report(const QuantizeReportInput& in) {
  const auto& out = in.outcome;
  size_t wb = 0, wa = 0, nq = 0;
  for (const auto& r : out.layers) {
    wb += r.bytes_before;
    wa += r.bytes_after;
    if (!r.kept_float) ++nq;
  }
  auto ratio = [](size_t a, size_t b) {
    return b ? json_number(double(a) / double(b)) : nlohmann::json(nullptr);
  };
  return {{"schema_version", kQuantizeReportSchema},
          {"command", "quantize"},
          {"tool", tool_info()},
          {"spec_file", in.spec.path},
          {"spec", in.spec.resolved},
          {"backend",
           {{"requested", out.requested_backend},
            {"resolved", out.resolved_backend},
            {"origin", in.backend_origin},
            {"meta", in.backend_meta}}},
          {"mode", std::string(to_string(in.spec.quantize.mode))},
          {"model", {{"path", in.spec.quantize.model_path}, {"bytes", out.model_file_bytes}}},
          {"artifact", {{"path", out.artifact_path}, {"bytes", out.artifact_file_bytes}}},
          {"calibration", out.calibration},
          {"layers", layers_to_json(out.plan, out.layers)},
          {"totals",
           {{"layers", out.layers.size()},
            {"quantized_layers", nq},
            {"weight_bytes_before", wb},
            {"weight_bytes_after", wa},
            {"weight_ratio", ratio(wa, wb)},
            {"file_bytes_before", out.model_file_bytes},
            {"file_bytes_after", out.artifact_file_bytes},
            {"file_ratio", ratio(out.artifact_file_bytes, out.model_file_bytes)}}},
          {"timings", in.timings},
          {"notes", in.spec.notes},
          {"warnings", out.warnings}};
}

std::string format_layer_line(const LayerResult& r, size_t index, size_t total, size_t name_width) {
  std::string idx_w = std::to_string(std::to_string(total).size());
  char head[32];
  std::snprintf(head, sizeof head, ("[%" + idx_w + "zu/%zu] ").c_str(), index + 1, total);
  std::ostringstream os;
  os << head << r.name
     << std::string(name_width > r.name.size() ? name_width - r.name.size() : 0, ' ') << "  "
     << r.class_name << " " << shape_str(r.weight_shape) << "  ";
  if (r.kept_float) {
    os << "float (" << r.reason << ")";
    return os.str();
  }
  os << "fp32 -> " << r.weight_format;
  if (r.activation_format != "float") os << ", act " << r.activation_format;
  os << "  " << format_bytes(double(r.bytes_before)) << " -> "
     << format_bytes(double(r.bytes_after));
  if (std::isfinite(r.weight_sqnr_db))
    os << "  SQNR " << fixed(r.weight_sqnr_db, 1) << " dB";
  else
    os << "  SQNR exact";
  if (!r.reason.empty()) os << "  (" << r.reason << ")";
  return os.str();
}

// The report's most sensitive layers in one line (each alone quantized:
// the model's output SQNR), or nothing without a table.
static std::string sensitivity_line(const nlohmann::json& report) {
  const auto it = report.find("sensitivity");
  if (it == report.end() || !it->is_object() || !it->contains("layers")) return "";
  std::vector<std::string> worst;
  for (const auto& l : (*it)["layers"]) {
    if (worst.size() == 3) break;
    const auto& db = l["worst_sqnr_db"];
    worst.push_back(l["name"].get<std::string>() + " " +
                    (db.is_number() ? fixed(db.get<double>(), 1) + " dB" : "inf"));
  }
  if (worst.empty()) return "";
  return "sensitive: " + join(worst, ", ") + " (each alone; " +
         std::to_string((*it)["samples"].get<size_t>()) + " samples; report: sensitivity)\n";
}

std::string format_quantize_summary(const QuantizeOutcome& out) {
  size_t wb = 0, wa = 0, nq = 0;
  for (const auto& r : out.layers) {
    wb += r.bytes_before;
    wa += r.bytes_after;
    if (!r.kept_float) ++nq;
  }
  std::ostringstream os;
  os << "\nbackend " << out.requested_backend;
  if (out.requested_backend != out.resolved_backend) os << " (" << out.resolved_backend << ")";
  os << ", " << to_string(out.plan.mode) << ": " << nq << "/" << out.layers.size()
     << " layers quantized\n";
  std::vector<std::vector<std::string>> rows = {
      {"weights", format_bytes(double(wb)), format_bytes(double(wa)),
       wb ? fixed(double(wa) / double(wb), 3) + "x" : "-"},
      {"model file", format_bytes(double(out.model_file_bytes)),
       format_bytes(double(out.artifact_file_bytes)),
       out.model_file_bytes
           ? fixed(double(out.artifact_file_bytes) / double(out.model_file_bytes), 3) + "x"
           : "-"}};
  os << format_table({"", "before", "after", "ratio"}, rows, {false, true, true, true});
  os << "artifact: " << out.artifact_path << "\nreport:   " << out.report_path << "\n";
  os << "time:     " << fixed(out.total_seconds, 2) << " s\n";
  os << sensitivity_line(out.report);
  for (const auto& w : out.warnings) os << "warning: " << w << "\n";
  return os.str();
}

std::string format_plan_table(const Plan& plan) {
  // The algorithms column shows only when some layer has one.
  const bool algorithms =
      std::any_of(plan.layers.begin(), plan.layers.end(),
                  [&](const LayerPlan& l) { return !l.algorithms(plan).empty(); });
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const auto& l = plan.layers[i];
    // A layer the backend keeps float in this mode shows as float, with why.
    const bool kept = !l.float_reason.empty();
    rows.push_back({std::to_string(i + 1), l.info.name, l.info.class_name,
                    shape_str(l.info.weight_shape), kept ? "float" : l.weights.str(),
                    kept ? "float" : l.activations.str(),
                    kept ? l.decided_by + "; stays float: " + l.float_reason : l.decided_by});
    if (algorithms) rows.back().insert(rows.back().end() - 1, join(l.algorithms(plan), "+"));
  }
  std::vector<std::string> header{"#", "layer", "class", "weight shape", "weights", "activations"};
  if (algorithms) header.emplace_back("algorithms");
  header.emplace_back("decided by");
  std::ostringstream os;
  os << format_table(header, rows, {true});
  os << plan.num_quantized() << "/" << plan.layers.size() << " layers quantized, mode "
     << to_string(plan.mode) << "\n";
  for (const auto& w : plan.warnings) os << "warning: " << w << "\n";
  return os.str();
}

std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right) {
  std::vector<size_t> w(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < w.size(); ++c) {
      std::string cell = c < r.size() ? r[c] : "";
      std::string pad(w[c] - cell.size(), ' ');
      bool ra = c < right.size() && right[c];
      s += (c ? "  " : "") + (ra ? pad + cell : cell + (c + 1 < w.size() ? pad : ""));
    }
    return s + "\n";
  };
  std::string out = line(header);
  size_t total = 0;
  for (auto x : w) total += x;
  out += std::string(total + 2 * (w.size() - 1), '-') + "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

}  // namespace tq
