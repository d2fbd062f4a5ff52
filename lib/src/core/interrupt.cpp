#include "taoquant/interrupt.h"

#include <csignal>

namespace tq {

namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_int {
}, g_old_term{};

// The first signal is recorded; a second one ends the process as the
// default action would (a command stuck between safe points still stops).
void on_signal(int sig) {
  if (g_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
}

}  // namespace

Interrupted::Interrupted(int sig, const std::string& detail)
    : Error(static_cast<ExitCode>(128 + sig),
            "interrupted by " + signal_name(sig) + (detail.empty() ? "" : ": " + detail)),
      signal_(sig) {}

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

int interrupt_signal() {
  return static_cast<int>(g_signal);
}

void throw_if_interrupted() {
  if (const int sig = interrupt_signal()) throw Interrupted(sig);
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

}  // namespace tq
