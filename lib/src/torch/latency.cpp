#include "taoquant/latency.h"

#include <ATen/ATen.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
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

namespace {

struct Usage {
  double cpu_ms = 0;
  long switches = 0;
};
Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return {ms(u.ru_utime) + ms(u.ru_stime), u.ru_nivcsw};
}

std::atomic<long> g_contended{0};

}  // namespace

int apart_by(const std::pair<Round, Round>& ab, double ratio) {
  const Round &a = ab.first, &b = ab.second;
  if (a.contended() || b.contended()) return 0;
  return b.ms >= ratio * a.ms ? 1 : a.ms >= ratio * b.ms ? -1 : 0;
}

bool twice_apart(const Round& a, const Round& b, double above_ms) {
  return std::max(a.ms, b.ms) > above_ms && apart_by({a, b}, 2) != 0;
}

bool Round::contended() const {
  if (cpu_ms < 0.5 * ms) return true;
  if (delay_ms >= 0) return delay_ms > 0.1 * round_ms;
  return static_cast<double>(switches) > round_ms / 30.0;
}

namespace {

// The summed run-queue wait (ms) of this process's threads: the second
// field of /proc/self/task/<tid>/schedstat; -1 where it is not reported.
// Each thread's file stays open while the thread lives (a read is then one
// pread: about 2 us a thread, where opening it again costs 10).
class RunDelay {
 public:
  ~RunDelay() {
    for (const auto& [tid, fd] : fds_) close(fd);
  }
  double read_ms() {
    std::lock_guard<std::mutex> lock(mu_);
    DIR* dir = opendir("/proc/self/task");
    if (!dir) return -1;
    std::map<std::string, int> live;
    double sum_ns = 0;
    bool any = false;
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      auto it = fds_.find(e->d_name);
      const int fd =
          it != fds_.end()
              ? it->second
              : open(("/proc/self/task/" + std::string(e->d_name) + "/schedstat").c_str(),
                     O_RDONLY | O_CLOEXEC);
      if (it != fds_.end()) fds_.erase(it);
      if (fd < 0) continue;
      char buf[128];
      const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
      if (n <= 0) {  // a thread gone whose id came back: open the new one next time
        close(fd);
        continue;
      }
      live[e->d_name] = fd;
      buf[n] = 0;
      char* end = nullptr;
      std::strtod(buf, &end);  // the time it ran
      const double wait_ns = std::strtod(end, &end);
      if (end == nullptr || *end != ' ') continue;  // not "run wait slices"
      sum_ns += wait_ns;
      any = true;
    }
    closedir(dir);
    for (const auto& [tid, fd] : fds_) close(fd);  // threads gone since
    fds_.swap(live);
    return any ? sum_ns / 1e6 : -1;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> fds_;  // tid -> its schedstat file
};

double run_delay_ms() {
  static RunDelay delay;
  return delay.read_ms();
}

}  // namespace

Round time_round(const std::function<void()>& fn, int iters) {
  const double d0 = run_delay_ms();
  const Usage u0 = usage_now();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const Usage u1 = usage_now();
  const double d1 = run_delay_ms();
  Round r;
  r.ms = wall / iters;
  r.cpu_ms = (u1.cpu_ms - u0.cpu_ms) / iters;
  r.round_ms = wall;
  r.switches = u1.switches - u0.switches;
  // A thread that ended in the round takes its wait with it: unknown then.
  if (d0 >= 0 && d1 >= d0) r.delay_ms = d1 - d0;
  return r;
}

long contended_measurements() {
  return g_contended.load();
}
void note_contended_measurement() {
  ++g_contended;
}

InterleavedTimes interleaved_times(const std::vector<std::function<void()>>& fns, int warmup,
                                   int iters, const std::function<void(size_t, size_t)>& progress) {
  const size_t m = fns.size();
  const size_t total = static_cast<size_t>(std::max(0, warmup) + std::max(0, iters));
  size_t done = 0;
  for (int w = 0; w < warmup; ++w) {
    for (const auto& f : fns) f();
    if (progress) progress(++done, total);
  }
  InterleavedTimes out;
  out.seconds.resize(m);
  std::vector<std::vector<double>> all(m);
  int clean = 0;
  for (int i = 0; clean < iters && i < 2 * iters; ++i) {
    bool contended = false;
    std::vector<double> round(m);
    for (size_t k = 0; k < m; ++k) {
      const size_t j = i % 2 == 0 ? k : m - 1 - k;  // alternate the order
      const Round r = time_round(fns[j]);
      round[j] = r.ms / 1e3;
      contended = contended || r.contended();
    }
    ++out.rounds;
    for (size_t k = 0; k < m; ++k) {
      all[k].push_back(round[k]);
      if (!contended) out.seconds[k].push_back(round[k]);
    }
    clean += !contended;
    out.dropped += contended;
    if (progress && static_cast<int>(done) < static_cast<int>(total)) progress(++done, total);
  }
  if (clean < iters) {  // the last `iters` rounds, flagged
    out.contended = true;
    for (size_t k = 0; k < m; ++k)
      out.seconds[k].assign(all[k].end() - std::min<std::ptrdiff_t>(iters, all[k].size()),
                            all[k].end());
    note_contended_measurement();
  }
  if (progress && done < total) progress(total, total);
  return out;
}

