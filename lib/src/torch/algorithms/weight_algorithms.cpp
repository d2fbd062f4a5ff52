// The algorithm stage of weight-only quantization: statistics of each
// planned layer's inputs, streamed over the calibration data in passes of
// bounded memory, then GPTQ and bias correction per layer. The backend
// stores the results through quantize_planned_weight.
#include <ATen/ATen.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <limits>

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
  at::Tensor sum;     // sum of inputs over samples, float64 (bias correction)
  int64_t count = 0;  // samples in `sum`
  std::vector<int64_t> sample_shape;
  nlohmann::json facts = nlohmann::json::object();
  size_t bytes() const {  // the Hessian's; a mean input is one sample
    return h.defined() ? static_cast<size_t>(h.numel()) * sizeof(double) : 0;
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
void observe(Job& j, const at::Tensor& input) {
  at::Tensor x = input.detach();
  if (j.gptq) accumulate_hessian(j.g, x, j.h);
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

void apply_bias_shift(QuantizeContext& ctx, const Job& j, const at::Tensor& shift) {
  const std::string target = bias_target(ctx, j);
  const auto dot = target.rfind('.');
  auto m = find_submodule(ctx.model, target.substr(0, dot));
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
    const wformat::QuantizedWeight scales =
        ctx.plan.algorithms.gptq.scale_search ? searched_grid(nearest, w, j.h) : nearest;
    const wformat::WeightGrid grid(scales);
    auto values = gptq_round(w, j.h, grid, ctx.plan.algorithms.gptq);
    auto rounded = wformat::quantize_weight_with(values.data(), scales);
    // Its SQNR against the original weights (the values GPTQ rounded are on the grid).
    rounded.sqnr_db = sqnr_db(w.data_ptr<float>(), rounded.dequant.data(), rounded.dequant.size());
    out.rounded = std::make_shared<const wformat::QuantizedWeight>(std::move(rounded));
    q = out.rounded.get();
    const at::Tensor w2d = w.reshape({w.size(0), -1}).to(at::kDouble);
    const double signal = output_energy(w2d, j.h);
    auto noise = [&](const wformat::QuantizedWeight& r) {
      return output_energy(values_of(r, w).reshape({w.size(0), -1}).to(at::kDouble) - w2d, j.h);
    };
    j.facts["gptq"] = {{"seconds", seconds_since(t0)},
                       {"calibration_output_sqnr_db",
                        {{"nearest", detail::energy_db(signal, noise(nearest))},
                         {"gptq", detail::energy_db(signal, noise(*q))}}},
                       {"weight_sqnr_db", {{"nearest", nearest.sqnr_db}, {"gptq", q->sqnr_db}}}};
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

CaptureOptions detail::holdout_capture() {
  CaptureOptions o;
  o.samples = [](const std::string&, const at::Tensor& x) {
    const int64_t n = x.dim() > 0 ? x.size(0) : 1;
    const int64_t per = std::max<int64_t>(1, x.numel() / std::max<int64_t>(n, 1));
    return std::clamp<int64_t>((int64_t{1} << 17) / per, 1, n);
  };
  return o;
}

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
  auto passes = detail::passes_within(jobs, budget);
  std::map<std::string, Outcome> outcomes;
  size_t peak = 0, done = 0;
  for (const auto& pass : passes) {
    size_t bytes = 0;
    for (const Job* j : pass) bytes += j->bytes();
    peak = std::max(peak, bytes);
    gather(ctx, data, pass);
    for (Job* j : pass) {
      outcomes[j->lp->info.name] = run_job(ctx, *j);
      if (ctx.on_progress) ctx.on_progress("algorithms", ++done, jobs.size());
    }
  }
  const auto held = capture_layers(ctx.model, data.holdout(), detail::holdout_capture());
  for (auto& j : jobs) {
    const std::string& name = j.lp->info.name;
    const Outcome& o = outcomes[name];
    auto x = held.inputs.find(name);
    if (x != held.inputs.end() && j.g.why.empty()) holdout_sqnr(ctx, j, o, x->second);
    if (o.rounded) ctx.weight_overrides[name] = o.rounded;
    for (const auto& [k, v] : j.facts.items()) ctx.algorithm_facts[name][k] = v;
  }
  // Biases change last: every statistic above is of the float model.
  for (const auto& j : jobs) {
    const Outcome& o = outcomes[j.lp->info.name];
    if (o.bias_shift.defined()) apply_bias_shift(ctx, j, o.bias_shift);
  }
  ctx.calibration["algorithms"] = {{"layers", jobs.size()},
                                   {"passes", passes.size()},
                                   {"statistics_peak_bytes", peak},
                                   {"seconds", seconds_since(t0)}};
}

}  // namespace tq
