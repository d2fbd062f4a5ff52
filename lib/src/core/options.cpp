#include "taoquant/options.h"

#include <algorithm>
#include <set>

namespace tq {

namespace {

bool within(const OptionDef& o, double v) {
  return !o.min || v >= *o.min;
}

// "integer", "positive integer", "integer >= 3" (plural: "integers", ...).
std::string integers(const OptionDef& o, bool plural) {
  const std::string noun = plural ? "integers" : "integer";
  if (!o.min) return noun;
  if (*o.min == 1) return "positive " + noun;
  return noun + " >= " + nlohmann::json(*o.min).dump();
}

// "" when `v` is a valid value of `o`, else what was expected.
std::string check_value(const OptionDef& o, const nlohmann::json& v) {
  const std::string bound = o.min ? " >= " + nlohmann::json(*o.min).dump() : "";
  switch (o.type) {
    case OptionType::kBool:
      return v.is_boolean() ? "" : "expected true or false";
    case OptionType::kInt:
      return v.is_number_integer() && within(o, v.get<double>())
                 ? ""
                 : "expected " + std::string(o.min ? "a " : "an ") + integers(o, false);
    case OptionType::kNumber:
      return v.is_number() && within(o, v.get<double>()) ? "" : "expected a number" + bound;
    case OptionType::kString:
      if (!v.is_string())
        return "expected a string" + (o.allowed.empty() ? "" : " (" + join(o.allowed) + ")");
      if (o.allowed.empty() ||
          std::find(o.allowed.begin(), o.allowed.end(), v.get<std::string>()) != o.allowed.end())
        return "";
      return quote_value(v.get<std::string>()) + " is not one of: " + join(o.allowed) +
             did_you_mean(v.get<std::string>(), o.allowed);
    case OptionType::kIntList: {
      bool ok = v.is_array() && !v.empty();
      for (const auto& e : v) ok = ok && e.is_number_integer() && within(o, e.get<double>());
      return ok ? "" : "expected a non-empty list of " + integers(o, true) + ", e.g. [1, 32]";
    }
  }
  return "unknown option type";
}

bool reads_mode(const OptionDef& o, Mode m) {
  return o.modes.empty() || std::find(o.modes.begin(), o.modes.end(), m) != o.modes.end();
}

}  // namespace

std::string BackendOptions::key(const std::string& name) {
  return "quantize.backend_kwargs." + name;
}

bool BackendOptions::has(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() && !it->is_null();
}

const nlohmann::json& BackendOptions::raw(const std::string& name) const {
  static const nlohmann::json null;
  auto it = values_.find(name);
  return it == values_.end() ? null : *it;
}

bool BackendOptions::get_bool(const std::string& name) const {
  return raw(name).get<bool>();
}
int64_t BackendOptions::get_int(const std::string& name) const {
  return raw(name).get<int64_t>();
}
double BackendOptions::get_number(const std::string& name) const {
  return raw(name).get<double>();
}
std::string BackendOptions::get_string(const std::string& name) const {
  return raw(name).get<std::string>();
}
std::vector<int64_t> BackendOptions::get_int_list(const std::string& name) const {
  return raw(name).get<std::vector<int64_t>>();
}

SourceLoc BackendOptions::loc(const std::string& name) const {
  auto it = locs_.find(name);
  return it == locs_.end() ? section_ : it->second;
}

BackendOptions resolve_options(const std::vector<OptionDef>& schema, const nlohmann::json& kwargs,
                               Mode mode, const std::string& who,
                               const std::map<std::string, SourceLoc>& locs,
                               const SourceLoc& fallback) {
  auto loc_of = [&](const std::string& dotted) {
    auto it = locs.find(dotted);
    return it == locs.end() ? fallback : it->second;
  };
  const std::string section = "quantize.backend_kwargs";
  if (!kwargs.is_null() && !kwargs.is_object())
    throw SpecError(loc_of(section), section + ": expected a mapping of option: value");
  std::vector<std::string> names;
  for (const auto& o : schema) names.push_back(o.name);
  nlohmann::json values = nlohmann::json::object();
  std::map<std::string, SourceLoc> given;
  for (const auto& o : schema) values[o.name] = o.default_value;
  if (kwargs.is_object()) {
    for (const auto& item : kwargs.items()) {
      // Not a structured binding: lambdas below capture `name` (C++17, clang).
      const std::string& name = item.key();
      const nlohmann::json& v = item.value();
      const std::string k = BackendOptions::key(name);
      auto it = std::find_if(schema.begin(), schema.end(),
                             [&](const OptionDef& o) { return o.name == name; });
      if (it == schema.end())
        throw SpecError(loc_of(k), k + ": unknown key for " + who +
                                       " (accepted: " + (names.empty() ? "none" : join(names)) +
                                       ")" + did_you_mean(name, names));
      if (!reads_mode(*it, mode)) {
        std::vector<std::string> modes;
        for (auto m : it->modes) modes.emplace_back(to_string(m));
        throw SpecError(loc_of(k), k + ": " + who + " reads this option in mode " + join(modes) +
                                       " only, not in " + std::string(to_string(mode)));
      }
      std::string why = check_value(*it, v);
      if (!why.empty()) throw SpecError(loc_of(k), k + ": " + why);
      values[name] = v;
      given[name] = loc_of(k);
    }
  }
  return BackendOptions(std::move(values), std::move(given), loc_of(section));
}

nlohmann::json options_to_json(const std::vector<OptionDef>& schema) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& o : schema) {
    nlohmann::json j{{"name", o.name},
                     {"type", std::string(to_string(o.type))},
                     {"default", o.default_value},
                     {"help", o.help}};
    if (!o.allowed.empty()) j["allowed"] = o.allowed;
    if (o.min) j["min"] = *o.min;
    if (!o.modes.empty()) {
      j["modes"] = nlohmann::json::array();
      for (auto m : o.modes) j["modes"].push_back(std::string(to_string(m)));
    }
    a.push_back(std::move(j));
  }
  return a;
}

std::string validate_option_schema(const std::vector<OptionDef>& schema) {
  std::set<std::string> seen;
  for (const auto& o : schema) {
    if (o.name.empty()) return "an option without a name";
    if (!seen.insert(o.name).second) return "option '" + o.name + "' is declared twice";
    if (!o.default_value.is_null()) {
      std::string why = check_value(o, o.default_value);
      if (!why.empty())
        return "option '" + o.name + "': default " + o.default_value.dump() + ": " + why;
    }
  }
  return "";
}

}  // namespace tq
