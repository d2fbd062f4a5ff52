// The never-slower check of static PTQ (docs/spec.md, "never-slower"):
// int8 against float at every batch size the promise covers; where int8 is
// slower, the slower layers stay float, then every layer. When int8 wins at
// some batch sizes and loses at others, the console and the report say
// where, with the numbers, and which latency_batch_sizes would keep it.
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <spdlog/spdlog.h>

#include "latency.h"
#include "static_session.h"
#include "taoquant/steps.h"
#include "taoquant/timing_cache.h"

namespace tq::libtorch {

using torch::jit::Module;

std::vector<int64_t> covered_batch_sizes(std::vector<int64_t> listed) {
  std::sort(listed.begin(), listed.end());
  listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
  std::vector<int64_t> out;
  for (size_t i = 0; i < listed.size(); ++i) {
    if (i > 0)
      for (int64_t p = 1; p < listed[i]; p *= 2)
        if (p > listed[i - 1]) out.push_back(p);
    out.push_back(listed[i]);
  }
  return out;
}

namespace {

std::string times_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", x);
  return buf;
}

// The float model int8 is held to, and the artifact when int8 loses: the
// model as torch.jit.freeze makes it (BatchNorm folded into the
// convolutions, attributes made constants, methods inlined). The int8
// artifact is frozen (LibTorch's Finalize) with its BatchNorms folded, which
// alone takes up to a fifth off a float model's time (docs/benchmarks.md,
// scripts/diag/float_baseline.py): against the model as loaded, that
// would pass for int8's speed-up, and an int8 model slower than the same
// float model frozen would be published. Frozen on first use (a timing
// cache that holds every pair needs none); a model freezing refuses is
// timed as loaded, and the report says so.
class FloatBaseline {
 public:
  explicit FloatBaseline(QuantizeContext& ctx) : ctx_(ctx) {
    ctx_.backend_meta["float_baseline"] = "not made: the timing cache held every timing";
  }
  const Module& get() {
    if (m_) return *m_;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      m_ = torch::jit::freeze(ctx_.model);
      ctx_.backend_meta["float_baseline"] = "frozen";
      spdlog::debug("latency: float model frozen ({:.2f} s)", seconds_since(t0));
    } catch (const std::exception& e) {
      m_ = ctx_.model.clone();
      const std::string what = e.what();
      ctx_.backend_meta["float_baseline"] =
          "as loaded (torch.jit.freeze refused it: " + what.substr(0, what.find('\n')) + ")";
    }
    return *m_;
  }
  FloatModel model() {
    return [this]() -> const Module& { return get(); };
  }

 private:
  QuantizeContext& ctx_;
  std::optional<Module> m_;
};

// Runs of consecutive measured sizes with one verdict, as "1-4" / "8".
struct Run {
  int64_t from = 0, to = 0;
  bool faster = false;
  double speedup_at_to = 0;  // fp32 / int8 at `to`
};

std::vector<Run> verdict_runs(const std::vector<LatencyPair>& cmp) {
  std::vector<Run> runs;
  for (const auto& c : cmp) {
    const bool faster = c.inferred_from > 0 || c.int8_ms <= c.fp32_ms;
    const double x = c.inferred_from > 0 ? 0 : c.fp32_ms / std::max(c.int8_ms, 1e-9);
    if (runs.empty() || runs.back().faster != faster)
      runs.push_back({c.batch_size, c.batch_size, faster, x});
    runs.back().to = c.batch_size;
    if (x > 0) runs.back().speedup_at_to = x;
  }
  return runs;
}

std::string run_text(const Run& r) {
  std::string s = "batch " + std::to_string(r.from);
  if (r.to != r.from) s += "-" + std::to_string(r.to);
  if (r.speedup_at_to > 0)
    s += " (" + times_text(r.speedup_at_to) + " at " + std::to_string(r.to) + ")";
  return s;
}

// "int8 is faster at batch 8-32 (2.21x at 32) and slower at batch 1-4
// (0.81x at 4); latency_batch_sizes: [8, 32] keeps it int8 ...", or "" when
// int8 is faster, or slower, everywhere measured.
std::string mixed_speed(const std::vector<LatencyPair>& cmp, nlohmann::json& summary) {
  const std::vector<Run> runs = verdict_runs(cmp);
  nlohmann::json faster = nlohmann::json::array(), slower = nlohmann::json::array();
  for (const auto& c : cmp)
    (c.inferred_from > 0 || c.int8_ms <= c.fp32_ms ? faster : slower).push_back(c.batch_size);
  summary = {{"int8_faster_at", faster}, {"int8_slower_at", slower}};
  if (faster.empty() || slower.empty()) return "";
  std::string f, sl;
  const Run* widest = nullptr;
  for (const auto& r : runs) {
    std::string& t = r.faster ? f : sl;
    t += (t.empty() ? "" : ", ") + run_text(r);
    if (r.faster && (!widest || r.to / r.from > widest->to / widest->from)) widest = &r;
  }
  const std::string keep = "[" + std::to_string(widest->from) +
                           (widest->to != widest->from ? ", " + std::to_string(widest->to) : "") +
                           "]";
  summary["keeps_int8"] = nlohmann::json::parse(keep);
  return "int8 is faster at " + f + " and slower at " + sl +
         "; backend_kwargs.latency_batch_sizes: " + keep +
         " keeps it int8 if the deployment runs only those batch sizes";
}

