// Self-contained HTML reports (inline CSS and SVG, a small inline script for
// sorting and filtering; no network) rendered from the JSON reports with the
// Mustache templates in lib/templates (embedded in the binary at build time).
// Torch-free: JSON in, HTML out.
#pragma once

#include <string>

#include "taoquant/json.h"

namespace tq {

enum class HtmlReport {
  kQuantize,  // quantize_report.json
  kEvaluate,  // evaluate_report.json
  kBatch,     // batch_summary.json
};

// What the template renders: the report reshaped for display (formatted
// numbers, table rows, chart geometry). Exposed for tests.
nlohmann::json html_view_model(HtmlReport kind, const nlohmann::json& report);

// The whole HTML document. RuntimeError if a template does not render.
std::string render_html_report(HtmlReport kind, const nlohmann::json& report);

// "dir/quantize_report.json" -> "dir/quantize_report.html"
std::string html_report_path(const std::string& json_path);

// Renders and writes the report next to its JSON (atomically); returns the
// HTML path. A batch summary links the job reports that exist next to it.
std::string write_html_report(HtmlReport kind, const nlohmann::json& report,
                              const std::string& json_path);

}  // namespace tq
