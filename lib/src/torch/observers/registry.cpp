#include <algorithm>

#include "taoquant/observer.h"

namespace tq {

ObserverRegistry& ObserverRegistry::instance() {
  // Never destroyed: observers registered by plugins may outlive the statics.
  static ObserverRegistry* r = new ObserverRegistry();
  return *r;
}

void ObserverRegistry::add(ObserverInfo info) {
  if (pending_mode_) {
    info.registered_at = pending_origin_ + " (" + info.registered_at + ")";
    pending_.push_back(std::move(info));
    return;
  }
  if (info.name.empty())
    throw Error(ExitCode::kRuntime, "observer registered without a name at " + info.registered_at);
  if (!info.factory)
    throw Error(ExitCode::kRuntime, "observer '" + info.name +
                                        "' registered without a factory at " + info.registered_at);
  if (const ObserverInfo* old = find(info.name))
    throw Error(ExitCode::kRuntime, "observer name '" + info.name +
                                        "' is registered twice: first at " + old->registered_at +
                                        ", again at " + info.registered_at);
  observers_.push_back(std::move(info));
}

void ObserverRegistry::begin_pending(const std::string& origin) {
  pending_mode_ = true;
  pending_origin_ = "plugin " + origin;
  pending_.clear();
}

void ObserverRegistry::check_pending() const {
  for (size_t i = 0; i < pending_.size(); ++i) {
    const ObserverInfo& p = pending_[i];
    if (p.name.empty() || !p.factory)
      throw Error(ExitCode::kRuntime,
                  "observer registered without a name or factory at " + p.registered_at);
    const ObserverInfo* old = find(p.name);
    for (size_t j = 0; j < i && !old; ++j)
      if (pending_[j].name == p.name) old = &pending_[j];
    if (old)
      throw Error(ExitCode::kRuntime, "observer name '" + p.name +
                                          "' is registered twice: first at " + old->registered_at +
                                          ", again at " + p.registered_at);
  }
}

void ObserverRegistry::commit_pending() {
  check_pending();
  pending_mode_ = false;
  for (auto& p : pending_) observers_.push_back(std::move(p));
  pending_.clear();
}

void ObserverRegistry::drop_pending() {
  pending_mode_ = false;
  pending_.clear();
}

const ObserverInfo* ObserverRegistry::find(const std::string& name) const {
  for (const auto& o : observers_)
    if (o.name == name) return &o;
  return nullptr;
}

std::vector<std::string> ObserverRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& o : observers_) out.push_back(o.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<Observer> ObserverRegistry::create(const std::string& name,
                                                   const ObserverConfig& cfg,
                                                   const SourceLoc& loc) const {
  const ObserverInfo* info = find(name);
  if (!info) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw SpecError(loc, "unknown observer '" + name + "'" + did_you_mean(name, names()) +
                             "; available observers: " + known);
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