// One whole-model comparison: its pairs, the figures where int8 is slower
// ("" when nowhere), and where it wins and loses (mixed_speed).
// `ran`: both models ran in it (not only from the timing cache).
struct ModelCheck {
  std::vector<LatencyPair> cmp;
  std::string slower, mixed;
  nlohmann::json summary;
  bool ran = false;
};

// The int8 model against the float one at the covered batch sizes
// (compare_model_latency with `crossover` and `ends_ratio`); `ran`: these
// two modules ran in an earlier check.
ModelCheck check_model(QuantizeContext& ctx, const StaticSession& s, FloatBaseline& base,
                       const Module& q, const std::vector<int64_t>& sizes, bool crossover,
                       double ends_ratio = kBetweenRatio, bool ran = false) {
  ModelCheck m;
  m.ran = ran;
  m.cmp = compare_model_latency(base.model(), q, s.holdout, sizes, ctx.timing_cache,
                                model_timing_key(ctx, *s.table, s.holdout), ends_ratio, crossover,
                                &m.ran);
  m.mixed = mixed_speed(m.cmp, m.summary);
  m.summary["covered_batch_sizes"] = sizes;
  const bool slower = std::any_of(m.cmp.begin(), m.cmp.end(), [](const LatencyPair& c) {
    return c.inferred_from == 0 && c.int8_ms > c.fp32_ms;
  });
  if (!slower) return m;
  for (const auto& c : m.cmp)
    if (c.inferred_from == 0)
      m.slower += (m.slower.empty() ? "" : "; ") + std::string("bs ") +
                  std::to_string(c.batch_size) + ": int8 " + format_ms(c.int8_ms) + " vs fp32 " +
                  format_ms(c.fp32_ms);
  return m;
}

// The check's entries in `speed` and its verdict in the report.
void record_check(QuantizeContext& ctx, const ModelCheck& m, const char* stage,
                  nlohmann::json& speed) {
  for (const auto& c : m.cmp) {
    if (c.inferred_from > 0) {
      speed.push_back({{"stage", stage},
                       {"batch_size", c.batch_size},
                       {"fp32_ms_estimate", c.fp32_ms},
                       {"inferred_from_batch_size", c.inferred_from}});
      if (c.inferred_to > 0)
        speed.back()["inferred_between_batch_sizes"] = {c.inferred_from, c.inferred_to};
      continue;
    }
    speed.push_back({{"stage", stage},
                     {"batch_size", c.batch_size},
                     {"fp32_ms", c.fp32_ms},
                     {"int8_ms", c.int8_ms}});
    if (c.contended) speed.back()["contended"] = true;
  }
  nlohmann::json summary = m.summary;
  summary["stage"] = stage;
  ctx.backend_meta["speed_by_batch_size"] = summary;
}

// The planned model's comparison, from the largest size down too (the
// crossover the warning names): the sizes the first look measured come
// from the timing cache, with the flags that look had; the same two
// modules, whose plans the first look compiled (a new size then costs
// ShuffleNetV2 at batch 32 six calls, not ten: 1.84 -> 1.24 s,
// docs/benchmarks.md).
ModelCheck with_crossover(QuantizeContext& ctx, const StaticSession& s, FloatBaseline& base,
                          const Module& q, const std::vector<int64_t>& sizes,
                          const ModelCheck& first) {
  ModelCheck m = check_model(ctx, s, base, q, sizes, /*crossover=*/true, kBetweenRatio, first.ran);
  for (auto& c : m.cmp)
    for (const auto& f : first.cmp)
      if (f.batch_size == c.batch_size) c.contended = c.contended || f.contended;
  return m;
}

bool any_int8_left(const QuantizeContext& ctx, const StaticSession& s) {
  for (const auto& lp : ctx.plan.layers)
    if (lp.quantized() && !s.keep_float.count(lp.info.name)) return true;
  return false;
}

