// SIGINT and SIGTERM during the commands that write results (quantize,
// tune, profile, batch): a guard catches them while such a command runs;
// the work stops at its next safe point (between calibration batches,
// stages, search steps) with an Interrupted error, the partial files go,
// and the process exits 128 + the signal (130 for SIGINT, 143 for
// SIGTERM) with the earlier (or, for tune, the best) result in place. A
// second signal ends the process at once. Torch-free.
#pragma once

#include "taoquant/error.h"

namespace tq {

// The signal that interrupted the command: 128 + signal is its exit code.
// `detail` says what was kept ("interrupted by SIGINT: <detail>").
class Interrupted : public Error {
 public:
  explicit Interrupted(int sig, const std::string& detail = "");
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Catches SIGINT and SIGTERM while it lives (the earlier handlers come back
// after). Constructing one forgets an earlier interruption.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// The signal caught since the last guard was made (0: none). It stays set
// after the guard is gone, so that the command's exit code can say so.
int interrupt_signal();
// A safe point: throws Interrupted when a signal was caught.
void throw_if_interrupted();
// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int sig);

}  // namespace tq
