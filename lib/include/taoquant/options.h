// Typed backend options (`quantize.backend_kwargs`): each backend declares a
// schema (name, type, default, allowed values, help), and the core checks the
// spec's kwargs against it before the model loads, with the key's file:line
// and a "did you mean". Backends then read typed, resolved values from the
// plan (Plan::options), never the spec. Torch-free.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/enums.h"
#include "taoquant/error.h"

namespace tq {

// An option's type. Specs never name it (only `backends` prints it), so its
// one table is the names below; options.cpp checks values of each type.
enum class OptionType { kBool, kInt, kNumber, kString, kIntList };
inline std::string_view to_string(OptionType v) {
  static constexpr std::string_view kNames[] = {"bool", "int", "number", "string", "int list"};
  return kNames[static_cast<int>(v)];
}

// One declared option.
struct OptionDef {
  std::string name;
  OptionType type = OptionType::kString;
  nlohmann::json default_value;      // null: unset unless the spec gives it
  std::vector<std::string> allowed;  // strings: the accepted values (empty: any)
  std::optional<double> min;         // numbers and list elements: lower bound
  std::string help;
  std::vector<Mode> modes;  // the modes that read it (empty: all)
};

// Resolved option values: every declared option (its default when the spec
// leaves it unset), and the spec location of each one the spec set.
class BackendOptions {
 public:
  BackendOptions() = default;
  BackendOptions(nlohmann::json values, std::map<std::string, SourceLoc> locs, SourceLoc section)
      : values_(std::move(values)), locs_(std::move(locs)), section_(std::move(section)) {}

  bool has(const std::string& name) const;  // set by the spec or by a default
  bool given(const std::string& name) const { return locs_.count(name) > 0; }
  const nlohmann::json& raw(const std::string& name) const;  // null when absent
  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_number(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;
  // Where the option was set (for errors found later, e.g. an engine that this
  // LibTorch lacks); the backend_kwargs section (or the spec) otherwise.
  SourceLoc loc(const std::string& name) const;
  // "quantize.backend_kwargs.<name>"
  static std::string key(const std::string& name);
  const nlohmann::json& values() const { return values_; }

 private:
  nlohmann::json values_ = nlohmann::json::object();
  std::map<std::string, SourceLoc> locs_;
  SourceLoc section_;
};

// Checks `kwargs` against `schema` for a backend in `mode`: unknown keys (with
// the accepted ones and a did-you-mean), wrong types, values outside `allowed`
// or below `min`. `locs` maps dotted spec keys to their locations
// (Spec::locs); `fallback` is used for keys it lacks. `who` names the backend
// in messages ("backend 'libtorch'"). Throws SpecError (exit 2).
BackendOptions resolve_options(const std::vector<OptionDef>& schema, const nlohmann::json& kwargs,
                               Mode mode, const std::string& who,
                               const std::map<std::string, SourceLoc>& locs,
                               const SourceLoc& fallback);

// The schema as JSON (for `backends --json` and docs).
nlohmann::json options_to_json(const std::vector<OptionDef>& schema);

// Refuses a schema that cannot work (duplicate names, a default of the wrong
// type or outside `allowed`); returns "" when fine, else the reason.
std::string validate_option_schema(const std::vector<OptionDef>& schema);

}  // namespace tq