// "" when the layers left int8 (timed alone) save at least
// kMeasurableShare of the float model's time at every size the planned
// model was measured at, or cannot all be vouched for; else why the model
// without the slower layers is not worth building and timing.
std::string too_little_left(const LayerTimings& layers, const ModelCheck& planned) {
  if (!layers.untimed.empty() || layers.kept_saving_ms.empty()) return "";
  for (const auto& c : planned.cmp) {
    const auto it = layers.kept_saving_ms.find(c.batch_size);
    if (c.inferred_from > 0 || it == layers.kept_saving_ms.end()) continue;
    if (it->second >= kMeasurableShare * c.fp32_ms) continue;
    const double saving = std::max(0.0, it->second);
    char share[96];
    std::snprintf(share, sizeof share, " (%.1f%%, under the %.0f%% a whole-model comparison",
                  100 * saving / c.fp32_ms, 100 * kMeasurableShare);
    return "the layers int8 is not slower for, timed alone, would save " + format_ms(saving) +
           " of the float model's " + format_ms(c.fp32_ms) + " at batch " +
           std::to_string(c.batch_size) + share + " tells from noise)";
  }
  return "";
}

// Every layer float: the float model int8 lost to; each layer not yet kept
// float for a reason gets `why`.
Module all_float(QuantizeContext& ctx, StaticSession& s, FloatBaseline& base,
                 const std::string& why) {
  for (const auto& lp : ctx.plan.layers)
    if (!s.reasons.count(lp.info.name)) s.reasons[lp.info.name] = why;
  return base.get();
}

}  // namespace

// The planned model is compared from the smallest size up to the first
// where int8 is slower; from the largest down (the crossover) only when
// that comparison is what the warning reports (every layer float because of
// it): otherwise the model checked again without the slower layers is what
// the report's verdict describes.
Module never_slower(QuantizeContext& ctx, StaticSession& s, Module q) {
  if (ctx.timing_cache) ctx.timing_cache->bind_engine(ctx.backend_meta.value("engine", ""));
  const std::vector<int64_t> sizes = covered_batch_sizes(s.latency_batch_sizes);
  nlohmann::json speed = nlohmann::json::array();
  FloatBaseline base(ctx);
  ModelCheck planned = check_model(ctx, s, base, q, sizes, /*crossover=*/false);
  const auto& inputs = s.capture().inputs;
  if (planned.slower.empty()) {
    record_check(ctx, planned, "planned", speed);
    if (ctx.timing_cache && ctx.timing_cache->profile_all)
      (void)time_int8_layers(ctx, s.folded, s.linears.layer_inputs, *s.table, inputs,
                             sizes);  // `profile`: every layer into the cache
  } else {
    const LayerTimings layers =
        time_int8_layers(ctx, s.folded, s.linears.layer_inputs, *s.table, inputs, sizes);
    for (const auto& [name, reason] : layers.slower) {
      s.keep_float.insert(name);
      s.reasons[name] = reason;
    }
    s.steps->step("latency check");
    const std::string too_little = too_little_left(layers, planned);
    if (!any_int8_left(ctx, s) || layers.slower.empty() || !too_little.empty())
      planned = with_crossover(ctx, s, base, q, sizes, planned);
    record_check(ctx, planned, "planned", speed);
    ModelCheck last = planned;
    if (!too_little.empty()) {
      ctx.backend_meta["latency_check_without_slower_layers"] = "not built: " + too_little;
      spdlog::info("static_ptq: model without the layers slower alone not built: {}", too_little);
    } else if (!any_int8_left(ctx, s)) {
      ctx.warn(
          "static_ptq: every planned layer is slower in int8 than in fp32 on this machine; "
          "the artifact keeps every layer float" +
          (planned.mixed.empty() ? std::string() : " (the whole model: " + planned.mixed + ")"));
      q = base.get();  // every layer has its own reason
      last.slower.clear();
    } else if (!layers.slower.empty()) {
      undo_bias_corrections(ctx, s);
      observe_and_run(ctx, s);  // re-observe without them
      snap_biases(ctx, s);
      q = convert_observed(s.observed);
      s.steps->step("convert");
      // Each int8 layer left was timed alone at every covered size and is
      // not slower there: a win at both ends stands for the sizes between
      // (latency.h); a layer that could not be timed alone is not vouched
      // for.
      last = check_model(ctx, s, base, q, sizes, /*crossover=*/true,
                         layers.untimed.empty() ? 1.0 : kBetweenRatio);
      record_check(ctx, last, "without slower layers", speed);
    }
    if (!last.slower.empty()) {
      const std::string why = "int8 model slower than fp32 on this machine (" + last.slower + ")";
      ctx.warn("static_ptq: " + why + "; the artifact keeps every layer float" +
               (last.mixed.empty() ? "" : ": " + last.mixed));
      q = all_float(ctx, s, base, why);
    }
  }
  s.steps->step("latency check");
  ctx.backend_meta["latency_check"] = speed;
  return q;
}

}  // namespace tq::libtorch
