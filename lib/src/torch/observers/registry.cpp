#include <algorithm>

#include "taoquant/observer.h"

namespace tq {

ObserverRegistry& ObserverRegistry::instance() {
  // Never destroyed: observers registered by plugins may outlive the statics.
  static ObserverRegistry* r = new ObserverRegistry();
  return *r;
}

void ObserverRegistry::validate(const ObserverInfo& info) const {
  if (info.name.empty())
    throw Error(ExitCode::kRuntime, "observer registered without a name at " + info.registered_at);
  if (!info.factory)
    throw Error(ExitCode::kRuntime, "observer '" + info.name +
                                        "' registered without a factory at " + info.registered_at);
}

void ObserverRegistry::stamp(ObserverInfo& info, const std::string& origin) const {
  info.origin = origin;
  info.registered_at = "plugin " + origin + " (" + info.registered_at + ")";
}

std::unique_ptr<Observer> ObserverRegistry::create(const std::string& name,
                                                   const ObserverConfig& cfg,
                                                   const SourceLoc& loc) const {
  const ObserverInfo* info = find(name);
  if (!info) {
    throw SpecError(loc, "unknown observer '" + name + "'" + did_you_mean(name, names()) +
                             "; available observers: " + join(names()));
  }
  try {
    return info->factory(cfg);
  } catch (const SpecError& e) {
    // Constructors report kwargs/config problems without a location.
    if (!e.loc().file.empty()) throw;
    throw SpecError(loc, e.bare_message());
  }
}

}  // namespace tq
