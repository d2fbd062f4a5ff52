#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "taoquant/backend.h"

namespace tq {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* r =
      new BackendRegistry();  // never destroyed: plugins may outlive statics
  return *r;
}

namespace {

std::string origin_text(const BackendInfo& b) {
  return b.origin == "built-in" ? "built-in, registered at " + b.registered_at
                                : "plugin " + b.origin + " (registered at " + b.registered_at + ")";
}

bool valid_backend_name(const std::string& n) {
  if (n.empty() || n.front() == '-' || n.front() == '.') return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return false;
  return true;
}

// A registration that cannot work is refused with where it came from.
void validate_backend_info(const BackendInfo& b) {
  auto bad = [&](const std::string& what) {
    throw Error(ExitCode::kRuntime, "backend '" + b.name + "' (" + origin_text(b) + "): " + what);
  };
  if (!valid_backend_name(b.name)) bad("invalid name; use letters, digits, '_', '-' and '.'");
  for (const auto& a : b.aliases)
    if (!valid_backend_name(a.name)) bad("invalid alias '" + a.name + "'");
  if (!b.factory) bad("no factory");
  if (b.caps.modes.empty()) bad("declares no modes (Capabilities::modes)");
  const auto& c = b.caps.constraints;
  if (!(c.min_scale >= 0) || !std::isfinite(c.min_scale))
    bad("constraints.min_scale must be a finite number >= 0");
  if (c.quant_min && c.quant_max && *c.quant_min >= *c.quant_max)
    bad("constraints.quant_min (" + std::to_string(*c.quant_min) + ") must be below quant_max (" +
        std::to_string(*c.quant_max) + ")");
  for (const auto& mc : b.caps.per_mode)
    if (std::find(b.caps.modes.begin(), b.caps.modes.end(), mc.mode) == b.caps.modes.end())
      bad("a capability table for mode " + std::string(to_string(mc.mode)) +
          ", which Capabilities::modes does not list");
  const std::string why = validate_option_schema(b.caps.options);
  if (!why.empty()) bad("options: " + why);
}

}  // namespace

std::vector<std::string> BackendRegistry::keys_of(const BackendInfo& b) const {
  std::vector<std::string> out{b.name};
  for (const auto& a : b.aliases) out.push_back(a.name);
  return out;
}

void BackendRegistry::validate(const BackendInfo& b) const {
  validate_backend_info(b);
}

std::string BackendRegistry::where(const BackendInfo& b) const {
  return "by " + origin_text(b);
}

BackendRegistry::Resolved BackendRegistry::resolve(const std::string& name,
                                                   const SourceLoc& loc) const {
  Resolved r;
  r.requested = name;
  r.info = find(name);
  if (!r.info) {
    throw SpecError(loc, "quantize.backend: unknown backend " + quote_value(name) +
                             " (available: " + join(all_names()) + ")" +
                             did_you_mean(name, all_names()));
  }
  r.modes = r.info->caps.modes;
  for (const auto& a : r.info->aliases) {
    if (a.name != name) continue;
    r.alias = &a;
    if (!a.modes.empty()) r.modes = a.modes;
  }
  return r;
}

}  // namespace tq
