#include "taoquant/steps.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <spdlog/spdlog.h>

namespace tq {

double process_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  for (int i = 3; i < 22 && fields >> f; ++i) {
  }
  unsigned long long start_ticks = 0;
  timespec now{};
  const long hz = sysconf(_SC_CLK_TCK);
  if (!(fields >> start_ticks) || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  const double age = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) -
                     static_cast<double>(start_ticks) / static_cast<double>(hz);
  return age > 0 ? age : 0;
}

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
