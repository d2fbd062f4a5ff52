#include "taoquant/html_report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <kainjow/mustache.hpp>

#include "taoquant/error.h"
#include "taoquant/result_files.h"
#include "taoquant_templates.h"
#include "views.h"

namespace tq {

namespace mus = kainjow::mustache;
namespace fs = std::filesystem;

namespace {

std::string number_text(const nlohmann::json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  const double d = v.get<double>();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", d);
  return buf;
}

// The view-model as Mustache data: null and "" are false (a section that does not
// render), numbers are their shortest text.
mus::data to_data(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      mus::data d{mus::data::type::object};
      for (const auto& [k, v] : j.items()) d.set(k, to_data(v));
      return d;
    }
    case nlohmann::json::value_t::array: {
      mus::data d{mus::data::type::list};
      for (const auto& v : j) d.push_back(to_data(v));
      return d;
    }
    case nlohmann::json::value_t::string:  // "" is false: {{#note}}...{{/note}} skips it
      return j.get_ref<const std::string&>().empty() ? mus::data{false}
                                                     : mus::data{j.get<std::string>()};
    case nlohmann::json::value_t::boolean:
      return mus::data{j.get<bool>()};
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return mus::data{number_text(j)};
    default:
      return mus::data{false};
  }
}

// Template files by stem: "quantize.html" -> "quantize".
const std::map<std::string, std::string>& templates() {
  static const std::map<std::string, std::string> all = [] {
    std::map<std::string, std::string> m;
    for (const auto& t : html_templates::kAll) {
      const std::string name = t.name;
      m[name.substr(0, name.find('.'))] = t.text;
    }
    return m;
  }();
  return all;
}

// Each report kind: the template that renders it and its view-model.
struct ReportKind {
  HtmlReport kind;
  const char* template_name;
  nlohmann::json (*view)(const nlohmann::json& report);
};
const ReportKind kReportKinds[] = {{HtmlReport::kQuantize, "quantize", html_view::quantize},
                                   {HtmlReport::kEvaluate, "evaluate", html_view::evaluate},
                                   {HtmlReport::kBatch, "batch", html_view::batch}};

const ReportKind* report_kind(HtmlReport kind) {
  for (const auto& k : kReportKinds)
    if (k.kind == kind) return &k;
  return nullptr;
}

const char* template_of(HtmlReport kind) {
  const ReportKind* k = report_kind(kind);
  return k ? k->template_name : "quantize";
}

}  // namespace

nlohmann::json html_view_model(HtmlReport kind, const nlohmann::json& report) {
  const ReportKind* k = report_kind(kind);
  return k ? k->view(report) : nlohmann::json{};
}

std::string render_html_report(HtmlReport kind, const nlohmann::json& report) {
  const auto& all = templates();
  const nlohmann::json view = html_view_model(kind, report);
  mus::data data = to_data(view);
  for (const auto& [name, text] : all) {
    // Partials live in the same namespace as the view's top-level keys.
    if (view.contains(name))
      throw RuntimeError("HTML view key '" + name + "' hides the template of that name");
    const std::string copy = text;
    data.set(name, mus::partial{[copy] { return copy; }});
  }
  mus::mustache tmpl{all.at(template_of(kind))};
  if (!tmpl.is_valid())
    throw RuntimeError(std::string("HTML template '") + template_of(kind) +
                       "': " + tmpl.error_message());
  std::string html = tmpl.render(data);
  if (!tmpl.is_valid())
    throw RuntimeError(std::string("HTML template '") + template_of(kind) +
                       "': " + tmpl.error_message());
  return html;
}

std::string html_report_path(const std::string& json_path) {
  return fs::path(json_path).replace_extension(".html").string();
}

std::string write_html_report(HtmlReport kind, const nlohmann::json& report,
                              const std::string& json_path) {
  nlohmann::json r = report;
  if (kind == HtmlReport::kBatch && r.contains("jobs") && r["jobs"].is_array()) {
    const fs::path dir = fs::path(json_path).parent_path();
    for (auto& job : r["jobs"]) {
      const std::string id = job.value("id", "");
      std::error_code ec;
      for (const char* f : {"quantize_report", "evaluate_report"})
        if (!id.empty() && fs::exists(dir / id / (std::string(f) + ".html"), ec))
          job[std::string("html_") + f] = id + "/" + f + ".html";
    }
  }
  const std::string path = html_report_path(json_path);
  write_text_atomic(path, render_html_report(kind, r));
  return path;
}

}  // namespace tq
