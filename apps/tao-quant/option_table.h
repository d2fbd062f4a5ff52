// A command's options as one table: each row names an option, the Options
// field it fills, its help and its extras. add_options() adds the rows in
// order, which is the order `--help` lists them in.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli.h"

namespace tqcli {

enum class Arg { kOption, kFlag };

struct OptionRow {
  Arg arg;
  const char* name;  // CLI11 names: "-j,--jobs", "--keep-going,!--no-keep-going", "manifest"
  std::variant<bool Options::*, int Options::*, double Options::*, std::string Options::*,
               std::vector<std::string> Options::*>
      field;
  const char* help;
  const char* type_name = nullptr;                     // shown for the value: "PATH"
  std::optional<CLI::Validator> check = std::nullopt;  // CLI::Range(1, 1024), ...
  bool required = false;
  char delimiter = '\0';  // a list option split at this character
};

void add_options(CLI::App& app, Options& o, const std::vector<OptionRow>& rows);

}  // namespace tqcli
