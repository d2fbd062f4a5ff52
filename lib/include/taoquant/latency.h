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

// Per-call seconds of each function, `iters` rounds after `warmup` rounds;
// within a round the functions run in alternating order, so that machine
// noise hits them alike. `progress(done, total)` after each round.
std::vector<std::vector<double>> interleaved_times(
    const std::vector<std::function<void()>>& fns, int warmup, int iters,
    const std::function<void(size_t done, size_t total)>& progress = {});

// Medians (ms per call) of A and B over `reps` interleaved repeats, each of
// as many calls as fit in about budget_ms / reps. `warm`: warm-up calls first
// (the profiling executor profiles the first call and compiles its plan on
// the second); a slow pair with a 2x gap after one call each stops there.
std::pair<double, double> ab_medians_ms(const std::function<void()>& a,
                                        const std::function<void()>& b, int reps, double budget_ms,
                                        bool warm = true);

// "the 1-minute load average was 3.9 on 2 CPUs" when the machine is
// oversubscribed (the load average above the CPU count plus one half: more
// runnable threads than cores, so timings are noisy), else "".
std::string machine_busy();

// `t` with `bs` rows along dim 0: its leading rows, repeated when it has fewer.
at::Tensor resize_batch(const at::Tensor& t, int64_t bs);

}  // namespace tq
