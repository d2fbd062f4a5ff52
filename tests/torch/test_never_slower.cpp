// The never-slower check's choice of batch sizes to measure and to infer
// (docs/spec.md, "never-slower"), on timings read from a timing cache: the
// decisions come from the times alone, so these tests time nothing.
#include <torch/script.h>

#include <cmath>

#include <catch2/catch.hpp>

#include "../../backends/libtorch/latency.h"
#include "taoquant/latency.h"
#include "taoquant/timing_cache.h"

namespace {

using tq::libtorch::LatencyPair;

struct Times {
  double fp32, int8;
};

// compare_model_latency over `sizes` with the cache holding `times` per
// batch size: a size the check measured and the cache lacked would be
// timed on the two identity models, which is what `measured` tells apart.
std::vector<LatencyPair> compare(const std::map<int64_t, Times>& times,
                                 const std::vector<int64_t>& sizes, double ends_ratio,
                                 bool crossover = true, bool* ran = nullptr) {
  torch::jit::Module m("identity");
  m.define("def forward(self, x):\n  return x\n");
  tq::TimingCache cache{tq::TimingEnv{}};
  for (const auto& [bs, t] : times) {
    cache.put("model/k/bs=" + std::to_string(bs) + "/fp32", t.fp32);
    cache.put("model/k/bs=" + std::to_string(bs) + "/int8", t.int8);
  }
  return tq::libtorch::compare_model_latency([&]() -> const torch::jit::Module& { return m; }, m,
                                             {at::zeros({1, 4})}, sizes, &cache, "model/k",
                                             ends_ratio, crossover, ran);
}

std::vector<int64_t> measured(const std::vector<LatencyPair>& cmp) {
  std::vector<int64_t> out;
  for (const auto& c : cmp)
    if (c.inferred_from == 0) out.push_back(c.batch_size);
  return out;
}

}  // namespace

TEST_CASE("never-slower check: a win at both ends stands for the sizes between only as said",
          "[latency]") {
  using V = std::vector<int64_t>;
  const V sizes{1, 2, 4, 8};
  const double planned = tq::libtorch::kBetweenRatio;
  // int8 10% faster everywhere: not the 1.5x win that stands for the sizes
  // between on its own, so the planned model is measured at each size.
  const std::map<int64_t, Times> close{{1, {10, 9}}, {2, {20, 18}}, {4, {40, 36}}, {8, {80, 72}}};
  CHECK(measured(compare(close, sizes, planned)) == sizes);
  // 1.4x at both ends is not enough either; 1.6x is (MobileNetV2's 1.9x at
  // batch 1 no longer measures every size).
  const std::map<int64_t, Times> short_of{
      {1, {14, 10}}, {2, {28, 20}}, {4, {56, 40}}, {8, {112, 80}}};
  CHECK(measured(compare(short_of, sizes, planned)) == sizes);
  const auto wide = compare({{1, {16, 10}}, {8, {64, 40}}}, sizes, planned);
  CHECK(measured(wide) == V{1, 8});
  REQUIRE(wide.size() == 4);
  // The float time of a size between is estimated on the power law through
  // the two ends (16 ms at 1, 64 ms at 8: 2^(2/3) per doubling).
  CHECK(wide[1].fp32_ms == Approx(16 * std::pow(2.0, 2.0 / 3.0)));
  CHECK(wide[2].fp32_ms == Approx(16 * std::pow(4.0, 2.0 / 3.0)));
  CHECK(wide[2].inferred_to == 8);
  // After the slower layers went float, each int8 layer left was timed
  // alone at every size: any win at both ends stands for 2 and 4.
  const auto ends = compare({{1, {10, 9}}, {8, {80, 72}}}, sizes, 1.0);
  CHECK(measured(ends) == V{1, 8});
  REQUIRE(ends.size() == 4);
  for (size_t i : {1, 2}) {
    CHECK(ends[i].batch_size == sizes[i]);
    CHECK(ends[i].inferred_from == 1);
    CHECK(ends[i].inferred_to == 8);
  }
  // A loss at the largest: every size is measured, the crossover found.
  std::map<int64_t, Times> loss = close;
  loss[8] = {80, 88};
  const auto mixed = compare(loss, sizes, 1.0);
  CHECK(measured(mixed) == sizes);
  CHECK(mixed.back().int8_ms > mixed.back().fp32_ms);
  // Slower from batch 2 on, faster again at 8: up to the first loss, then
  // from the largest down to the next loss (the crossover), or, without
  // `crossover`, up to the first loss only.
  const std::map<int64_t, Times> dip{{1, {10, 9}}, {2, {20, 22}}, {4, {40, 44}}, {8, {80, 60}}};
  CHECK(measured(compare(dip, sizes, planned)) == V{1, 2, 4, 8});
  CHECK(measured(compare(dip, sizes, planned, /*crossover=*/false)) == V{1, 2});
  // A clear 2x win at both ends stands for the sizes between in any stage.
  const auto clear = compare({{1, {10, 4}}, {8, {80, 30}}}, sizes, planned);
  CHECK(measured(clear) == V{1, 8});
}

