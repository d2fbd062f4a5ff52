#include "latency.h"
#include "layer_kernel.h"

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "taoquant/calibration.h"
#include "taoquant/hash.h"
#include "taoquant/jit.h"
#include "taoquant/latency.h"
#include "taoquant/model.h"
#include "taoquant/steps.h"
#include "taoquant/timing_cache.h"

namespace tq::libtorch {

namespace {

// Batch sizes in ascending order: which to measure, which to infer, and
// when to stop (the first batch size where int8 is slower decides).
class BatchLadder {
 public:
  // > 0: the smaller batch whose 2x int8 win stands for `bs`, which would be
  // too costly to measure (one fp32 call over kInferAboveMs). A larger batch
  // spreads int8's per-call overhead (quantize, dequantize, dispatch) over
  // more samples, so the win holds (docs/benchmarks.md).
  int64_t inferred_from(int64_t bs) const {
    return clear_win_at_ > 0 && estimate_ms(bs) > kInferAboveMs ? clear_win_at_ : 0;
  }
  double estimate_ms(int64_t bs) const { return fp32_ms_per_sample_ * static_cast<double>(bs); }
  // Records a measurement; false when int8 was slower (stop here). The
  // same values take the same path, contended or not: a rerun from a timing
  // cache (which keeps times, not flags) decides as the run that wrote it.
  bool record(int64_t bs, double fp32_ms, double int8_ms) {
    fp32_ms_per_sample_ = fp32_ms / static_cast<double>(bs);
    if (int8_ms <= kInferRatio * fp32_ms) clear_win_at_ = bs;
    return int8_ms <= fp32_ms;
  }

 private:
  double fp32_ms_per_sample_ = 0;  // from the largest batch measured so far
  int64_t clear_win_at_ = 0;       // a measured batch where int8 took <= kInferRatio of fp32
};

// A float and an int8 time, and whether other processes took the CPUs
// while they were measured (after retries: latency.h).
struct Timed {
  double fp32 = 0, int8 = 0;
  bool contended = false;
};

// int8 at most 0.75x or at least 1.33x of fp32: no more precision needed.
bool clear_difference(double fp32_ms, double int8_ms) {
  return !(int8_ms > 0.75 * fp32_ms && int8_ms < 1.33 * fp32_ms);
}

// One clean call each, clearly different: a pair that decides alone where
// its calls are long enough (the callers' thresholds).
bool clear_clean_pair(const Round& fp32, const Round& int8) {
  return !fp32.contended() && !int8.contended() && clear_difference(fp32.ms, int8.ms);
}

// 10% apart in the medians, and every clean round of one faster than every
// clean round of the other: the direction is beyond the rounds' spread.
bool apart_by_a_tenth(double fp32_ms, double int8_ms, bool apart) {
  return apart && (int8_ms <= 0.9 * fp32_ms || int8_ms >= fp32_ms / 0.9);
}

// Interleaved medians: a short look (3 rounds); a clear difference (either
// way, 25% or more; or 10% with no overlap between the two sides' clean
// rounds) needs no more precision, a close call gets the full
// budget, in as many rounds as fit in it (at least 3, at most `full_reps`),
// the short look's among them: calls so long that only 3 fit (a model at
// batch 32) are what the short look already measured, each round one call
// whose timer noise is small against its length.
// `short_look`: how the short look looks (AbLook).
template <class FA, class FB>
Timed look(FA&& a, FB&& b, const AbLook& short_look, int full_reps, double full_budget_ms) {
  const AbMedians s = ab_medians_ms(a, b, short_look);
  Timed t{s.a_ms, s.b_ms, s.contended};
  if (clear_difference(t.fp32, t.int8) || apart_by_a_tenth(t.fp32, t.int8, s.apart)) return t;
  const double call_ms = std::max({t.fp32, t.int8, 1e-6});
  const int reps = static_cast<int>(std::clamp(full_budget_ms / call_ms, 3.0, double(full_reps)));
  if (reps > 3 || t.contended) {
    AbLook more{reps, full_budget_ms, /*warm=*/false};
    more.more_of = &s.rounds;
    const AbMedians full = ab_medians_ms(a, b, more);
    t = {full.a_ms, full.b_ms, full.contended};
  }
  return t;
}

// The fp32 and int8 times of `key`: from the cache when it holds both, else
// measured and recorded (a contended one too: the cache is what makes the
// decisions reproducible; the run warns that it was contended).
template <class Measure>
Timed timed_pair(TimingCache* cache, const std::string& key, Measure&& measure) {
  if (cache) {
    if (auto f = cache->find(key + "/fp32"))
      if (auto q = cache->find(key + "/int8")) return {*f, *q, false};
  }
  const Timed r = measure();
  if (cache) {
    cache->put(key + "/fp32", r.fp32);
    cache->put(key + "/int8", r.int8);
  }
  return r;
}

}  // namespace

bool cold_pair_decides(const Round& fp32, const Round& int8) {
  return fp32.ms >= kColdCallMs && clear_clean_pair(fp32, int8);
}

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 1 ? "%.3f ms" : "%.2f ms", ms);
  return buf;
}

