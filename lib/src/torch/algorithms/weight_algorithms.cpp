// The algorithm stage of weight-only quantization: statistics of each
// planned layer's inputs, streamed over the calibration data in passes of
// bounded memory, then GPTQ and bias correction per layer. The backend
// stores the results through quantize_planned_weight.
#include <ATen/ATen.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <set>

#include "taoquant/algorithm_stages.h"
#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/steps.h"
#include "taoquant/weight_algorithms.h"
#include "taoquant/weight_quant.h"
#include "torch/algorithms/pair_ops.h"
#include "torch/algorithms/weight_jobs.h"

namespace tq {

using detail::Job;
using detail::Outcome;
using detail::Results;
using detail::values_of;

namespace detail {

at::Tensor values_of(const wformat::QuantizedWeight& q, const at::Tensor& like) {
  return at::from_blob(const_cast<float*>(q.dequant.data()), like.sizes(), at::kFloat).clone();
}

// Where the shift goes: the layer's bias, else the running mean of the
// BatchNorm that reads its output (BN(y + e) with mean e is BN(y) when
// the running mean moves by e).
std::string bias_target(const QuantizeContext& ctx, const Job& j) {
  auto layer = find_submodule(ctx.model, j.lp->info.name);
  if (layer.hasattr("bias") && layer.attr("bias").isTensor()) return j.lp->info.name + ".bias";
  return j.g.batch_norm_after + ".running_mean";
}

void apply_bias_shift(const QuantizeContext& ctx, torch::jit::Module& model, const Job& j,
                      const at::Tensor& shift) {
  const std::string target = bias_target(ctx, j);
  const auto dot = target.rfind('.');
  auto m = find_submodule(model, target.substr(0, dot));
  const std::string attr = target.substr(dot + 1);
  at::Tensor old = m.attr(attr).toTensor();
  const double sign = attr == "bias" ? 1.0 : -1.0;
  at::Tensor v = (old.detach() + sign * shift.to(old.scalar_type())).contiguous();
  v.set_requires_grad(old.requires_grad());
  m.setattr(attr, v);
}

torch::jit::Module rounded_shadow(const QuantizeContext& ctx, const std::vector<Job>& jobs) {
  torch::jit::Module shadow = ctx.model.clone();
  std::set<std::string> gptq;
  for (const auto& j : jobs)
    if (j.gptq) gptq.insert(j.lp->info.name);
  for (const auto& lp : ctx.plan.layers) {
    if (!lp.quantized() || !lp.weights.quantized() || gptq.count(lp.info.name)) continue;
    auto layer = find_submodule(shadow, lp.info.name);
    if (layer.hasattr("weight") && layer.attr("weight").isTensor())
      set_weight_values(layer, round_planned_weight(ctx, ctx.model, lp).dequant);
  }
  return shadow;
}

// Puts a job's result (GPTQ's weight, the bias shift) into a rounded copy.
void apply_outcome(const QuantizeContext& ctx, torch::jit::Module& rounded, const Job& j,
                   const Outcome& o) {
  if (o.rounded) {
    auto layer = find_submodule(rounded, j.lp->info.name);
    set_weight_values(layer, o.rounded->dequant);
  }
  if (o.bias_shift.defined()) apply_bias_shift(ctx, rounded, j, o.bias_shift);
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

int64_t columns_of(const LayerPlan& lp) {
  int64_t k = 1;
  for (size_t i = 1; i < lp.info.weight_shape.size(); ++i) k *= lp.info.weight_shape[i];
  return k;
}

Job make_job(const QuantizeContext& ctx, const LayerPlan& lp,
             const std::map<std::string, LayerGeometry>& geoms) {
  Job j;
  j.lp = &lp;
  // (A job's layer has quantized weights: the weights stage's passes change
  // only such layers.)
  j.gptq = lp.weights.rounding == Rounding::kGptq;
  // Static mode: the backend corrects from the weights it rounds (correct_biases).
  j.bias = ctx.plan.algorithms.bias_correction && ctx.plan.mode == Mode::kWeightOnly;
  auto g = geoms.find(lp.info.name);
  std::string why = g == geoms.end() ? "the layer is not called in forward" : g->second.why;
  if (g != geoms.end()) j.g = g->second;
  if (j.gptq && why.empty() && j.g.conv && j.g.spatial_dims == 3) {
    j.facts["gptq"] = {{"skipped", "Conv3d: im2col is 1-D and 2-D only; rounded to nearest"}};
    j.gptq = false;
  } else if (j.gptq && !why.empty()) {
    j.facts["gptq"] = {{"skipped", why + "; rounded to nearest"}};
    j.gptq = false;
  }
  auto layer = find_submodule(ctx.model, lp.info.name);
  const bool has_bias = layer.hasattr("bias") && layer.attr("bias").isTensor();
  if (j.bias && (!why.empty() || (!has_bias && j.g.batch_norm_after.empty()))) {
    j.facts["bias_correction"] = {
        {"skipped", why.empty() ? "the layer has no bias and no BatchNorm after it" : why}};
    j.bias = false;
  }
  if (j.gptq) {
    const int64_t K = columns_of(lp);
    j.h = at::zeros({j.g.groups, K, K}, at::kDouble);
  }
  return j;
}

// Adds one input of the layer to the job's statistics.
void observe_mean(Job& j, const at::Tensor& x) {
  if (!j.bias) return;
  std::vector<int64_t> shape(x.sizes().begin() + 1, x.sizes().end());
  if (!j.sum.defined()) {
    j.sum = at::zeros(shape, at::kDouble);
    j.sample_shape = shape;
  } else if (shape != j.sample_shape) {
    j.facts["bias_correction"] = {{"skipped", "the layer's inputs differ in shape between calls"}};
    j.bias = false;
    return;
  }
  j.sum += x.to(at::kDouble).sum(0);
  j.count += x.size(0);
}

void observe(Job& j, const at::Tensor& input) {
  at::Tensor x = input.detach();
  if (j.gptq) accumulate_hessian(j.g, x, j.h);
  observe_mean(j, x);
}

// Sequential GPTQ: one input x of the float model and the same call's input
// xq in the partly rounded model.
void observe_paired(Job& j, const at::Tensor& x, const at::Tensor& xq) {
  if (j.gptq) {
    accumulate_paired(j.g, j.w, x, xq, j.h, j.r);
    j.in_signal += x.to(at::kFloat).square().sum().item<double>();
    j.in_noise += (x - xq).to(at::kFloat).square().sum().item<double>();
  }
  observe_mean(j, x);
}

void gather(QuantizeContext& ctx, CalibrationData& data, const std::vector<Job*>& pass) {
  std::map<std::string, Job*> by_name;
  for (Job* j : pass) by_name[j->lp->info.name] = j;
  LayerInputStream stream(ctx.model);
  data.pass([&](const std::vector<at::Tensor>& inputs, bool) {
    stream.run(inputs, [&](const std::string& layer, const at::Tensor& x) {
      auto it = by_name.find(layer);
      if (it != by_name.end()) observe(*it->second, x);
    });
  });
}

// Sequential GPTQ's statistics of `stage` where the model cannot be cut:
// each batch runs through the float model (`fl`) and the model whose
// earlier layers are rounded (`shadow`), each up to the stage's last call
// where that is known; the i-th call of a layer in one is paired with its
// i-th call in the other.
void gather_paired(CalibrationData& data, LayerInputStream& fl, const torch::jit::Module& shadow,
                   const std::vector<Job*>& stage) {
  std::map<std::string, Job*> by_name;
  std::set<std::string> names;
  for (Job* j : stage) by_name[j->lp->info.name] = j, names.insert(j->lp->info.name);
  LayerInputStream qs(shadow);
  std::map<std::string, std::vector<at::Tensor>> seen;
  data.pass([&](const std::vector<at::Tensor>& inputs, bool) {
    seen.clear();
    fl.run_until(
        inputs,
        [&](const std::string& layer, const at::Tensor& x) {
          if (by_name.count(layer)) seen[layer].push_back(x.detach().clone());
        },
        names);
    std::map<std::string, size_t> calls;
    qs.run_until(
        inputs,
        [&](const std::string& layer, const at::Tensor& xq) {
          auto it = by_name.find(layer);
          if (it == by_name.end()) return;
          const auto& xs = seen[layer];
          const size_t i = calls[layer]++;
          if (i < xs.size()) observe_paired(*it->second, xs[i], xq.detach());
        },
        names);
  });
}

// sum_g tr(W_g H_g W_g^T): the output energy of W over the calibration inputs.
double output_energy(const at::Tensor& w2d, const at::Tensor& h) {
  const int64_t per = w2d.size(0) / h.size(0);
  double e = 0;
  for (int64_t g = 0; g < h.size(0); ++g) {
    at::Tensor wg = w2d.narrow(0, g * per, per);
    e += (at::matmul(wg, h[g]) * wg).sum().item<double>();
  }
  return e;
}

// GPTQ on one layer: the weight (sequential: its corrected target) rounded
// column by column on its grid (scale_search: the searched one); the
// rounded weight goes to out.rounded, what it did to j.facts["gptq"].
void run_gptq(QuantizeContext& ctx, Job& j, const at::Tensor& w,
              const wformat::QuantizedWeight& nearest, Outcome& out) {
  const LayerPlan& lp = *j.lp;
  const auto t0 = Clock::now();
  const GptqSettings& st = ctx.plan.algorithms.gptq;
  // Sequential: round the corrected weight, on its own nearest grid.
  const bool corrected = j.r.defined();
  const at::Tensor target = corrected ? gptq_corrected_target(w, j.h, j.r, st.damp) : w;
  j.r = j.w = at::Tensor();
  const wformat::QuantizedWeight base =
      corrected
          ? round_planned_values(ctx, lp,
                                 std::vector<float>(target.data_ptr<float>(),
                                                    target.data_ptr<float>() + target.numel()),
                                 w.sizes().vec())
          : nearest;
  const wformat::QuantizedWeight scales =
      st.scale_search ? gptq_searched_grid(base, target, j.h) : base;
  const wformat::WeightGrid grid(scales);
  auto values = gptq_round(target, j.h, grid, st);
  auto rounded = wformat::quantize_weight_with(values.data(), scales);
  // Its SQNR against the original weights (the values GPTQ rounded are on the grid).
  rounded.sqnr_db = sqnr_db(w.data_ptr<float>(), rounded.dequant.data(), rounded.dequant.size());
  out.rounded = std::make_shared<const wformat::QuantizedWeight>(std::move(rounded));
  const wformat::QuantizedWeight& q = *out.rounded;
  // Sequential: the part of the output error GPTQ minimizes, on the rounded model's inputs.
  const at::Tensor w2d = target.reshape({w.size(0), -1}).to(at::kDouble);
  const double signal = output_energy(w2d, j.h);
  auto noise = [&](const wformat::QuantizedWeight& r) {
    return output_energy(values_of(r, w).reshape({w.size(0), -1}).to(at::kDouble) - w2d, j.h);
  };
  j.facts["gptq"] = {{"seconds", seconds_since(t0)},
                     {"calibration_output_sqnr_db",
                      {{"nearest", detail::energy_db(signal, noise(nearest))},
                       {"gptq", detail::energy_db(signal, noise(q))}}},
                     {"weight_sqnr_db", {{"nearest", nearest.sqnr_db}, {"gptq", q.sqnr_db}}}};
  if (corrected)
    j.facts["gptq"]["sequential"] = {
        // null: no error came in (the layer reads the float model's input)
        {"input_sqnr_db", j.in_noise > 0
                              ? nlohmann::json(detail::energy_db(j.in_signal, j.in_noise))
                              : nlohmann::json()},
        {"target_weight_sqnr_db",
         sqnr_db(w.data_ptr<float>(), target.data_ptr<float>(), static_cast<size_t>(w.numel()))}};
  j.h = at::Tensor();  // free the Hessian before the next layer
}

Outcome run_job(QuantizeContext& ctx, Job& j) {
  const LayerPlan& lp = *j.lp;
  auto layer = find_submodule(ctx.model, lp.info.name);
  const at::Tensor w = layer.attr("weight").toTensor().detach().to(at::kFloat).contiguous();
  const wformat::QuantizedWeight nearest = round_planned_weight(ctx, ctx.model, lp);
  Outcome out;
  if (j.gptq) run_gptq(ctx, j, w, nearest, out);
  const wformat::QuantizedWeight* q = out.rounded ? out.rounded.get() : &nearest;
  if (j.bias && j.count > 0) {
    const auto t0 = Clock::now();
    out.bias_shift =
        bias_correction_shift(j.g, j.sum / static_cast<double>(j.count), values_of(*q, w) - w);
    const double mx = out.bias_shift.abs().max().item<double>();
    j.facts["bias_correction"] = {{"seconds", seconds_since(t0)},
                                  {"samples", j.count},
                                  {"applied_to", bias_target(ctx, j)},
                                  {"max_abs_shift", mx},
                                  {"mean_abs_shift", out.bias_shift.abs().mean().item<double>()}};
  }
  return out;
}

}  // namespace

namespace {

size_t tensor_bytes(const std::vector<c10::IValue>& values) {
  size_t b = 0;
  for (const auto& v : values)
    if (v.isTensor()) b += v.toTensor().nbytes();
  return b;
}

// Sequential GPTQ on a model cut into pieces before each GPTQ layer: the
// values at the current cut are kept for every batch, for the float model
// and for the rounded copy, so each piece runs once over the data. Returns
// false (nothing done) when the model cannot be cut, or when those values
// would exceed the budget; `why` says which.
bool run_in_pieces(QuantizeContext& ctx, CalibrationData& data, std::vector<Job*> gq, size_t budget,
                   Results& r, std::string& why) {
  std::set<std::string> names;
  std::map<std::string, Job*> by_name;
  for (Job* j : gq) names.insert(j->lp->info.name), by_name[j->lp->info.name] = j;
  ForwardPieces fp(ctx.model, names), sp(*r.rounded, names);
  why = fp.why();
  if (!why.empty()) return false;
  std::vector<std::vector<c10::IValue>> fv, sv;
  size_t per_sample = 0, samples = 0;
  data.pass([&](const std::vector<at::Tensor>& inputs, bool) {
    if (!fv.empty() && per_sample * samples * 2 > budget) return;
    fv.push_back(fp.start(inputs)), sv.push_back(sp.start(inputs));
    if (fv.size() == 1) {  // the largest values at any cut, per sample
      std::vector<c10::IValue> probe = fp.start(inputs);
      for (size_t k = 0; k < fp.order().size(); ++k) {
        fp.advance(k, probe);
        per_sample =
            std::max(per_sample, tensor_bytes(probe) / std::max<int64_t>(1, inputs.at(0).size(0)));
      }
    }
    samples += static_cast<size_t>(inputs.at(0).size(0));
    fp.advance(0, fv.back()), sp.advance(0, sv.back());
  });
  if (per_sample * samples * 2 > budget) {
    why = "the layer inputs of all calibration samples would take " +
          std::to_string((per_sample * samples * 2) >> 20) + " MiB";
    return false;
  }
  r.rounded = sp.model();
  for (size_t k = 0; k < fp.order().size(); ++k) {
    Job& j = *by_name.at(fp.order()[k]);
    const size_t x = fp.input_index(k);
    for (size_t b = 0; b < fv.size(); ++b)
      observe_paired(j, fv[b][x].toTensor(), sv[b][x].toTensor());
    const Outcome& o = r.outcomes[j.lp->info.name] = run_job(ctx, j);
    apply_outcome(ctx, *r.rounded, j, o);
    r.peak = std::max(r.peak, per_sample * samples * 2 + j.bytes());
    if (ctx.on_progress) ctx.on_progress("algorithms", r.outcomes.size(), gq.size());
    if (k + 1 < fp.order().size())
      for (size_t b = 0; b < fv.size(); ++b) fp.advance(k + 1, fv[b]), sp.advance(k + 1, sv[b]);
  }
  r.passes += 1;
  return true;
}

// Gathers each pass's (stage's) statistics and runs its jobs. Sequential
// GPTQ puts each result into its rounded copy of the model before the next
// stage gathers.
Results run_passes(QuantizeContext& ctx, CalibrationData& data, std::vector<Job>& jobs,
                   size_t budget, bool sequential) {
  Results r;
  std::vector<Job*> gq;  // sequential: the GPTQ jobs, after every other job
  auto run_pass = [&](const std::vector<Job*>& pass) {
    size_t bytes = 0;
    for (const Job* j : pass) bytes += j->bytes();
    r.peak = std::max(r.peak, bytes);
    ++r.passes;
    for (Job* j : pass) {
      const Outcome& o = r.outcomes[j->lp->info.name] = run_job(ctx, *j);
      if (r.rounded) apply_outcome(ctx, *r.rounded, *j, o);
      if (ctx.on_progress) ctx.on_progress("algorithms", r.outcomes.size(), jobs.size());
    }
  };
  std::vector<Job*> others;
  for (auto& j : jobs) (sequential && j.gptq ? gq : others).push_back(&j);
  if (sequential) r.rounded = rounded_shadow(ctx, jobs);
  // Passes of the jobs that are not sequential, on the float model.
  std::vector<Job*> pass;
  size_t used = 0;
  for (Job* j : others) {
    if (!pass.empty() && used + j->bytes() > budget) {
      gather(ctx, data, pass), run_pass(pass);
      pass.clear(), used = 0;
    }
    pass.push_back(j), used += j->bytes();
  }
  if (!pass.empty()) gather(ctx, data, pass), run_pass(pass);
  if (gq.empty()) return r;
  if (run_in_pieces(ctx, data, gq, budget, r, r.pieces_why)) return r;
  // The model cannot be cut: each GPTQ layer's inputs come from a run of the
  // whole model (up to the layer where that can be known) per layer.
  std::optional<LayerInputStream> fl;
  fl.emplace(ctx.model);
  for (Job* j : gq) gather_paired(data, *fl, *r.rounded, {j}), run_pass({j});
  return r;
}

}  // namespace

StageResult run_weight_algorithms(QuantizeContext& ctx, CalibrationData& data, size_t budget) {
  const auto geoms = layer_geometries(ctx.model);
  std::vector<Job> jobs;
  for (const auto& lp : ctx.plan.layers)
    if (stage_changes_layer("weights", lp, ctx.plan)) jobs.push_back(make_job(ctx, lp, geoms));
  StageResult result;
  if (jobs.empty()) return result;
  const bool gptq = std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.gptq; });
  const bool sequential = gptq && ctx.plan.algorithms.gptq.sequential;
  if (sequential)
    for (auto& j : jobs)
      if (j.gptq) {
        j.w = find_submodule(ctx.model, j.lp->info.name).attr("weight").toTensor().detach();
        j.r = at::zeros({j.h.size(0), j.w.size(0) / j.h.size(0), j.h.size(1)}, at::kDouble);
      }
  Results r = run_passes(ctx, data, jobs, budget, sequential);
  apply_results(ctx, data, jobs, r, gptq, sequential, result);
  result.counts = {{"layers", jobs.size()},
                   {"passes", r.passes},
                   {"sequential", sequential},
                   {"statistics_peak_bytes", r.peak}};
  if (!r.pieces_why.empty())
    result.counts["sequential_whole_runs"] = r.pieces_why +
                                             ": each GPTQ layer's inputs came from a run of "
                                             "the whole model";
  return result;
}

}  // namespace tq
