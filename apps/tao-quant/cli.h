// The tao-quant command line: one table of commands drives both dispatch and
// --help. Commands are thin: they parse options and call the library.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tqcli {

// Options shared by every command plus each command's own.
struct Options {
  // global
  int verbosity = 0;  // -v count
  bool quiet = false;
  std::string log_level;
  std::vector<std::string> plugins;
  // common to spec-driven commands
  std::string spec;
  std::vector<std::string> overrides;
  bool json = false;
  // quantize
  bool dry_run = false;
  // evaluate
  bool is_quantized = false;
  bool compare = false;
  std::string checkpoint;
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

}  // namespace tqcli
