// The one latency harness: interleaved runs and medians, shared by
// `evaluate` (float vs quantized model at each batch size) and the libtorch
// backend's never-slower check (model and per-layer A/B).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tq {

double median(std::vector<double> v);

// Milliseconds per call, over `iters` calls of `fn`.
double time_ms(const std::function<void()>& fn, int iters = 1);

// One timed round of `iters` calls: per-call wall and CPU milliseconds (the
// CPU time of every thread of this process), the time its threads spent
// runnable but waiting for a CPU, and the involuntary context switches.
struct Round {
  double ms = 0, cpu_ms = 0;  // per call
  double round_ms = 0;        // the whole round
  // The run-queue wait of all of this process's threads in the round
  // (Linux schedstat, nanosecond resolution); < 0 where the kernel does not
  // report it.
  double delay_ms = -1;
  long switches = 0;  // in the whole round
  // Another process took this one's CPUs during the round: it got less than
  // half a core of CPU for the round's wall time (it slept), or its threads
  // waited for a CPU for more than a tenth of the round's wall time. An
  // idle machine's kernel threads cost a round well under 1 ms; a busy loop
  // on one of two cores, half of it. Where the wait is not reported, more
  // than one involuntary context switch per 30 ms (any in a shorter round)
  // stands for it. Load average alone cannot tell: a loaded machine with
  // an idle core times cleanly, and a busy one between two samples of the
  // load average does not.
  bool contended() const;
};
Round time_round(const std::function<void()>& fn, int iters = 1);
// One clean call each, the longer over `above_ms`, one at most half the
// other's time: a 2x difference that decides without more calls.
bool twice_apart(const Round& a, const Round& b, double above_ms);
// +1: B's call took at least `ratio` times A's, -1: A's at least `ratio`
// times B's, each clean; 0 otherwise (AbLook::decide_apart).
int apart_by(const std::pair<Round, Round>& ab, double ratio);

// Per-call seconds of each function, `iters` rounds after `warmup` rounds;
// within a round the functions run in alternating order, so that machine
// noise hits them alike. A round where any function's timing was contended
// is dropped and run again, up to `iters` more rounds; `contended` is true
// when fewer than `iters` clean rounds were had by then (the times are then
// the last `iters` rounds', and not to be printed as fact).
// `progress(done, total)` after each round.
struct InterleavedTimes {
  std::vector<std::vector<double>> seconds;  // [function][round]
  bool contended = false;
  int rounds = 0, dropped = 0;  // rounds run (after warm-up), rounds dropped
};
InterleavedTimes interleaved_times(
    const std::vector<std::function<void()>>& fns, int warmup, int iters,
    const std::function<void(size_t done, size_t total)>& progress = {});

// A call this long (ms) is a repeat of its own: ab_medians_ms takes at most
// two of them, one warm-up call before them where a faster call takes two.
constexpr double kSlowCallMs = 250;

// The repeats of an A/B look, in ms per call: the clean ones, and every one.
struct AbRounds {
  std::vector<double> a, b;
  std::vector<double> all_a, all_b;
};

// How ab_medians_ms looks at A and B: `reps` interleaved repeats, each of
// as many calls as fit in about budget_ms / reps. `warm`: warm-up calls first
// (the profiling executor profiles the first call and compiles its plan on
// the second); a slow pair with a 2x gap after one call each stops there.
// `first` (with warm false): a pair of warm calls the caller just timed,
// which stands for the first timed call (and counts as a repeat as it does).
// `more_of` (with warm false, no `first`): a shorter look's repeats, which
// count toward `reps` (a longer look goes on from them instead of timing
// them again); the new repeats are sized by their medians.
// `decide_apart` (> 1, with warm): the first two timed pairs after the
// warm-up, each clean and at least this many times apart in the same
// direction, decide there (their means): a layer alone that int8 runs 10x
// slower needs no medians. (The second warm-up call is no measure: the
// profiling executor compiles a module's plan in it.)
struct AbLook {
  int reps = 3;
  double budget_ms = 15;
  bool warm = true;
  const std::pair<Round, Round>* first = nullptr;
  const AbRounds* more_of = nullptr;
  double decide_apart = 0;
};
// Medians (ms per call) of A and B. Contended repeats are dropped and run
// again (at most 2 * reps more); `contended`: fewer than half of `reps` were
// clean (the medians are then of every repeat); `apart`: at least two
// repeats of each were clean and every clean repeat of one was faster than
// every clean repeat of the other. `rounds`: the repeats they are the
// medians of (none when a slow warm-up pair decided).
struct AbMedians {
  double a_ms = 0, b_ms = 0;
  bool contended = false, apart = false;
  AbRounds rounds;
};
AbMedians ab_medians_ms(const std::function<void()>& a, const std::function<void()>& b,
                        const AbLook& how);

// How many measurements of this process ended contended (after their
// retries): the never-slower check's warning reads it.
long contended_measurements();
void note_contended_measurement();

// "the 1-minute load average was 3.9 on 2 CPUs" when the machine is
// oversubscribed (the load average above the CPU count plus one half: more
// runnable threads than cores, so timings are noisy), else "".
std::string machine_busy();

// `t` with `bs` rows along dim 0: its leading rows, repeated when it has fewer.
at::Tensor resize_batch(const at::Tensor& t, int64_t bs);

}  // namespace tq