std::string shape_text(const at::Tensor& t, int64_t from) {
  std::string s;
  for (int64_t d = from; d < t.dim(); ++d) s += (s.empty() ? "" : "x") + std::to_string(t.size(d));
  return s.empty() ? "scalar" : s;
}

std::string model_timing_key(const QuantizeContext& ctx, ObserverTable& table,
                             const std::vector<at::Tensor>& sample) {
  Hash64 model, int8;
  model.update("fp32=frozen;");  // the float side is the model frozen (never_slower.cpp)
  model.update(jit::inlined_graph(ctx.model)->toString());
  for (const auto& p : ctx.model.named_parameters())
    model.update(p.name + "=" + shape_text(p.value, 0) + ";");
  for (const auto& t : sample) model.update("in=" + shape_text(t) + ";");
  for (const auto& lp : ctx.plan.layers) {
    const ObserverSlot* ws = table.find_label(lp.info.name + ":weight");
    if (ws) int8.update(lp.info.name + (table.qparams(ws->id).per_channel ? ":c;" : ":t;"));
  }
  return "model/" + model.hex() + "/int8=" + int8.hex();
}

namespace {

// Float vs int8 model at one batch size: two warm-up calls each (the
// profiling executor profiles the first call and compiles its plan on the
// second), then one timed call each: for calls of 10 ms or more a 2x
// difference is beyond the machine's noise; closer calls get medians, of
// which that timed pair is the first. `compiled`: both already ran at
// another size (the profiling executor profiled them there, and compiles on
// the next call at the latest), so the second call here is timed too: for
// calls of kInferAboveMs or more, int8 slower by what the short look would
// call clear (a third) decides there (EfficientNet-B0's batch-32 pair: 4
// calls of about 1 s fewer), or on the third pair where float's second
// call at the new size still paid one-time costs (ShuffleNetV2 at batch 32
// on AVX-512: float 252, 243, then 120 ms; int8 224, 187, 184 ms: two
// pairs of 0.3 s fewer). Only that way: a plan compiled again on float's
// side would make int8 look faster, and that error would break the promise.
// Calls so long that a plan's compilation is a small part of them (a cold
// float call of kColdCallMs or more) are decided either way on the cold
// pair, where the difference is clear (cold_pair_decides).
Timed measure_models(torch::jit::Module& f, torch::jit::Module& q,
                     const std::vector<at::Tensor>& sample, int64_t bs, bool compiled) {
  std::vector<c10::IValue> in;
  for (const auto& t : sample) in.emplace_back(resize_batch(t, bs));
  auto run_f = [&] { f.forward(in); };
  auto run_q = [&] { q.forward(in); };
  auto int8_clearly_slower = [&](const Round& f8, const Round& q8) {
    return compiled && f8.ms >= kInferAboveMs && q8.ms >= 1.33 * f8.ms && !f8.contended() &&
           !q8.contended();
  };
  const Round cf = time_round(run_f), cq = time_round(run_q);
  if (twice_apart(cf, cq, 500)) return {cf.ms, cq.ms, false};  // one cold call of a slow run
  if (compiled && cold_pair_decides(cf, cq)) return {cf.ms, cq.ms, false};
  if (compiled) {
    const Round sf = time_round(run_f), sq = time_round(run_q);
    if (int8_clearly_slower(sf, sq)) return {sf.ms, sq.ms, false};
  } else {
    run_f();
    run_q();
  }
  const Round tf = time_round(run_f), tq = time_round(run_q);
  if (twice_apart(tf, tq, kDecisiveMs) || int8_clearly_slower(tf, tq)) return {tf.ms, tq.ms, false};
  // Calls over kSlowCallMs: the look would add one pair and decide a
  // clear difference on the two; one clean steady pair already decides it.
  if (std::max(tf.ms, tq.ms) > kSlowCallMs && clear_clean_pair(tf, tq))
    return {tf.ms, tq.ms, false};
  const std::pair<Round, Round> warm_pair{tf, tq};  // the look's first call
  return look(run_f, run_q, {3, 15, /*warm=*/false, &warm_pair}, 7, 300);
}

// A win at the smallest and at the largest size by `ends_ratio` (int8 at
// most that fraction of fp32) stands for every size between: with
// kBetweenRatio, because the speed-up moves smoothly with the batch size
// (docs/benchmarks.md: the speed-up between the ends of every zoo model
// there is at most 6.3% below the lower end's, where a 1.5x win would need
// a third); with 1.0, because each int8 layer was timed alone at each size
// between (latency.h). The largest is itself inferred from the
// smallest when int8 took at most kInferRatio there and one float call at
// the largest would take over kInferAboveMs. nullopt: measure them.
template <class Measure>
std::optional<std::vector<LatencyPair>> win_at_both_ends(const std::vector<int64_t>& sizes,
                                                         double ends_ratio, Measure&& measure) {
  auto win = [&](const LatencyPair& p) { return p.int8_ms <= ends_ratio * p.fp32_ms; };
  if (sizes.size() < 3) return std::nullopt;
  const LatencyPair first = measure(sizes.front());
  if (!win(first)) return std::nullopt;
  const int64_t big = sizes.back();
  BatchLadder ladder;
  ladder.record(first.batch_size, first.fp32_ms, first.int8_ms);
  LatencyPair last{big, ladder.estimate_ms(big), 0, ladder.inferred_from(big), 0, false};
  if (last.inferred_from == 0) {
    last = measure(big);
    if (!win(last)) return std::nullopt;
  }
  // A size between, when both ends were measured: on the power law through
  // them (float's time per sample falls as the batch grows), else linear
  // from the smallest.
  auto estimate = [&](int64_t bs) {
    if (last.inferred_from != 0 || first.fp32_ms <= 0 || last.fp32_ms <= 0)
      return ladder.estimate_ms(bs);
    const double k =
        std::log(last.fp32_ms / first.fp32_ms) / std::log(double(big) / double(first.batch_size));
    return first.fp32_ms * std::pow(double(bs) / double(first.batch_size), k);
  };
  std::vector<LatencyPair> out{first};
  for (size_t i = 1; i + 1 < sizes.size(); ++i)
    out.push_back({sizes[i], estimate(sizes[i]), 0, first.batch_size, big, false});
  out.push_back(last);
  return out;
}

}  // namespace