namespace {

void add_round(AbRounds& r, const Round& x, const Round& y) {
  r.all_a.push_back(x.ms);
  r.all_b.push_back(y.ms);
  if (x.contended() || y.contended()) return;
  r.a.push_back(x.ms);
  r.b.push_back(y.ms);
}

// A look's opening: the warm-up calls (a slow pair with a 2x gap after one
// clean call each decides there: `decided`; so do the first two timed pairs
// with AbLook's decide_apart) and its first timed pair, or the shorter look
// it goes on from. The per-call times size its repeats.
struct Opening {
  double ta = 0, tb = 0;
  bool decided = false;
  std::optional<std::pair<Round, Round>> first;  // a repeat where rounds are of one call
};
Opening open_look(const std::function<void()>& a, const std::function<void()>& b, const AbLook& how,
                  AbRounds& rounds) {
  if (how.more_of && !how.more_of->all_a.empty()) {
    rounds = *how.more_of;
    return {std::max(median(rounds.all_a), 1e-3), std::max(median(rounds.all_b), 1e-3), false,
            std::nullopt};
  }
  if (how.warm) {
    const Round wa = time_round(a), wb = time_round(b);
    // Slow runs (a large model at a large batch, after the small batch
    // warmed it up): a 2x difference in one clean call each is decisive.
    if (twice_apart(wa, wb, 500)) return {wa.ms, wb.ms, true, std::nullopt};
    // A slow run dwarfs the compile time: one warm-up call is enough.
    if (std::max(wa.ms, wb.ms) <= kSlowCallMs) {
      a();
      b();
    }
  }
  Opening o;
  o.first = how.first ? *how.first : std::make_pair(time_round(a), time_round(b));
  o.ta = std::max(o.first->first.ms, 1e-3);
  o.tb = std::max(o.first->second.ms, 1e-3);
  if (how.decide_apart > 1 && how.warm && !how.first) {
    const int way = apart_by(*o.first, how.decide_apart);
    if (way == 0) return o;
    const std::pair<Round, Round> next{time_round(a), time_round(b)};
    if (apart_by(next, how.decide_apart) == way)
      return {(o.ta + next.first.ms) / 2, (o.tb + next.second.ms) / 2, true, std::nullopt};
  }
  return o;
}

}  // namespace

AbMedians ab_medians_ms(const std::function<void()>& a, const std::function<void()>& b,
                        const AbLook& how) {
  AbMedians out;
  AbRounds& r = out.rounds;
  const Opening o = open_look(a, b, how, r);
  if (o.decided) return {o.ta, o.tb, false, false, {}};
  // Slow runs (large models, large batches) are stable: two repeats in all
  // keep the check to seconds.
  const int reps = std::max(o.ta, o.tb) > kSlowCallMs ? std::min(how.reps, 2) : how.reps;
  const int ia = std::clamp(static_cast<int>(how.budget_ms / reps / o.ta), 1, 200);
  const int ib = std::clamp(static_cast<int>(how.budget_ms / reps / o.tb), 1, 200);
  // A repeat of one call each is what that first call was: it counts.
  if (o.first && (std::max(o.ta, o.tb) > kSlowCallMs || (ia == 1 && ib == 1)))
    add_round(r, o.first->first, o.first->second);
  for (int tries = 0; static_cast<int>(r.a.size()) < reps && tries < 3 * reps; ++tries) {
    const Round x = time_round(a, ia), y = time_round(b, ib);
    add_round(r, x, y);
  }
  if (static_cast<int>(r.a.size()) < std::max(1, reps / 2)) {  // contended
    note_contended_measurement();
    out.a_ms = median(r.all_a);
    out.b_ms = median(r.all_b);
    out.contended = true;
    return out;
  }
  out.a_ms = median(r.a);
  out.b_ms = median(r.b);
  if (r.a.size() >= 2) {
    const auto [a_lo, a_hi] = std::minmax_element(r.a.begin(), r.a.end());
    const auto [b_lo, b_hi] = std::minmax_element(r.b.begin(), r.b.end());
    out.apart = *a_hi < *b_lo || *b_hi < *a_lo;
  }
  return out;
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
