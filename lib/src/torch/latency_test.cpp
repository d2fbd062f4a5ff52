// The latency harness's contention rules (latency.h): a round in which the
// process did not get the CPU, or was preempted, is disturbed; disturbed
// rounds are dropped, run again, and a measurement that stays disturbed is
// flagged.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "taoquant/latency.h"

TEST_CASE("latency: a round is contended when the process lacks the CPU or waits for one",
          "[latency]") {
  tq::Round r;
  r.ms = r.round_ms = 10;
  r.cpu_ms = 10;
  r.delay_ms = 0;
  CHECK_FALSE(r.contended());
  r.cpu_ms = 20;  // two threads busy: clean
  CHECK_FALSE(r.contended());
  r.cpu_ms = 4.9;  // less than half a core for the round: it slept
  CHECK(r.contended());
  r.cpu_ms = 10;
  r.delay_ms = 0.9;  // an idle machine's kernel threads
  r.switches = 3;    // preemptions that cost it almost nothing
  CHECK_FALSE(r.contended());
  r.delay_ms = 1.1;  // its threads waited for a CPU over a tenth of the round
  CHECK(r.contended());
  r.ms = r.round_ms = 300;
  r.cpu_ms = 300;
  r.delay_ms = 29;
  CHECK_FALSE(r.contended());
  r.delay_ms = 31;
  CHECK(r.contended());
}

TEST_CASE("latency: without the kernel's run delay, involuntary switches stand for it",
          "[latency]") {
  tq::Round r;
  r.ms = r.round_ms = 10;
  r.cpu_ms = 10;
  CHECK_FALSE(r.contended());
  r.switches = 1;  // one preemption in a 10 ms round: up to a scheduler slice lost
  CHECK(r.contended());
  r.ms = r.round_ms = 300;
  r.cpu_ms = 300;
  r.switches = 10;  // one per 30 ms of a long round
  CHECK_FALSE(r.contended());
  r.switches = 11;
  CHECK(r.contended());
}

TEST_CASE("latency: a round whose threads outnumber the cores waits for them", "[latency]") {
  // Twice as many spinning threads as CPUs: each waits about half the
  // round on a run queue, whatever else the machine does (a busy machine
  // only adds to it), so the kernel's run delay must show it.
  const unsigned n = 2 * std::max(1u, std::thread::hardware_concurrency());
  std::atomic<bool> stop{false};
  auto spin_until = [](const std::function<bool()>& done) {
    volatile unsigned long spin = 0;
    while (!done()) spin = spin + 1;
  };
  std::vector<std::thread> crowd;  // alive across the round: their waits count
  for (unsigned i = 0; i < n; ++i)
    crowd.emplace_back([&] { spin_until([&] { return stop.load(); }); });
  const tq::Round r = tq::time_round([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
    spin_until([&] { return std::chrono::steady_clock::now() >= until; });
  });
  stop = true;
  for (auto& t : crowd) t.join();
  if (r.delay_ms < 0) {
    WARN("this kernel does not report run delay (schedstat): nothing to check");
    return;
  }
  CHECK(r.delay_ms > 0.1 * r.round_ms);
  CHECK(r.contended());
}

TEST_CASE("latency: rounds that lack the CPU are retried, then the figure is flagged",
          "[latency]") {
  // A call that sleeps gets no CPU for its wall time: every round is
  // disturbed, whatever else the machine does.
  auto sleeper = [] {
    timespec t{0, 2000000};
    nanosleep(&t, nullptr);
  };
  const tq::Round r = tq::time_round(sleeper, 2);
  CHECK(r.ms >= 2.0);
  CHECK(r.cpu_ms < 0.5 * r.ms);
  CHECK(r.contended());
  const long before = tq::contended_measurements();
  const tq::InterleavedTimes t = tq::interleaved_times({sleeper, sleeper}, 1, 3);
  CHECK(t.contended);
  CHECK(t.rounds == 6);  // 3, and as many again looking for clean ones
  CHECK(t.dropped == 6);
  REQUIRE(t.seconds.size() == 2);
  CHECK(t.seconds[0].size() == 3);  // the last 3 rounds, flagged
  CHECK(tq::ab_medians_ms(sleeper, sleeper, {2, 10, /*warm=*/false}).contended);
  CHECK(tq::contended_measurements() == before + 2);
}

