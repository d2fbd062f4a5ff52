#include "taoquant/latency.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace tq {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_ms(const std::function<void()>& fn, int iters) {
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
}

std::vector<std::vector<double>> interleaved_times(
    const std::vector<std::function<void()>>& fns, int warmup, int iters,
    const std::function<void(size_t, size_t)>& progress) {
  const size_t m = fns.size();
  const size_t total = static_cast<size_t>(std::max(0, warmup) + std::max(0, iters));
  size_t done = 0;
  for (int w = 0; w < warmup; ++w) {
    for (const auto& f : fns) f();
    if (progress) progress(++done, total);
  }
  std::vector<std::vector<double>> times(m);
  for (int i = 0; i < iters; ++i) {
    for (size_t k = 0; k < m; ++k) {
      const size_t j = i % 2 == 0 ? k : m - 1 - k;  // alternate the order
      times[j].push_back(time_ms(fns[j]) / 1e3);
    }
    if (progress) progress(++done, total);
  }
  return times;
}

std::pair<double, double> ab_medians_ms(const std::function<void()>& a,
                                        const std::function<void()>& b, int reps, double budget_ms,
                                        bool warm) {
  double ta = 0, tb = 0;
  if (warm) {
    ta = time_ms(a);
    tb = time_ms(b);
    // Slow runs (a large model at a large batch, after the small batch
    // warmed it up): a 2x difference in one call each is decisive.
    if (std::max(ta, tb) > 500 && (tb <= 0.5 * ta || ta <= 0.5 * tb)) return {ta, tb};
    // A slow run dwarfs the compile time: one warm-up call is enough.
    if (std::max(ta, tb) <= 250) {
      a();
      b();
    }
  }
  ta = std::max(time_ms(a), 1e-3);
  tb = std::max(time_ms(b), 1e-3);
  std::vector<double> ra, rb;
  if (std::max(ta, tb) > 250) {
    // Slow runs (large models, large batches) are stable: that call counts
    // as a repeat, and two repeats in all keep the check to seconds.
    reps = std::min(reps, 2);
    ra.push_back(ta);
    rb.push_back(tb);
  }
  const int ia = std::clamp(static_cast<int>(budget_ms / reps / ta), 1, 200);
  const int ib = std::clamp(static_cast<int>(budget_ms / reps / tb), 1, 200);
  while (static_cast<int>(ra.size()) < reps) {
    ra.push_back(time_ms(a, ia));
    rb.push_back(time_ms(b, ib));
  }
  return {median(ra), median(rb)};
}

std::string machine_busy() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  if (!(in >> load)) return "";
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  if (load <= cpus + 0.5) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "the 1-minute load average was %.1f on %u CPUs", load, cpus);
  return buf;
}

at::Tensor resize_batch(const at::Tensor& t, int64_t bs) {
  const int64_t n = t.size(0);
  if (n >= bs) return t.slice(0, 0, bs).contiguous();
  std::vector<int64_t> rep(static_cast<size_t>(t.dim()), 1);
  rep[0] = (bs + n - 1) / n;
  return t.repeat(rep).slice(0, 0, bs).contiguous();
}

}  // namespace tq