TEST_CASE("never-slower check: a long cold pair decides only a clear, clean difference",
          "[latency]") {
  using tq::libtorch::cold_pair_decides;
  using tq::libtorch::kColdCallMs;
  // One thread's call, alone on its core: CPU time = wall time, no wait.
  auto clean = [](double ms) {
    tq::Round r;
    r.ms = r.cpu_ms = r.round_ms = ms;
    r.delay_ms = 0;
    return r;
  };
  const double f = kColdCallMs;
  CHECK(cold_pair_decides(clean(f), clean(0.75 * f)));  // int8 a quarter faster
  CHECK(cold_pair_decides(clean(f), clean(1.33 * f)));  // int8 a third slower
  CHECK(cold_pair_decides(clean(8 * f), clean(4.4 * f)));
  // A close call is left to the steady calls, however long.
  CHECK_FALSE(cold_pair_decides(clean(f), clean(0.8 * f)));
  CHECK_FALSE(cold_pair_decides(clean(8 * f), clean(7 * f)));
  // A shorter float call: one-time costs could be a third of it.
  CHECK_FALSE(cold_pair_decides(clean(0.99 * f), clean(0.3 * f)));
  // Either call contended: another process's share is not int8's or float's.
  tq::Round waited = clean(f);
  waited.delay_ms = 0.2 * f;
  CHECK_FALSE(cold_pair_decides(waited, clean(0.5 * f)));
  tq::Round slept = clean(0.5 * f);
  slept.cpu_ms = 0.1 * f;
  CHECK_FALSE(cold_pair_decides(clean(f), slept));
}

TEST_CASE("never-slower check: a comparison says whether the two models ran in it", "[latency]") {
  // The crossover look goes on from the first on the same two modules: it
  // knows their plans are compiled only from this flag (with_crossover).
  const std::vector<int64_t> sizes{1, 2, 4, 8};
  const std::map<int64_t, Times> all{{1, {10, 9}}, {2, {20, 22}}, {4, {40, 44}}, {8, {80, 88}}};
  bool ran = false;
  (void)compare(all, sizes, tq::libtorch::kBetweenRatio, true, &ran);
  CHECK_FALSE(ran);  // every pair from the timing cache: nothing ran
  ran = true;
  (void)compare(all, sizes, tq::libtorch::kBetweenRatio, true, &ran);
  CHECK(ran);  // they ran before: still so
  ran = false;
  std::map<int64_t, Times> without_8 = all;
  without_8.erase(8);
  const auto cmp = compare(without_8, sizes, tq::libtorch::kBetweenRatio, true, &ran);
  CHECK(ran);  // batch 8 was measured on the identity models
  CHECK(cmp.back().batch_size == 8);
}
