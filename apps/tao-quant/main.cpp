// tao-quant: thin main over the library. Exit codes are documented in
// --help and README.md.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <ATen/Parallel.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "../thread_count.h"
#include "cli.h"
#include "option_table.h"
#include "taoquant/error.h"
#include "taoquant/interrupt.h"
#include "taoquant/model.h"
#include "taoquant/plugin.h"

namespace {

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  success\n"
    "  1  runtime error (model, data, backend, plugin or I/O failure)\n"
    "  2  spec or usage error (bad key, value, override or command line)\n"
    "  3  a quality gate failed (evaluate, batch)\n"
    "  130, 143  SIGINT or SIGTERM ended quantize, tune, profile or batch (the earlier or\n"
    "            best result is kept, no partial file is left)\n";

void setup_logging(const tqcli::Options& o) {
  auto logger = spdlog::stderr_color_mt("tao-quant");
  logger->set_pattern("%^%l%$: %v");
  spdlog::set_default_logger(logger);
  auto level = spdlog::level::info;
  if (o.quiet) level = spdlog::level::warn;
  if (o.verbosity >= 1) level = spdlog::level::debug;
  if (o.verbosity >= 2) level = spdlog::level::trace;
  if (!o.log_level.empty()) level = spdlog::level::from_str(o.log_level);
  spdlog::set_level(level);
}

// TQ_NUM_THREADS=N sets LibTorch's intra-op thread count (tao-quant batch
// gives each job cores / --jobs).
// Any other value is a usage error (exit 2): a typo must not run with
// another thread count than the one asked for.
// at::set_num_threads is called only when the count differs: once called,
// LibTorch rebuilds its caffe2 thread pool in that call and again on the
// first parallel op of every later thread, and each new pool's worker
// spins for milliseconds on a core the OpenMP threads want (7% of a
// Fashion-MNIST CNN quantize's CPU samples, docs/benchmarks.md). The
// launcher passes the count on as OMP_NUM_THREADS, so it is usually equal.
void apply_thread_env() {
  const char* v = std::getenv("TQ_NUM_THREADS");
  if (!v || !*v) return;
  const long n = tqcli::parse_thread_count(v);
  if (n == 0)
    throw tq::UsageError("TQ_NUM_THREADS=" + tq::quote_value(v) +
                         " is not a thread count: expected an integer from 1 to 4096 (unset it "
                         "for LibTorch's default)");
  if (at::get_num_threads() != n) at::set_num_threads(static_cast<int>(n));
}

// Runs the parsed subcommand. An error is printed with its exit code; a
// command that SIGINT or SIGTERM interrupted (taoquant/interrupt.h) exits
// 128 + the signal, also when it finished before its next safe point.
int dispatch(const std::vector<std::pair<CLI::App*, const tqcli::Command*>>& subs,
             tqcli::Options& opts) {
  int rc = static_cast<int>(tq::ExitCode::kUsage);
  try {
    apply_thread_env();
    tq::load_plugins(opts.plugins, /*from_env=*/true);
    for (const auto& [sub, cmd] : subs)
      if (sub->parsed()) rc = cmd->run(opts);
  } catch (const tq::Interrupted& e) {
    std::cerr << "tao-quant: " << e.what() << "\n";
    return static_cast<int>(e.code());
  } catch (const tq::Error& e) {
    std::cerr << "tao-quant: error: " << e.what() << "\n";
    rc = static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "tao-quant: error: " << e.what() << "\n";
    rc = static_cast<int>(tq::ExitCode::kRuntime);
  }
  if (const int sig = tq::interrupt_signal()) {
    std::cerr << "tao-quant: interrupted by " << tq::signal_name(sig) << "\n";
    return 128 + sig;
  }
  return rc;
}

int run(int argc, char** argv) {
  // glibc hands large blocks (im2col buffers, activations) back to the OS on
  // every free, so each forward pass page-faults them in again: a float CNN
  // at batch 32 ran 3-4x slower than its compute. Keep them in the process.
  // (MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment win.)
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 256 << 20);
  if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 512 << 20);
  tqcli::Options opts;
  CLI::App app{
      "tao-quant: native quantization for PyTorch (TorchScript) models, driven by TAO specs"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tao-quant ") + TQ_VERSION);
  using tqcli::Arg;
  using tqcli::Options;
  tqcli::add_options(
      app, opts,
      {{Arg::kFlag, "-v,--verbose", &Options::verbosity,
        "More detail (repeat for trace); full LibTorch errors"},
       {Arg::kFlag, "-q,--quiet", &Options::quiet, "Only warnings, errors and the final summary"},
       {Arg::kOption, "--log-level", &Options::log_level,
        "trace, debug, info, warn, error, critical, off", nullptr,
        CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"})},
       {Arg::kOption, "--plugin", &Options::plugins,
        "Load a backend plugin (shared library); repeatable", "PATH"},
       {Arg::kFlag, "--no-html", &Options::no_html,
        "quantize, evaluate, batch: do not write the HTML report next to the JSON"}});

  std::vector<std::pair<CLI::App*, const tqcli::Command*>> subs;
  for (const auto& c : tqcli::commands()) {
    auto* sub = app.add_subcommand(c.name, c.summary);
    sub->footer(kExitCodes);
    // Global options (-q, -v, --log-level, --plugin, --no-html) also work
    // after the subcommand: what it does not know goes to the main parser.
    sub->fallthrough();
    c.setup(*sub, opts);
    subs.emplace_back(sub, &c);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(tq::ExitCode::kUsage);
  }

  setup_logging(opts);
  tq::log_torch_warnings_once();
  return dispatch(subs, opts);
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = run(argc, argv);
  // Every file is written and closed by now. Skip the static destructors:
  // LibTorch deregisters thousands of operators at exit (~50 ms), which
  // nobody waits for. Sanitizer builds exit normally (leak checks run then).
#if defined(__SANITIZE_ADDRESS__)
  return rc;
#else
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  spdlog::shutdown();
  std::_Exit(rc);
#endif
}
