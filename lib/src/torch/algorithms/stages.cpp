// The library's algorithm stages (taoquant/algorithm_stages.h): cross-layer
// equalization, smoothing (SmoothQuant, AWQ) and the weight stage (GPTQ,
// weight-only bias correction), and when each runs.
#include "taoquant/algorithm_stages.h"

#include <algorithm>

#include <torch/script.h>

#include "taoquant/backend.h"
#include "taoquant/equalization.h"
#include "taoquant/smoothing.h"
#include "taoquant/weight_algorithms.h"

namespace tq {

namespace {

// Which layers cross-layer equalization pairs, shown by inspect before any work.
void plan_equalization(Plan& plan, const torch::jit::Module& model) {
  const auto pairs = equalization_pairs(model);
  for (auto& lp : plan.layers)
    for (const auto& p : pairs) {
      if (lp.info.name == p.first) lp.equalized_with.push_back(p.second);
      if (lp.info.name == p.second) lp.equalized_with.push_back(p.first);
    }
  if (pairs.empty())
    plan.warnings.push_back(plan.algorithms.equalization_loc.str() +
                            ": quantize.equalization: no layer pair to equalize (conv or linear "
                            "layers joined by ReLU, pooling or a BatchNorm, each used once)");
}

// Cross-layer equalization of the float model, before everything else;
// then, when asked, DFQ's high-bias absorption on the same pairs.
StageResult run_equalization(QuantizeContext& ctx, CalibrationData*) {
  const auto pairs = equalization_pairs(ctx.model);
  const Equalization eq = equalize(ctx.model, pairs, ctx.plan.algorithms.equalization.iterations);
  StageResult r;
  r.counts = {{"pairs", pairs.size()}, {"sweeps", eq.sweeps}};
  for (const auto& p : eq.pairs) {  // a layer may be the second of one pair, the first of the next
    auto& first = r.layers[p.first]["equalization"];
    first["next"] = p.second;
    first["output_range_spread"] = {{"before", p.first_spread_before},
                                    {"after", p.first_spread_after}};
    auto& second = r.layers[p.second]["equalization"];
    second["previous"] = p.first;
    second["input_range_spread"] = {{"before", p.second_spread_before},
                                    {"after", p.second_spread_after}};
  }
  if (ctx.plan.algorithms.equalization.absorb_bias) {
    const BiasAbsorption absorbed = absorb_high_biases(ctx.model, pairs);
    for (const auto& p : absorbed.pairs)
      r.layers[p.first]["equalization"]["absorb_bias"] = p.to_json();
    r.counts["absorbed_bias_pairs"] = absorbed.absorbed;
  }
  return r;
}

// Which Linear layers SmoothQuant / AWQ scale, and the op that absorbs it.
void plan_smoothing(Plan& plan, const torch::jit::Module& model) {
  const auto groups = smoothing_groups(model);
  for (auto& lp : plan.layers)
    for (const auto& g : groups)
      if (std::find(g.consumers.begin(), g.consumers.end(), lp.info.name) != g.consumers.end())
        lp.smoothed_by = g.producer;
  const auto& a = plan.algorithms;
  const char* key = a.smoothquant.enabled ? "smoothquant" : "awq";
  if (groups.empty())
    plan.warnings.push_back(
        (a.smoothquant.enabled ? a.smoothquant_loc : a.awq_loc).str() + ": quantize." + key +
        ": no Linear layer whose input comes from a LayerNorm or a layer alone (the scale has "
        "nowhere to fold)");
}

std::vector<AlgorithmStage>& rows() {
  static std::vector<AlgorithmStage> r{
      {"equalization", "equalization", plan_equalization, run_equalization},
      {"smoothing", "the smoothing stage", plan_smoothing,
       [](QuantizeContext& ctx, CalibrationData* data) { return run_smoothing(ctx, *data); }},
      {"weights", "the algorithm stage", nullptr,
       [](QuantizeContext& ctx, CalibrationData* data) {
         return run_weight_algorithms(ctx, *data);
       }},
  };
  return r;
}

// The passes whose stage in `mode` is `stage`.
std::vector<const AlgorithmPass*> passes_of(const std::string& stage, Mode mode) {
  std::vector<const AlgorithmPass*> out;
  for (const auto& p : algorithm_passes())
    if (p.stage(mode) == stage) out.push_back(&p);
  return out;
}

bool changes_a_layer(const AlgorithmPass& p, const Plan& plan) {
  return std::any_of(plan.layers.begin(), plan.layers.end(),
                     [&](const LayerPlan& lp) { return !p.on_layer(lp, plan).empty(); });
}

}  // namespace

const std::vector<AlgorithmStage>& algorithm_stages() {
  return rows();
}

ScopedAlgorithmStage::ScopedAlgorithmStage(AlgorithmStage stage) : name_(stage.name) {
  rows().push_back(std::move(stage));
}

ScopedAlgorithmStage::~ScopedAlgorithmStage() {
  auto& r = rows();
  r.erase(
      std::remove_if(r.begin(), r.end(), [&](const AlgorithmStage& s) { return s.name == name_; }),
      r.end());
}

bool stage_changes_layer(const std::string& stage, const LayerPlan& layer, const Plan& plan) {
  const auto passes = passes_of(stage, plan.mode);
  return std::any_of(passes.begin(), passes.end(),
                     [&](const AlgorithmPass* p) { return !p->on_layer(layer, plan).empty(); });
}

void plan_algorithm_stages(Plan& plan, const torch::jit::Module& model) {
  for (const auto& s : algorithm_stages()) {
    if (!s.plan) continue;
    const auto passes = passes_of(s.name, plan.mode);
    if (std::any_of(passes.begin(), passes.end(),
                    [&](const AlgorithmPass* p) { return p->on(plan.algorithms); }))
      s.plan(plan, model);
  }
}

std::vector<ScheduledStage> scheduled_stages(const Plan& plan) {
  for (const auto& p : algorithm_passes()) {
    const std::string stage = p.stage(plan.mode);
    const bool known =
        stage.empty() || std::any_of(algorithm_stages().begin(), algorithm_stages().end(),
                                     [&](const AlgorithmStage& s) { return s.name == stage; });
    if (!known && p.on(plan.algorithms))
      throw RuntimeError("algorithm '" + std::string(p.key) + "' names the stage '" + stage +
                         "', which algorithm_stages() does not have");
  }
  std::vector<ScheduledStage> out;
  for (const auto& s : algorithm_stages()) {
    bool runs = false, needs_data = false;
    for (const AlgorithmPass* p : passes_of(s.name, plan.mode)) {
      if (!(p->whole_model && p->on(plan.algorithms)) && !changes_a_layer(*p, plan)) continue;
      runs = true;
      needs_data = needs_data || p->needs_data;
    }
    if (runs) out.push_back({&s, needs_data});
  }
  return out;
}

}  // namespace tq
