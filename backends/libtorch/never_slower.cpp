// The never-slower check of static PTQ (docs/spec.md, "never-slower"):
// int8 against float at every batch size the promise covers; where int8 is
// slower, the slower layers stay float, then every layer. When int8 wins at
// some batch sizes and loses at others, the console and the report say
// where, with the numbers, and which latency_batch_sizes would keep it.
#include <torch/script.h>

#include <algorithm>
#include <cstdio>

#include "latency.h"
#include "static_session.h"
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

// The int8 model against the float one at each covered batch size (entries
// appended to `speed`): "" when int8 is nowhere slower, else the figures.
std::string slower_than_float(QuantizeContext& ctx, const StaticSession& s, const Module& q,
                              const std::vector<int64_t>& sizes, const char* stage,
                              nlohmann::json& speed, std::string& mixed) {
  auto cmp = compare_model_latency(ctx.model, q, s.holdout, sizes, ctx.timing_cache,
                                   model_timing_key(ctx, *s.table, s.holdout));
  std::string detail;
  for (const auto& c : cmp) {
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
    detail += (detail.empty() ? "" : "; ") + std::string("bs ") + std::to_string(c.batch_size) +
              ": int8 " + format_ms(c.int8_ms) + " vs fp32 " + format_ms(c.fp32_ms);
  }
  nlohmann::json summary;
  mixed = mixed_speed(cmp, summary);
  summary["stage"] = stage;
  summary["covered_batch_sizes"] = sizes;
  ctx.backend_meta["speed_by_batch_size"] = summary;
  return summary["int8_slower_at"].empty() ? std::string() : detail;
}

bool any_int8_left(const QuantizeContext& ctx, const StaticSession& s) {
  for (const auto& lp : ctx.plan.layers)
    if (lp.quantized() && !s.keep_float.count(lp.info.name)) return true;
  return false;
}

// Every layer float: the original float model, its fused inference paths
// intact; each layer not yet kept float for a reason gets `why`.
Module all_float(QuantizeContext& ctx, StaticSession& s, const std::string& why) {
  for (const auto& lp : ctx.plan.layers)
    if (!s.reasons.count(lp.info.name)) s.reasons[lp.info.name] = why;
  return ctx.model.clone();
}

}  // namespace

Module never_slower(QuantizeContext& ctx, StaticSession& s, Module q) {
  if (ctx.timing_cache) ctx.timing_cache->bind_engine(ctx.backend_meta.value("engine", ""));
  const std::vector<int64_t> sizes = covered_batch_sizes(s.latency_batch_sizes);
  nlohmann::json speed = nlohmann::json::array();
  std::string mixed;
  std::string why = slower_than_float(ctx, s, q, sizes, "planned", speed, mixed);
  const auto& inputs = s.capture().inputs;
  if (why.empty() && ctx.timing_cache && ctx.timing_cache->profile_all)
    (void)slower_int8_layers(ctx, s.folded, s.observed, *s.table, inputs,
                             sizes);  // `profile`: every layer into the cache
  if (!why.empty()) {
    auto slower = slower_int8_layers(ctx, s.folded, s.observed, *s.table, inputs, sizes);
    for (const auto& [name, reason] : slower) {
      s.keep_float.insert(name);
      s.reasons[name] = reason;
    }
    s.steps->step("latency check");
    if (!any_int8_left(ctx, s)) {
      ctx.warn(
          "static_ptq: every planned layer is slower in int8 than in fp32 on this machine; "
          "the artifact keeps every layer float" +
          (mixed.empty() ? std::string() : " (the whole model: " + mixed + ")"));
      q = ctx.model.clone();  // every layer has its own reason
    } else {
      if (!slower.empty()) {
        undo_bias_corrections(ctx, s);
        observe_and_run(ctx, s);  // re-observe without them
        snap_biases(ctx, s);
        q = convert_observed(s.observed);
        s.steps->step("convert");
        why = slower_than_float(ctx, s, q, sizes, "without slower layers", speed, mixed);
      }
      if (!why.empty()) {
        why = "int8 model slower than fp32 on this machine (" + why + ")";
        ctx.warn("static_ptq: " + why + "; the artifact keeps every layer float" +
                 (mixed.empty() ? "" : ": " + mixed));
        q = all_float(ctx, s, why);
      }
    }
  }
  s.steps->step("latency check");
  ctx.backend_meta["latency_check"] = speed;
  return q;
}

}  // namespace tq::libtorch
