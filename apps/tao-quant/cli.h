// The tao-quant command line: one table of commands drives both dispatch and
// --help. Commands are thin: they parse options and call the library.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "taoquant/json.h"

namespace CLI {
class App;
}

namespace tq {
struct Spec;
struct Plan;
struct QuantizeOutcome;
}  // namespace tq

namespace tqcli {

// Options shared by every command plus each command's own.
struct Options {
  // global
  int verbosity = 0;  // -v count
  bool quiet = false;
  std::string log_level;
  std::vector<std::string> plugins;
  bool no_html = false;  // quantize, evaluate, batch: no *_report.html
  // common to spec-driven commands
  std::string spec;
  std::vector<std::string> overrides;
  bool json = false;
  // quantize
  bool dry_run = false;
  // inspect --sensitivity
  bool sensitivity = false;
  std::vector<std::string> formats;
  int samples = 1000;
  std::string data;
  // evaluate
  bool is_quantized = false;
  bool compare = false;
  std::string checkpoint;
  // batch (cmd_batch.cpp)
  std::string manifest;
  int jobs = 1;
  std::string shard;
  int keep_going = 0;  // >0 --keep-going, <0 --no-keep-going, 0: env CI decides
  bool resume = false;
  std::string junit;
  double timeout = 0;
  std::string out_dir;
  int threads = 0;
  // report merge
  std::string report_action;
  std::vector<std::string> inputs;
  std::string output, markdown;
};

struct Command {
  const char* name;
  const char* summary;
  std::function<void(CLI::App&, Options&)> setup;
  std::function<int(Options&)> run;
};

// The one table (defined in commands.cpp).
const std::vector<Command>& commands();

// Shared helpers.
bool stdout_is_tty();
bool stderr_is_tty();
void add_spec_options(CLI::App& app, Options& o);
// "what done/total" on one line of stderr: on a TTY, unless -q or --json.
using ProgressFn = std::function<void(const std::string& what, size_t done, size_t total)>;
ProgressFn tty_progress(const Options& o);
// Writes the HTML report next to a JSON report unless --no-html; returns its
// path ("" when off). A failure to write it is a warning, not an error.
enum class HtmlKind { kQuantize, kEvaluate, kBatch };
std::string write_html(const Options& o, HtmlKind kind, const nlohmann::json& report,
                       const std::string& json_path);

// `evaluate` (cmd_evaluate.cpp).
void setup_evaluate(CLI::App& app, Options& o);
int run_evaluate(Options& o);

// batch and report merge (cmd_batch.cpp).
void setup_batch(CLI::App& app, Options& o);
int run_batch(Options& o);
void setup_report(CLI::App& app, Options& o);
int run_report(Options& o);

}  // namespace tqcli