std::vector<LatencyPair> compare_model_latency(const FloatModel& fp32,
                                               const torch::jit::Module& int8,
                                               const std::vector<at::Tensor>& sample,
                                               std::vector<int64_t> batch_sizes, TimingCache* cache,
                                               const std::string& key, double ends_ratio,
                                               bool crossover, bool* ran) {
  torch::NoGradGuard ng;
  torch::jit::Module q = int8;
  std::sort(batch_sizes.begin(), batch_sizes.end());
  batch_sizes.erase(std::unique(batch_sizes.begin(), batch_sizes.end()), batch_sizes.end());
  std::map<int64_t, LatencyPair> measured;
  bool ran_here = false;
  bool& compiled = ran ? *ran : ran_here;  // both modules ran (at another size, or before)
  auto measure = [&](int64_t bs) {
    auto it = measured.find(bs);
    if (it != measured.end()) return it->second;
    const auto start = std::chrono::steady_clock::now();
    const Timed t = timed_pair(cache, key + "/bs=" + std::to_string(bs), [&] {
      torch::jit::Module f = fp32();
      const Timed r = measure_models(f, q, sample, bs, compiled);
      compiled = true;
      return r;
    });
    spdlog::debug("latency: model at batch {}: fp32 {}, int8 {} ({:.2f} s)", bs, format_ms(t.fp32),
                  format_ms(t.int8), seconds_since(start));
    return measured[bs] = LatencyPair{bs, t.fp32, t.int8, 0, 0, t.contended};
  };
  // (`profile` measures every size, for a cache that answers any rerun.)
  if (!(cache && cache->profile_all))
    if (auto between = win_at_both_ends(batch_sizes, ends_ratio, measure)) return *between;
  std::vector<LatencyPair> out;
  BatchLadder ladder;
  size_t i = 0;
  for (; i < batch_sizes.size(); ++i) {  // ascending, up to the first where int8 is slower
    const int64_t bs = batch_sizes[i];
    if (int64_t from = ladder.inferred_from(bs)) {
      out.push_back({bs, ladder.estimate_ms(bs), 0, from, 0, false});
      continue;
    }
    out.push_back(measure(bs));
    if (!ladder.record(bs, out.back().fp32_ms, out.back().int8_ms)) break;
  }
  // Slower at batch_sizes[i]: from the largest down to the next loss, where
  // int8 wins again (the crossover the report names).
  if (!crossover) return out;
  std::vector<LatencyPair> top;
  for (size_t j = batch_sizes.size(); j-- > i + 1;) {
    top.push_back(measure(batch_sizes[j]));
    if (top.back().int8_ms > top.back().fp32_ms) break;
  }
  out.insert(out.end(), top.rbegin(), top.rend());
  return out;
}

