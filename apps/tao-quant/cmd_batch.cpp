// `tao-quant batch MANIFEST` and `tao-quant report merge`: thin layers over
// taoquant/batch.h (docs/batch.md).
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "option_table.h"
#include "taoquant/batch.h"
#include "taoquant/report.h"
#include "taoquant/result_files.h"

namespace tqcli {

namespace {

namespace fs = std::filesystem;

std::string fixed(double v, int prec) {
  return tq::format_fixed(v, prec);
}

std::string opt(const std::optional<double>& v, int prec, const char* suffix = "") {
  return v ? fixed(*v, prec) + suffix : "-";
}

std::string duration(double s) {
  if (s < 60) return fixed(s, 1) + " s";
  const int m = static_cast<int>(s / 60);
  return std::to_string(m) + "m" + fixed(s - 60 * m, 0) + "s";
}

// The launcher (bin/tao-quant) when it started this process, so that the
// jobs get the same environment; else this binary.
std::string self_exe() {
  if (const char* l = std::getenv("TQ_LAUNCHER"); l && *l && ::access(l, X_OK) == 0) return l;
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    throw tq::RuntimeError(
        std::string("batch: cannot find the tao-quant binary (/proc/self/exe): ") +
        std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

bool env_is_true(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "true" || s == "1" || s == "yes";
}

// "[ 3/24] passed  fmnist-cnn-int8  size 0.27x  top-1 91.2 -> 91.1  4.2 s"
std::string job_line(const tq::JobResult& r, const tq::BatchProgress& p) {
  const std::string w = std::to_string(std::to_string(p.total).size());
  char head[48];
  std::snprintf(head, sizeof head, ("[%" + w + "zu/%zu] ").c_str(), p.done, p.total);
  std::string s = head;
  if (r.resumed) return s + "resumed " + r.id + " (passed in an earlier run, inputs unchanged)";
  if (r.status == tq::JobStatus::kPassed) {
    s += "passed  " + r.id;
    if (r.size_ratio) s += "  size " + fixed(*r.size_ratio, 3) + "x";
    if (r.quant_top1) s += "  top-1 " + opt(r.fp32_top1, 2) + " -> " + fixed(*r.quant_top1, 2);
    if (r.speedup) s += "  speedup " + fixed(*r.speedup, 2) + "x";
    return s + "  " + duration(r.duration_s);
  }
  return s + "FAILED  " + r.id + "  (" + r.failure + ", " + duration(r.duration_s) + ") " +
         r.message;
}

std::string progress_line(const tq::BatchProgress& p) {
  return "batch: " + std::to_string(p.done) + "/" + std::to_string(p.total) + " done, " +
         std::to_string(p.failed) + " failed, " + std::to_string(p.running) + " running, " +
         duration(p.elapsed_s);
}

void print_summary(const tq::BatchSummary& s, bool table) {
  if (table) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& j : s.jobs) {
      std::string status = tq::to_string(j.status);
      if (j.status == tq::JobStatus::kFailed) status = "FAILED (" + j.failure + ")";
      rows.push_back({j.id, j.backend.empty() ? "-" : j.backend, j.mode.empty() ? "-" : j.mode,
                      status, opt(j.size_ratio, 3), opt(j.fp32_top1, 2), opt(j.quant_top1, 2),
                      opt(j.top1_drop, 2), opt(j.speedup, 2, "x"),
                      j.status == tq::JobStatus::kSkipped ? "-" : duration(j.duration_s)});
    }
    std::cout << "\n"
              << tq::format_table({"job", "backend", "mode", "status", "size", "fp32 top-1",
                                   "quant top-1", "drop", "speedup", "time"},
                                  rows,
                                  {false, false, false, false, true, true, true, true, true, true});
  }
  const auto t = s.totals();
  std::cout << t.jobs << " jobs: " << t.passed << " passed, " << t.failed << " failed";
  if (t.gate_failures) std::cout << " (" << t.gate_failures << " quality gate)";
  std::cout << ", " << t.skipped << " skipped";
  if (t.resumed) std::cout << " (" << t.resumed << " resumed)";
  std::cout << " in " << duration(s.wall_s) << "\n";
}

int run_batch_cmd(Options& o) {
  const tq::Manifest m = tq::load_manifest(o.manifest);
  tq::BatchOptions bo;
  bo.exe = self_exe();
  bo.out_dir = o.out_dir.empty() ? (fs::path("results") / "batch" / m.name).string() : o.out_dir;
  bo.jobs = o.jobs;
  bo.threads_per_job = o.threads;
  if (!o.shard.empty()) bo.shard = tq::parse_shard(o.shard);
  bo.keep_going = o.keep_going > 0 || (o.keep_going == 0 && env_is_true("CI"));
  bo.resume = o.resume;
  if (o.timeout > 0) bo.timeout_s = o.timeout;
  for (const auto& p : o.plugins) bo.child_args.insert(bo.child_args.end(), {"--plugin", p});
  for (int i = 0; i < o.verbosity; ++i) bo.child_args.push_back("-v");
  if (o.no_html) bo.child_args.push_back("--no-html");

  const bool tty = stdout_is_tty();
  bool drawn = false;
  auto clear = [&] {
    if (drawn) std::cout << "\r\033[K";
    drawn = false;
  };
  bo.on_job_done = [&](const tq::JobResult& r, const tq::BatchProgress& p) {
    clear();
    std::cout << job_line(r, p) << std::endl;
  };
  if (tty)
    bo.on_progress = [&](const tq::BatchProgress& p) {
      clear();
      std::cout << progress_line(p) << std::flush;
      drawn = true;
    };
  size_t selected = 0;
  for (const auto& j : m.jobs) selected += bo.shard.contains(j.index) ? 1 : 0;
  std::cout << "batch: " << m.path << ": " << selected << " job(s)";
  if (bo.shard.sharded())
    std::cout << " (shard " << bo.shard.str() << " of " << m.jobs.size() << ")";
  std::cout << ", " << bo.jobs << " at a time, "
            << (bo.threads_per_job > 0 ? bo.threads_per_job
                                       : std::max(1, tq::usable_cores() / std::max(1, bo.jobs)))
            << " thread(s) each" << (bo.keep_going ? ", keep going" : "")
            << (bo.resume ? ", resume" : "") << "; results in " << bo.out_dir << std::endl;

  const tq::BatchSummary s = tq::run_batch(m, bo);
  clear();
  const std::string path = tq::write_batch_outputs(s, bo.out_dir, o.junit);
  const std::string html = write_html(o, HtmlKind::kBatch, tq::summary_to_json(s), path);
  print_summary(s, !o.quiet);
  std::cout << "summary: " << path << (html.empty() ? " (+ .md)" : " (+ .md, .html)");
  if (!o.junit.empty()) std::cout << ", JUnit: " << o.junit;
  std::cout << "\n";
  return static_cast<int>(tq::summary_exit_code(s));
}

int run_report_cmd(Options& o) {
  if (o.report_action != "merge") throw tq::UsageError("report: expected a subcommand: merge");
  std::vector<tq::BatchSummary> parts;
  for (const auto& f : o.inputs) parts.push_back(tq::read_summary_file(f));
  const tq::BatchSummary s = tq::merge_summaries(parts, o.inputs);
  tq::write_text_atomic(
      o.output,
      tq::summary_to_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (!o.markdown.empty()) tq::write_text_atomic(o.markdown, tq::summary_to_markdown(s));
  if (!o.junit.empty()) tq::write_text_atomic(o.junit, tq::summary_to_junit(s));
  std::cout << "merged " << parts.size() << " summaries into " << o.output << "\n";
  print_summary(s, !o.quiet);
  return static_cast<int>(tq::summary_exit_code(s));
}

}  // namespace

void setup_batch(CLI::App& app, Options& o) {
  add_options(
      app, o,
      {{Arg::kOption, "manifest", &Options::manifest,
        "The manifest (YAML): jobs, templates, defaults", "MANIFEST.yaml", std::nullopt, true},
       {Arg::kOption, "-j,--jobs", &Options::jobs,
        "Jobs side by side (each gets cores/N LibTorch threads)", nullptr, CLI::Range(1, 1024)},
       {Arg::kOption, "--shard", &Options::shard,
        "Run only shard i of N (1-based; job k goes to shard k%N+1)", "i/N"},
       {Arg::kFlag, "--keep-going,!--no-keep-going", &Options::keep_going,
        "Go on after a failed job (default when CI=true); without it, start no new job"},
       {Arg::kFlag, "--resume", &Options::resume,
        "Skip jobs that passed before with the same spec, overrides, model and data"},
       {Arg::kOption, "--junit", &Options::junit, "Write JUnit XML (one testcase per job)", "FILE"},
       {Arg::kOption, "--timeout", &Options::timeout,
        "Seconds per job (quantize + evaluate); 0 = none", nullptr, CLI::NonNegativeNumber},
       {Arg::kOption, "-o,--out", &Options::out_dir,
        "Output directory (default results/batch/<manifest name>)", "DIR"},
       {Arg::kOption, "--threads", &Options::threads,
        "LibTorch threads per job (default cores / --jobs)", nullptr, CLI::Range(1, 4096)}});
}

void setup_report(CLI::App& app, Options& o) {
  app.require_subcommand(1);
  auto* merge = app.add_subcommand("merge", "Combine shard batch summaries into one");
  add_options(
      *merge, o,
      {{Arg::kOption, "summaries", &Options::inputs, "batch_summary*.json of every shard", nullptr,
        CLI::ExistingFile, true},
       {Arg::kOption, "-o,--output", &Options::output, "The merged summary (JSON)", nullptr,
        std::nullopt, true},
       {Arg::kOption, "--markdown", &Options::markdown, "Also write the markdown table", "FILE"},
       {Arg::kOption, "--junit", &Options::junit, "Also write JUnit XML", "FILE"}});
  merge->callback([&o] { o.report_action = "merge"; });
}

int run_batch(Options& o) {
  return run_batch_cmd(o);
}
int run_report(Options& o) {
  return run_report_cmd(o);
}

}  // namespace tqcli
