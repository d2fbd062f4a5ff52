// The one registry template behind the backend and observer registries (as
// c10's Registry<>): entries keyed by name (and aliases), a duplicate refused
// naming both registrations, and a pending mode for plugins: while a plugin
// loads, its registrations are held back (nothing may throw inside dlopen),
// then checked and committed all or nothing, or dropped. Torch-free.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "taoquant/error.h"

namespace tq {

template <class Info>
class Registry {
 public:
  explicit Registry(std::string what) : what_(std::move(what)) {}
  virtual ~Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Adds an entry (held back while a plugin loads). Throws tq::Error
  // (exit 1) for an entry that cannot work or a taken name.
  void add(Info info) {
    if (pending_mode_) {
      stamp(info, origin_);
      pending_.push_back(std::move(info));
      return;
    }
    check(info, items_, items_.size());
    items_.push_back(std::move(info));
  }

  // The entry with this name or alias, or nullptr.
  const Info* find(const std::string& key) const {
    for (const auto& i : items_)
      for (const auto& k : keys_of(i))
        if (k == key) return &i;
    return nullptr;
  }
  std::vector<const Info*> list() const {  // sorted by name
    std::vector<const Info*> out;
    for (const auto& i : items_) out.push_back(&i);
    std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
    return out;
  }
  std::vector<std::string> keys() const {  // every name and alias, sorted
    std::vector<std::string> out;
    for (const auto& i : items_)
      for (const auto& k : keys_of(i)) out.push_back(k);
    std::sort(out.begin(), out.end());
    return out;
  }

  void begin_pending(const std::string& origin) {
    pending_mode_ = true;
    pending_.clear();
    origin_ = origin;
  }
  // Throws on the first pending entry that would be refused; changes nothing.
  void check_pending() const {
    std::vector<Info> all = items_;
    for (const auto& p : pending_) {
      check(p, all, all.size());
      all.push_back(p);
    }
  }
  void commit_pending() {
    check_pending();
    pending_mode_ = false;
    for (auto& p : pending_) items_.push_back(std::move(p));
    pending_.clear();
  }
  void drop_pending() {
    pending_mode_ = false;
    pending_.clear();
  }

 protected:
  virtual std::vector<std::string> keys_of(const Info& i) const { return {i.name}; }
  // Throws tq::Error for an entry that cannot work (no name, no factory...).
  virtual void validate(const Info& i) const = 0;
  // "by built-in, registered at x.cpp:12", "at x.cpp:12": for duplicate messages.
  virtual std::string where(const Info& i) const { return "at " + i.registered_at; }
  // Marks an entry registered by the plugin `origin`.
  virtual void stamp(Info& i, const std::string& origin) const { i.origin = origin; }

 private:
  void check(const Info& info, const std::vector<Info>& existing, size_t n) const {
    validate(info);
    for (const auto& k : keys_of(info))
      for (size_t j = 0; j < n; ++j)
        for (const auto& other : keys_of(existing[j]))
          if (other == k)
            throw Error(ExitCode::kRuntime, what_ + " name '" + k +
                                                "' is registered twice: first " +
                                                where(existing[j]) + ", again " + where(info));
  }

  std::string what_;
  std::vector<Info> items_, pending_;
  bool pending_mode_ = false;
  std::string origin_;
};

}  // namespace tq
