#include "taoquant/steps.h"

#include <spdlog/spdlog.h>

namespace tq {

StepTimer::StepTimer(std::string scope)
    : scope_(std::move(scope)), start_(Clock::now()), last_(start_) {}

void StepTimer::step(const std::string& what) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  spdlog::debug("{}: {} {:.3f} s", scope_, what, s);
  for (auto& [name, secs] : steps_)
    if (name == what) {
      secs += s;
      return;
    }
  steps_.emplace_back(what, s);
}

double StepTimer::total_seconds() const {
  return std::chrono::duration<double>(last_ - start_).count();
}

nlohmann::json StepTimer::to_json() const {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [name, secs] : steps_) j.push_back({{"step", name}, {"seconds", secs}});
  return j;
}

}  // namespace tq