namespace {

// A layer alone: calls of microseconds to a few ms, a short look of 6 ms
// (2 ms a side a round: tens of calls of a 0.05 ms layer, one of a 2 ms
// one, as 15 ms would give), decided sooner by two pairs 2x apart.
const AbLook kLayerLook{3, 6, /*warm=*/true, nullptr, nullptr, kLayerDecidesApart};

// `profile`: a Linear's dynamic int8 form (quantized::linear_dynamic on the
// same packed weight), recorded as "<key>/int8_dynamic".
template <class RunFloat>
void profile_dynamic(TimingCache& cache, const LayerKernel& k, const at::Tensor& xb,
                     const std::string& key, RunFloat&& run_f) {
  if (k.kind != LayerKind::kLinear || cache.find(key + "/int8_dynamic")) return;
  auto run_d = [&] { call_op("quantized::linear_dynamic", "", {xb, k.packed, false}); };
  try {
    const Timed t = look(run_f, run_d, kLayerLook, 5, 100);
    cache.put(key + "/int8_dynamic", t.int8);
  } catch (const std::exception& e) {
    spdlog::info("profile: no dynamic int8 timing for {}: {}", key, e.what());
  }
}

// The layer alone, float vs quantize + int8 kernel + dequantize, at each
// batch size up to the first where int8 is slower: `slower` is the reason to
// keep it float ("" when int8 is not slower), `saving_ms` what int8 saves
// at each measured size, `inferred` whether a size was inferred instead.
struct LayerVerdict {
  std::string slower;
  std::map<int64_t, double> saving_ms;
  bool inferred = false;
};
LayerVerdict time_layer(const torch::jit::Module& float_layer, const LayerKernel& k,
                        const QParams& aq, const at::Tensor& x, std::vector<int64_t> sizes,
                        TimingCache* cache) {
  torch::jit::Module layer = float_layer;
  LayerVerdict v;
  std::string detail;
  std::sort(sizes.begin(), sizes.end());
  BatchLadder ladder;
  for (int64_t bs : sizes) {
    if (int64_t from = ladder.inferred_from(bs)) {
      detail += "; bs " + std::to_string(bs) + ": inferred from bs " + std::to_string(from);
      v.inferred = true;
      continue;
    }
    at::Tensor xb = resize_batch(x, bs);
    auto run_f = [&] { layer.forward({xb}); };
    auto run_q = [&] { run_kernel(k, xb, aq).dequantize(); };
    const std::string key = k.key + "/x=" + shape_text(x) + "/bs=" + std::to_string(bs);
    const Timed t = timed_pair(cache, key, [&] { return look(run_f, run_q, kLayerLook, 5, 100); });
    const double tf = t.fp32, tq = t.int8;
    if (cache && cache->profile_all) profile_dynamic(*cache, k, xb, key, run_f);
    detail += (detail.empty() ? "" : "; ") + std::string("bs ") + std::to_string(bs) + ": int8 " +
              format_ms(tq) + " vs fp32 " + format_ms(tf);
    v.saving_ms[bs] = tf - tq;
    if (!ladder.record(bs, tf, tq)) {
      v.slower = "int8 slower than fp32 for this layer (" + detail + ")";
      break;
    }
  }
  return v;
}

}  // namespace

LayerTimings time_int8_layers(const QuantizeContext& ctx, const torch::jit::Module& folded,
                              const std::map<std::string, std::string>& input_observers,
                              ObserverTable& table, const std::map<std::string, at::Tensor>& inputs,
                              const std::vector<int64_t>& batch_sizes) {
  LayerTimings out;
  const auto start = std::chrono::steady_clock::now();
  bool inferred = false;
  auto time = [&](const Int8Layer& l) {
    LayerVerdict v =
        time_layer(l.float_layer, l.kernel(), l.input, l.x, batch_sizes, ctx.timing_cache);
    if (!v.slower.empty()) {
      out.slower.emplace_back(l.name, std::move(v.slower));
      return;
    }
    inferred = inferred || v.inferred;
    for (const auto& [bs, ms] : v.saving_ms) out.kept_saving_ms[bs] += ms;
  };
  // One that cannot be timed alone is left to the model-level check.
  for_each_int8_layer(ctx.plan, folded, input_observers, table, inputs, time, &out.untimed);
  if (inferred) out.kept_saving_ms.clear();
  spdlog::debug("latency: layers timed alone ({:.2f} s): {} slower in int8, {} untimed",
                seconds_since(start), out.slower.size(), out.untimed.size());
  return out;
}

}  // namespace tq::libtorch
