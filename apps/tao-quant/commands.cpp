// The command table and the spec-driven commands.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "option_table.h"
#include "taoquant/backend.h"
#include "taoquant/html_report.h"
#include "taoquant/interrupt.h"
#include "taoquant/model.h"
#include "taoquant/pipeline.h"
#include "taoquant/reference.h"
#include "taoquant/report.h"
#include "taoquant/spec.h"
#include "taoquant/steps.h"
#include "taoquant/tune.h"

namespace tqcli {

bool stdout_is_tty() {
  return ::isatty(STDOUT_FILENO) == 1;
}
bool stderr_is_tty() {
  return ::isatty(STDERR_FILENO) == 1;
}

void add_options(CLI::App& app, Options& o, const std::vector<OptionRow>& rows) {
  for (const auto& row : rows) {
    CLI::Option* opt = std::visit(
        [&](auto field) {
          return row.arg == Arg::kFlag ? app.add_flag(row.name, o.*field, row.help)
                                       : app.add_option(row.name, o.*field, row.help);
        },
        row.field);
    if (row.type_name) opt->type_name(row.type_name);
    if (row.check) opt->check(*row.check);
    if (row.required) opt->required();
    // A list option takes one argument (split at its delimiter): a key=value
    // after `--formats a,b` is an override, not a third format.
    if (row.delimiter) opt->delimiter(row.delimiter)->allow_extra_args(false);
  }
}

void add_spec_options(CLI::App& app, Options& o) {
  add_options(app, o,
              {{Arg::kOption, "-e,--experiment_spec,--spec", &Options::spec,
                "Experiment spec (TAO YAML)", nullptr, std::nullopt, true},
               {Arg::kOption, "overrides", &Options::overrides,
                "key.path=value overrides, e.g. quantize.mode=static_ptq", "KEY=VALUE"}});
}

ProgressFn tty_progress(const Options& o) {
  if (!stderr_is_tty() || o.quiet || o.json) return {};
  return [](const std::string& what, size_t done, size_t total) {
    std::cerr << "\r" << what << " " << done << "/" << total << "   " << (done == total ? "\n" : "")
              << std::flush;
  };
}

// The setup of a command: the spec options when it reads a spec, then its
// own rows.
std::function<void(CLI::App&, Options&)> with_options(std::vector<OptionRow> rows,
                                                      bool spec = true) {
  return [rows = std::move(rows), spec](CLI::App& app, Options& o) {
    if (spec) add_spec_options(app, o);
    add_options(app, o, rows);
  };
}

std::string write_html(const Options& o, HtmlKind kind, const nlohmann::json& report,
                       const std::string& json_path) {
  if (o.no_html || json_path.empty()) return "";
  const tq::HtmlReport k = kind == HtmlKind::kQuantize   ? tq::HtmlReport::kQuantize
                           : kind == HtmlKind::kEvaluate ? tq::HtmlReport::kEvaluate
                                                         : tq::HtmlReport::kBatch;
  try {
    return tq::write_html_report(k, report, json_path);
  } catch (const std::exception& e) {
    spdlog::warn("HTML report next to {} not written: {}", json_path, e.what());
    return "";
  }
}

namespace {

tq::QuantizeOptions quantize_options(const Options& o) {
  tq::QuantizeOptions qo;
  qo.verbose = o.verbosity > 0;
  return qo;
}

// The spec, with what its reader decided for the user said once.
tq::Spec load_quantize_spec(const Options& o) {
  auto spec = tq::load_spec(o.spec, o.overrides);
  for (const auto& n : spec.notes) spdlog::info("{}", n);
  return spec;
}

// The spec's notes, as the lines under the summary.
std::string notes_text(const tq::Spec& spec) {
  std::string text;
  for (const auto& n : spec.notes) text += "note:    " + n + "\n";
  return text;
}

int run_quantize(Options& o) {
  auto spec = load_quantize_spec(o);
  if (o.dry_run) {
    auto out = tq::run_inspect(spec, quantize_options(o));
    std::cout << (o.json ? out.to_json().dump(2) + "\n" : tq::format_plan_table(out.plan));
    return 0;
  }
  tq::InterruptGuard interruptible;  // SIGINT/SIGTERM: exit 130/143, the earlier pair kept
  tq::QuantizeOptions qo = quantize_options(o);
  size_t width = 0;
  qo.on_plan = [&](const tq::Plan& plan) {
    for (const auto& l : plan.layers) width = std::max(width, l.info.name.size());
    spdlog::info("model {}: {} quantizable layers, {} planned for quantization",
                 spec.quantize.model_path, plan.layers.size(), plan.num_quantized());
  };
  qo.on_layer = [&](const tq::LayerResult& r, size_t i, size_t total) {
    if (!o.quiet && !o.json) std::cout << tq::format_layer_line(r, i, total, width) << std::endl;
  };
  auto out = tq::run_quantize(spec, qo);
  const std::string notes = notes_text(spec);
  const std::string html = write_html(o, HtmlKind::kQuantize, out.report, out.report_path);
  if (o.json)
    std::cout << out.report.dump(2) << "\n";
  else
    std::cout << tq::format_quantize_summary(out)
              << (html.empty() ? "" : "html:     " + html + "\n") << notes;
  return 0;
}

// The selection data's figures and, when tune selected on other data, the
// test set's, one line each.
std::string tune_sides(const nlohmann::json& tune) {
  std::string out;
  for (const char* side : {"selection", "test"}) {
    if (!tune.contains(side)) continue;
    const auto& t = tune[side];
    auto num = [&](const char* k, const char* unit) {
      return t[k].is_number() ? tq::format_fixed(t[k].get<double>(), 2) + unit : std::string("-");
    };
    out += std::string(side) + (std::string(side) == "test" ? ":      " : ": ") + "top-1 " +
           num("top1", " %") + " (float " + num("float_top1", " %") + ", drop " +
           num("top1_drop", " pp") + "), SQNR " + num("sqnr_db", " dB") + " on " +
           t["data"].get<std::string>() + "\n";
  }
  return out;
}

// `tune`: the search's steps, then the final artifact's summary; exit 3
// (after writing everything) when no candidate met the gates.
int run_tune(Options& o) {
  tq::InterruptGuard interruptible;  // SIGINT/SIGTERM: exit 130/143, the best pair kept
  auto spec = load_quantize_spec(o);
  tq::TuneOptions to;
  // The budget counts the command's wall clock, library loading included;
  // a process age past a minute is not this start-up (a clock that cannot be
  // trusted): the budget then starts here.
  if (const double age = tq::process_seconds(); age < 60)
    to.started = std::chrono::steady_clock::now() -
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(age));
  to.verbose = o.verbosity > 0;
  to.on_progress = tty_progress(o);
  if (!o.quiet && !o.json) to.on_step = [](const std::string& l) { std::cout << l << std::endl; };
  auto out = tq::run_tune(spec, to);
  const std::string html = write_html(o, HtmlKind::kQuantize, out.report, out.report_path);
  if (o.json)
    std::cout << out.report.dump(2) << "\n";
  else
    std::cout << tq::format_quantize_summary(out.quantize)
              << (html.empty() ? "" : "html:     " + html + "\n")
              << "tuned:    " << out.tuned_spec_path << " (tao-quant quantize -e "
              << out.tuned_spec_path << " reproduces the artifact)\n"
              << tune_sides(out.report["tune"]);
  if (!out.passed)
    throw tq::Error(tq::ExitCode::kGate,
                    "tune: no candidate met the gates (" + out.failed_gate +
                        "); the best one found is written, but it is not gate-passing");
  return 0;
}

// The ranked per-layer sensitivity table (inspect --sensitivity).
int run_sensitivity(Options& o, const tq::Spec& spec) {
  tq::SensitivityOptions so;
  so.formats = tq::parse_formats(o.formats, {"--formats", 0, 0}, "--formats");
  so.max_samples = static_cast<size_t>(o.samples);
  so.data = o.data;
  so.on_progress = tty_progress(o);
  const auto r = tq::run_sensitivity(spec, so);
  std::cout << (o.json ? r.to_json().dump(2) + "\n" : tq::format_sensitivity_table(r));
  return 0;
}

int run_inspect(Options& o) {
  auto spec = load_quantize_spec(o);
  if (o.sensitivity) return run_sensitivity(o, spec);
  auto out = tq::run_inspect(spec, quantize_options(o));
  if (o.json)
    std::cout << out.to_json().dump(2) << "\n";
  else {
    std::cout << "backend " << out.backend.requested;
    if (out.backend.requested != out.backend.info->name)
      std::cout << " (" << out.backend.info->name << ")";
    std::cout << ", model " << out.model_path << "\n\n" << tq::format_plan_table(out.plan);
  }
  return 0;
}

// One line per timed op and batch size of a timing cache:
// fp32, static int8, dynamic int8 (Linear) and the static speedup.
std::string format_timings(const nlohmann::json& cache) {
  struct Row {
    double fp32 = -1, int8 = -1, dyn = -1;
  };
  std::map<std::string, Row> rows;
  for (const auto& [key, v] : cache.at("entries").items()) {
    const auto slash = key.rfind('/');
    const std::string head = key.substr(0, slash), form = key.substr(slash + 1);
    Row& r = rows[head];
    (form == "fp32" ? r.fp32 : form == "int8" ? r.int8 : r.dyn) = v.get<double>();
  }
  std::string out;
  char buf[64];
  for (const auto& [head, r] : rows) {
    char dyn[16] = "         -";
    if (r.dyn >= 0) std::snprintf(dyn, sizeof dyn, "%10.4f", r.dyn);
    std::snprintf(buf, sizeof buf, "%10.4f %10.4f %s %6.2fx", r.fp32, r.int8, dyn,
                  r.int8 > 0 ? r.fp32 / r.int8 : 0.0);
    out += buf + std::string("  ") + head + "\n";
  }
  return "   fp32 ms    int8 ms  int8dyn ms speedup  op / shapes / batch (int8 = static)\n" + out;
}

// `profile`: the spec's model as static int8, timed whole and layer by layer
// (float, static and dynamic int8) into a timing cache for this machine.
int run_profile(Options& o) {
  o.overrides.push_back("quantize.mode=static_ptq");  // whatever the spec's mode
  auto spec = load_quantize_spec(o);
  tq::InterruptGuard interruptible;
  tq::QuantizeOptions qo = quantize_options(o);
  qo.profile = true;
  auto out = tq::run_quantize(spec, qo);
  for (const auto& w : out.warnings) spdlog::warn("{}", w);
  if (out.timing_cache_path.empty())
    throw tq::UsageError(
        "profile: nothing was timed (backend '" + out.requested_backend +
        "' has no never-slower check, or quantize.backend_kwargs.latency_check is false); "
        "profile with backend libtorch");
  std::ifstream in(out.timing_cache_path);
  const auto cache = nlohmann::json::parse(in);
  if (o.json)
    std::cout << cache.dump(2) << "\n";
  else
    std::cout << format_timings(cache) << "timing cache: " << out.timing_cache_path << " ("
              << cache.at("entries").size() << " entries; engine " << cache.value("engine", "")
              << ")\n";
  return 0;
}

// `export`: the formats of quantize.export (or --formats) from the result
// in results_dir, without quantizing again.
int run_export(Options& o) {
  auto spec = tq::load_spec(o.spec, o.overrides);
  if (!o.formats.empty()) {
    auto& e = spec.quantize.export_spec;
    e.formats = o.formats;
    e.format_locs.assign(o.formats.size(), tq::SourceLoc{"--formats", 0, 0});
  }
  const auto out = tq::run_export(spec);
  if (o.json) {
    std::cout << out.report.value("exports", nlohmann::json::object()).dump(2) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : out.files)
    rows.push_back({f.format, f.path,
                    tq::format_bytes(static_cast<double>(std::filesystem::file_size(f.path)))});
  std::cout << tq::format_table({"format", "file", "size"}, rows, {false, false, true})
            << "report:   " << out.report_path << " (exports)\n";
  return 0;
}

using tq::join;

template <class E>
std::string join_names(const std::vector<E>& v, size_t all = 0) {
  if (all && v.size() == all) return "all";
  return v.empty() ? "-" : join(tq::names_of(v));
}

std::string alias_list(const tq::BackendInfo& b) {
  std::vector<std::string> aliases;
  for (const auto& a : b.aliases)
    aliases.push_back(a.name + (a.modes.empty() ? "" : " (" + join_names(a.modes) + ")"));
  return join(aliases);
}

// One row per (backend, mode): the capability table each mode runs on.
std::string backends_table(const std::vector<const tq::BackendInfo*>& list) {
  std::vector<std::vector<std::string>> rows;
  const size_t kinds = tq::layer_kind_table().entries.size();
  for (const auto* b : list) {
    bool first = true;
    for (auto m : b->caps.modes) {
      const auto mc = b->caps.for_mode(m);
      rows.push_back({first ? b->name : "", first ? alias_list(*b) : "",
                      std::string(tq::to_string(m)), join_names(mc.weight_dtypes),
                      join_names(mc.activation_dtypes), join_names(mc.layer_kinds, kinds),
                      first ? b->origin : ""});
      first = false;
    }
  }
  return tq::format_table(
      {"backend", "aliases", "mode", "weight dtypes", "activation dtypes", "layer kinds", "origin"},
      rows);
}

// Each backend's backend_kwargs schema.
std::string options_text(const std::vector<const tq::BackendInfo*>& list) {
  std::string out;
  for (const auto* b : list) {
    if (b->caps.options.empty()) continue;
    out += "\n" + b->name + " backend_kwargs:\n";
    for (const auto& opt : b->caps.options) {
      std::string type(tq::to_string(opt.type));
      if (!opt.allowed.empty()) type = join(opt.allowed, "|");
      out += "  " + opt.name + " (" + type + ", default " +
             (opt.default_value.is_null() ? std::string("unset") : opt.default_value.dump()) +
             (opt.modes.empty() ? "" : ", " + join_names(opt.modes)) + "): " + opt.help + "\n";
    }
  }
  return out;
}

int run_backends(Options& o) {
  auto list = tq::BackendRegistry::instance().list();
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto* b : list) arr.push_back(tq::backend_to_json(*b));
    nlohmann::json j{{"backends", arr}};
    j.update(tq::spec_reference_json());
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << backends_table(list) << options_text(list)
            << tq::format_spec_reference(tq::spec_reference_json());
  return 0;
}

