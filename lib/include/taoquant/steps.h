// Step timings: where a long operation spends its time. Each step is logged
// at debug level as it ends and kept, in order, for the report.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "taoquant/json.h"

namespace tq {

// Seconds since `t0` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds since this process started (Linux: /proc/self/stat against the
// boot clock, 10 ms resolution; 0 where that cannot be read). What a user's
// wall clock counts for a command, library loading included.
double process_seconds();

class StepTimer {
 public:
  explicit StepTimer(std::string scope);
  // Ends the current step (begun at construction or at the last step()).
  // A repeated name adds to that step's time.
  void step(const std::string& what);
  double total_seconds() const;
  // [{"step": name, "seconds": s}, ...] in the order the steps first ended.
  nlohmann::json to_json() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string scope_;
  Clock::time_point start_, last_;
  std::vector<std::pair<std::string, double>> steps_;
};

}  // namespace tq
