// TQ_NUM_THREADS as both executables read it: the tool (apps/tao-quant,
// which refuses anything else with exit 2) and the launcher (apps/launcher,
// which passes a valid count on as OMP_NUM_THREADS). Header-only: the
// launcher links nothing of the tool's.
#pragma once

#include <cerrno>
#include <cstdlib>

namespace tqcli {

// The thread count `v` names: an integer from 1 to 4096, else 0 (also for
// null or empty).
inline long parse_thread_count(const char* v) {
  if (!v || !*v) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  return !*end && !errno && n >= 1 && n <= 4096 ? n : 0;
}

}  // namespace tqcli