// inspect's options: the plan, or the sensitivity table.
std::function<void(CLI::App&, Options&)> inspect_options() {
  return with_options(
      {{Arg::kFlag, "--json", &Options::json, "Print the plan (or the sensitivity table) as JSON"},
       {Arg::kFlag, "--sensitivity", &Options::sensitivity,
        "Rank the layers by what quantizing each one alone does to the model's "
        "output (and what keeping it alone float gains)"},
       {Arg::kOption, "--formats", &Options::formats,
        "Candidate weight formats for --sensitivity (default: the plan's)", nullptr, std::nullopt,
        false, ','},
       {Arg::kOption, "--samples", &Options::samples, "Evaluation samples for --sensitivity",
        nullptr, CLI::PositiveNumber},
       {Arg::kOption, "--data", &Options::data, "Evaluation data for --sensitivity", nullptr,
        CLI::IsMember({"test", "calibration"})}});
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"quantize",
       "Quantize a model as the spec's quantize: section says; write the artifact and report",
       with_options({{Arg::kFlag, "--dry-run", &Options::dry_run,
                      "Plan only: print the per-layer plan, write nothing"},
                     {Arg::kFlag, "--json", &Options::json,
                      "Print the report (or plan) as JSON on stdout"}}),
       run_quantize},
      {"inspect",
       "Print the per-layer plan (which layer gets which format, and why); quantize nothing",
       inspect_options(), run_inspect},
      {"tune",
       "Search per-layer formats (quantize.tune) until the accuracy, size and latency gates "
       "hold; write the best artifact, its report and tuned_spec.yaml (exit 3 when no "
       "candidate passes)",
       with_options({{Arg::kFlag, "--json", &Options::json, "Print the report as JSON"}}),
       run_tune},
      {"profile",
       "Time the spec's model and each layer (float, static and dynamic int8) on this machine; "
       "write a timing cache for quantize.timing_cache",
       with_options({{Arg::kFlag, "--json", &Options::json, "Print the timing cache as JSON"}}),
       run_profile},
      {"export",
       "Export the result in results_dir for other runtimes (quantize.export.formats or "
       "--formats: onnx, onnx_qdq, ...) without quantizing again",
       with_options(
           {{Arg::kOption, "--formats", &Options::formats,
             "Formats to export (default: quantize.export.formats)", nullptr, std::nullopt, false,
             ','},
            {Arg::kFlag, "--json", &Options::json, "Print the report's exports entry as JSON"}}),
       run_export},
      {"evaluate",
       "Evaluate a float or quantized model on the test data: accuracy, fidelity vs float, "
       "latency, quality "
       "gates (exit 3 on failure)",
       setup_evaluate, run_evaluate},
      {"backends",
       "List the registered backends (aliases, modes, dtypes, options, origin), then the "
       "observers, algorithms, gates and spec values they are configured with",
       with_options({{Arg::kFlag, "--json", &Options::json, "Print as JSON"}}, false),
       run_backends},
      {"batch", "Run many quantize (+ evaluate) jobs from a manifest, each in its own process",
       setup_batch, run_batch},
      {"report", "Work with batch summaries: report merge combines shard summaries", setup_report,
       run_report},
  };
  return table;
}

}  // namespace tqcli