TEST_CASE("latency: the run delay's files follow the threads that come and go", "[latency]") {
  namespace fs = std::filesystem;
  auto open_files = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  (void)tq::time_round([] {});  // this thread's file opened
  const auto before = open_files();
  for (int i = 0; i < 20; ++i) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; ++k)
      ts.emplace_back([&] {
        while (!stop) std::this_thread::yield();
      });
    const tq::Round r = tq::time_round([] {});
    stop = true;
    for (auto& t : ts) t.join();
    CHECK(r.round_ms >= 0);
  }
  (void)tq::time_round([] {});  // the files of the threads gone are closed
  CHECK(open_files() <= before);
}

namespace {

// A busy loop of `ms`: CPU time equal to wall time.
std::function<void()> spin(double ms) {
  return [ms] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(long(ms * 1e3));
    while (std::chrono::steady_clock::now() < end) {
    }
  };
}

}  // namespace

TEST_CASE("latency: two calls apart beyond their rounds' spread are told apart", "[latency]") {
  // Busy loops of 1 and 4 ms: every clean round of the short one is faster
  // than every clean round of the long one.
  const tq::AbMedians m = tq::ab_medians_ms(spin(1), spin(4), {3, 30, /*warm=*/false});
  if (!m.contended) {  // on a busy machine the rounds may stay disturbed: nothing to tell
    CHECK(m.a_ms < m.b_ms);
    CHECK(m.apart);
  }
  // Rounds that stay disturbed tell nothing apart, whatever their times.
  auto sleeper = [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
  const tq::AbMedians d = tq::ab_medians_ms(sleeper, spin(4), {2, 10, /*warm=*/false});
  CHECK(d.contended);
  CHECK_FALSE(d.apart);
}

TEST_CASE("latency: a longer look goes on from a shorter one's repeats", "[latency]") {
  // Calls of 2 ms or more, looked at with budgets that fit one call a
  // repeat: each call is one repeat, and no repeat is timed twice.
  int calls = 0;
  auto a = [&] {
    ++calls;
    spin(2)();
  };
  const tq::AbMedians s = tq::ab_medians_ms(a, spin(2), {3, 6, /*warm=*/false});
  tq::AbLook longer{5, 10, /*warm=*/false};
  longer.more_of = &s.rounds;
  const tq::AbMedians m = tq::ab_medians_ms(a, spin(2), longer);
  CHECK(m.rounds.all_a.size() == static_cast<size_t>(calls));
  REQUIRE(m.rounds.all_a.size() >= s.rounds.all_a.size());
  CHECK(std::equal(s.rounds.all_a.begin(), s.rounds.all_a.end(), m.rounds.all_a.begin()));
  // It stops at 5 clean repeats, or after its 15 tries on a busy machine.
  CHECK((m.rounds.a.size() == 5 || m.rounds.all_a.size() == s.rounds.all_a.size() + 15));
}

TEST_CASE("latency: two clean pairs far apart the same way decide a look where asked",
          "[latency]") {
  auto clean = [](double ms) {
    tq::Round r;
    r.ms = r.cpu_ms = r.round_ms = ms;
    r.delay_ms = 0;
    return r;
  };
  CHECK(tq::apart_by({clean(1), clean(2)}, 2) == 1);
  CHECK(tq::apart_by({clean(2.5), clean(1)}, 2) == -1);
  CHECK(tq::apart_by({clean(1), clean(1.9)}, 2) == 0);
  tq::Round waited = clean(2);
  waited.delay_ms = 0.5;  // its threads waited a quarter of the call for a CPU
  CHECK(tq::apart_by({clean(1), waited}, 2) == 0);
  // Busy loops of 0.5 and 3 ms, warmed up: decided on the two pairs after
  // the two warm-up calls each (no repeats), or, when a pair was disturbed
  // on a busy machine, measured in repeats as without decide_apart.
  int calls = 0;
  auto a = [&] {
    ++calls;
    spin(0.5)();
  };
  tq::AbLook decide{3, 15, /*warm=*/true};
  decide.decide_apart = 2;
  const tq::AbMedians d = tq::ab_medians_ms(a, spin(3), decide);
  if (d.rounds.all_a.empty()) {
    CHECK(calls == 4);
    CHECK(d.a_ms < d.b_ms / 2);
  } else {
    CHECK(calls > 4);
  }
  // Without it a look always has its repeats.
  CHECK_FALSE(tq::ab_medians_ms(a, spin(3), {3, 15, /*warm=*/true}).rounds.all_a.empty());
}
