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

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/steps.h"
#include "taoquant/weight_algorithms.h"
#include "taoquant/weight_quant.h"
#include "torch/algorithms/pair_ops.h"

namespace tq {

namespace {

using Clock = std::chrono::steady_clock;

// One planned layer and what the algorithms gather and decide for it.
struct Job {
  const LayerPlan* lp = nullptr;
  LayerGeometry g;
  bool gptq = false, bias = false;
  at::Tensor h;       // [groups, K, K] float64 (GPTQ)
  at::Tensor w;       // sequential GPTQ: the float weight
  at::Tensor r;       // sequential GPTQ: [groups, rows / groups, K] float64, sum W (x - x~) x~^T
  at::Tensor sum;     // sum of inputs over samples, float64 (bias correction)
  int64_t count = 0;  // samples in `sum`
  double in_signal = 0, in_noise = 0;  // sequential GPTQ: sum x^2, sum (x - x~)^2
  std::vector<int64_t> sample_shape;
  nlohmann::json facts = nlohmann::json::object();
  size_t bytes() const {  // the Hessian's; a mean input is one sample
    return static_cast<size_t>((h.defined() ? h.numel() : 0) + (r.defined() ? r.numel() : 0)) *
           sizeof(double);
  }
};

int64_t columns_of(const LayerPlan& lp) {
  int64_t k = 1;
  for (size_t i = 1; i < lp.info.weight_shape.size(); ++i) k *= lp.info.weight_shape[i];
  return k;
}

Job make_job(const QuantizeContext& ctx, const LayerPlan& lp,
             const std::map<std::string, LayerGeometry>& geoms) {
  Job j;
  j.lp = &lp;
  const auto algs = lp.algorithms(ctx.plan);
  j.gptq = std::find(algs.begin(), algs.end(), "gptq") != algs.end();
  // Static mode: the backend corrects from the weights it rounds (correct_biases).
  j.bias = std::find(algs.begin(), algs.end(), "bias_correction") != algs.end() &&
           ctx.plan.mode == Mode::kWeightOnly;
  auto g = geoms.find(lp.info.name);
  std::string why = g == geoms.end() ? "the layer is not called in forward" : g->second.why;
  if (g != geoms.end()) j.g = g->second;
  if (j.gptq && why.empty() && j.g.conv && j.g.spatial_dims == 3)
    j.facts["gptq"] = {{"skipped", "Conv3d: im2col is 1-D and 2-D only; rounded to nearest"}};
  else if (j.gptq && !why.empty())
    j.facts["gptq"] = {{"skipped", why + "; rounded to nearest"}};
  if (j.facts.contains("gptq")) j.gptq = false;
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
  if (!j.bias || !j.facts.is_object() || j.facts.contains("bias_correction")) return;
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

at::Tensor values_of(const wformat::QuantizedWeight& q, const at::Tensor& like) {
  return at::from_blob(const_cast<float*>(q.dequant.data()), like.sizes(), at::kFloat).clone();
}

}  // namespace

namespace {

// What the layer's result is: GPTQ's rounding (else nearest) and the bias
// shift; facts on the calibration data (GPTQ) and on the held-out batch.
struct Outcome {
  std::shared_ptr<const wformat::QuantizedWeight> rounded;  // set by GPTQ
  at::Tensor bias_shift;                                    // set by bias correction
};

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

// The grid GPTQ rounds on: the nearest rounding's scales, each slice's
// (channel's or group's) shrunk by the factor in {1, 0.95, ..., 0.5} whose
// nearest rounding has the least error weighted by the Hessian's diagonal
// (each column's input energy). At 4 bits, clipping a channel's few largest
// weights often costs less than coarse steps for all the others (the grid
// search of GPTQ's reference code, weighted as GPTQ's objective is).
wformat::QuantizedWeight searched_grid(const wformat::QuantizedWeight& nearest, const at::Tensor& w,
                                       const at::Tensor& h) {
  wformat::QuantizedWeight trial = nearest;
  const wformat::WeightGrid grid(trial);  // reads trial's scales as they change
  const int64_t rows = w.size(0), K = w.numel() / std::max<int64_t>(rows, 1);
  const int64_t per = rows / std::max<int64_t>(h.size(0), 1);
  const at::Tensor diag = h.diagonal(0, 1, 2).to(at::kDouble).contiguous();  // [groups, K]
  const double* D = diag.data_ptr<double>();
  const float* W = w.data_ptr<float>();
  const size_t slices = nearest.scales.size();
  std::vector<double> best(slices, std::numeric_limits<double>::infinity()), factor(slices, 1.0);
  for (int step = 0; step <= 10; ++step) {
    const double f = 1.0 - 0.05 * step;
    for (size_t i = 0; i < slices; ++i) trial.scales[i] = static_cast<float>(nearest.scales[i] * f);
    std::vector<double> err(slices, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const auto flat = static_cast<size_t>(r * K + k);
        const double d = W[flat] - grid.nearest(flat, W[flat]);
        err[grid.slice(flat)] += D[(r / per) * K + k] * d * d;
      }
    for (size_t i = 0; i < slices; ++i)
      if (err[i] < best[i]) best[i] = err[i], factor[i] = f;
  }
  for (size_t i = 0; i < slices; ++i)
    trial.scales[i] = static_cast<float>(nearest.scales[i] * factor[i]);
  return trial;
}

Outcome run_job(QuantizeContext& ctx, Job& j) {
  const LayerPlan& lp = *j.lp;
  auto layer = find_submodule(ctx.model, lp.info.name);
  const at::Tensor w = layer.attr("weight").toTensor().detach().to(at::kFloat).contiguous();
  const wformat::QuantizedWeight nearest = round_planned_weight(ctx, ctx.model, lp);
  Outcome out;
  const wformat::QuantizedWeight* q = &nearest;
  if (j.gptq) {
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
        st.scale_search ? searched_grid(base, target, j.h) : base;
    const wformat::WeightGrid grid(scales);
    auto values = gptq_round(target, j.h, grid, st);
    auto rounded = wformat::quantize_weight_with(values.data(), scales);
    // Its SQNR against the original weights (the values GPTQ rounded are on the grid).
    rounded.sqnr_db = sqnr_db(w.data_ptr<float>(), rounded.dequant.data(), rounded.dequant.size());
    out.rounded = std::make_shared<const wformat::QuantizedWeight>(std::move(rounded));
    q = out.rounded.get();
    // Sequential: the part of the output error GPTQ minimizes, on the rounded model's inputs.
    const at::Tensor w2d = target.reshape({w.size(0), -1}).to(at::kDouble);
    const double signal = output_energy(w2d, j.h);
    auto noise = [&](const wformat::QuantizedWeight& r) {
      return output_energy(values_of(r, w).reshape({w.size(0), -1}).to(at::kDouble) - w2d, j.h);
    };
    j.facts["gptq"] = {{"seconds", seconds_since(t0)},
                       {"calibration_output_sqnr_db",
                        {{"nearest", detail::energy_db(signal, noise(nearest))},
                         {"gptq", detail::energy_db(signal, noise(*q))}}},
                       {"weight_sqnr_db", {{"nearest", nearest.sqnr_db}, {"gptq", q->sqnr_db}}}};
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

// The layer's output SQNR on held-out inputs: nearest rounding vs the
// algorithms' result (weights and bias).
void holdout_sqnr(const QuantizeContext& ctx, Job& j, const Outcome& o, const at::Tensor& x) {
  auto layer = find_submodule(ctx.model, j.lp->info.name);
  const at::Tensor w = layer.attr("weight").toTensor().detach().to(at::kFloat);
  at::Tensor b = layer.hasattr("bias") && layer.attr("bias").isTensor()
                     ? layer.attr("bias").toTensor().detach().to(at::kFloat)
                     : at::Tensor();
  const auto nearest = round_planned_weight(ctx, ctx.model, *j.lp);
  const at::Tensor wn = values_of(nearest, w), wa = o.rounded ? values_of(*o.rounded, w) : wn;
  at::Tensor ba = b;
  // A shift applied to the BatchNorm after the layer acts as a bias.
  if (o.bias_shift.defined())
    ba = b.defined() ? b + o.bias_shift.to(at::kFloat) : o.bias_shift.to(at::kFloat);
  const at::Tensor xf = x.to(at::kFloat), y = layer_forward(j.g, xf, w, b);
  j.facts["holdout_output_sqnr_db"] = {
      {"nearest", tensor_sqnr_db(y, layer_forward(j.g, xf, wn, b))},
      {"after", tensor_sqnr_db(y, layer_forward(j.g, xf, wa, ba))},
      {"samples", x.size(0)}};
}

}  // namespace

namespace {

// A copy of the float model whose quantized layers are rounded to nearest,
// but for the GPTQ layers of `jobs` (still float: apply_outcome puts each
// one's result in). Sequential GPTQ rounds into it.
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

}  // namespace

CaptureOptions detail::holdout_capture() {
  CaptureOptions o;
  o.samples = [](const std::string&, const at::Tensor& x) {
    const int64_t n = x.dim() > 0 ? x.size(0) : 1;
    const int64_t per = std::max<int64_t>(1, x.numel() / std::max<int64_t>(n, 1));
    return std::clamp<int64_t>((int64_t{1} << 17) / per, 1, n);
  };
  return o;
}

namespace {

struct Results {
  std::map<std::string, Outcome> outcomes;
  size_t passes = 0, peak = 0;
  std::string pieces_why;                     // sequential: why the model was not cut into pieces
  std::optional<torch::jit::Module> rounded;  // the model with every result in (sequential)
};

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

// Each layer's output inside the rounded model against the float model's,
// on the held-out batch: with every quantized layer rounded to nearest, and
// with the algorithms' results. Unlike holdout_output_sqnr_db (the layer
// alone, on float inputs), this includes the error coming in from the
// layers before. Returns the float model's capture (inputs and outputs).
LayerCapture holdout_in_model(const QuantizeContext& ctx, CalibrationData& data,
                              std::vector<Job>& jobs, Results& r) {
  if (!r.rounded) {
    r.rounded = rounded_shadow(ctx, jobs);
    for (auto& j : jobs) apply_outcome(ctx, *r.rounded, j, r.outcomes[j.lp->info.name]);
  }
  CaptureOptions o = detail::holdout_capture();
  o.outputs = true;
  auto fl = capture_layers(ctx.model, data.holdout(), o);
  const auto near = capture_layers(rounded_shadow(ctx, {}), data.holdout(), o);
  const auto after = capture_layers(*r.rounded, data.holdout(), o);
  for (auto& j : jobs) {
    const std::string& name = j.lp->info.name;
    const auto& fo = fl.outputs;
    auto y = fo.find(name), n = near.outputs.find(name), a = after.outputs.find(name);
    if (y == fo.end() || n == near.outputs.end() || a == after.outputs.end()) continue;
    j.facts["holdout_model_output_sqnr_db"] = {{"nearest", tensor_sqnr_db(y->second, n->second)},
                                               {"after", tensor_sqnr_db(y->second, a->second)},
                                               {"samples", y->second.size(0)}};
  }
  return fl;
}

}  // namespace

void run_weight_algorithms(QuantizeContext& ctx, CalibrationData& data, size_t budget) {
  const auto t0 = Clock::now();
  const auto geoms = layer_geometries(ctx.model);
  std::vector<Job> jobs;
  for (const auto& lp : ctx.plan.layers) {
    const auto a = lp.algorithms(ctx.plan);
    if (std::find(a.begin(), a.end(), std::string(to_string(lp.weights.rounding))) != a.end() ||
        (std::find(a.begin(), a.end(), "bias_correction") != a.end() &&
         ctx.plan.mode == Mode::kWeightOnly))
      jobs.push_back(make_job(ctx, lp, geoms));
  }
  if (jobs.empty()) return;
  const bool gptq = std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.gptq; });
  const bool sequential = gptq && ctx.plan.algorithms.gptq.sequential;
  if (sequential)
    for (auto& j : jobs)
      if (j.gptq) {
        j.w = find_submodule(ctx.model, j.lp->info.name).attr("weight").toTensor().detach();
        j.r = at::zeros({j.h.size(0), j.w.size(0) / j.h.size(0), j.h.size(1)}, at::kDouble);
      }
  Results r = run_passes(ctx, data, jobs, budget, sequential);
  // With GPTQ, also each layer's output inside the rounded model (bias
  // correction alone changes too little to be worth the two more runs).
  const auto held = gptq ? holdout_in_model(ctx, data, jobs, r)
                         : capture_layers(ctx.model, data.holdout(), detail::holdout_capture());
  for (auto& j : jobs) {
    const std::string& name = j.lp->info.name;
    const Outcome& o = r.outcomes[name];
    auto x = held.inputs.find(name);
    if (x != held.inputs.end() && j.g.why.empty()) holdout_sqnr(ctx, j, o, x->second);
    if (o.rounded) ctx.weight_overrides[name] = o.rounded;
    for (const auto& [k, v] : j.facts.items()) ctx.algorithm_facts[name][k] = v;
  }
  // Biases change last: the statistics above are of the float model (and of
  // the rounded copy, for sequential GPTQ).
  for (const auto& j : jobs) {
    const Outcome& o = r.outcomes[j.lp->info.name];
    if (o.bias_shift.defined()) apply_bias_shift(ctx, ctx.model, j, o.bias_shift);
  }
  nlohmann::json facts = {{"layers", jobs.size()},
                          {"passes", r.passes},
                          {"sequential", sequential},
                          {"statistics_peak_bytes", r.peak},
                          {"seconds", seconds_since(t0)}};
  if (!r.pieces_why.empty())
    facts["sequential_whole_runs"] = r.pieces_why +
                                     ": each GPTQ layer's inputs came from a run of "
                                     "the whole model";
  ctx.calibration["algorithms"] = facts;
}

}  // namespace tq
