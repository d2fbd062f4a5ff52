// Empirical bias correction for static mode (Nagel et al. 2019, sec. 4.2,
// the empirical variant; NNCF's fast bias correction is the same idea): the
// backend rounds the weights and chose the input's qparams; the library
// measures, on the calibration data, each layer's mean output error from
// both, op(Q(x); Wq) - op(x; W), and subtracts it from the bias. The op is
// linear in x, so the mean error is that of the mean inputs: the statistics
// are one sample per layer, whatever the data size.
#include <ATen/ATen.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>

#include "taoquant/backend.h"
#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/steps.h"
#include "taoquant/weight_algorithms.h"
#include "torch/algorithms/pair_ops.h"

namespace tq {

namespace {

struct Sums {
  const StaticBiasLayer* q = nullptr;
  LayerGeometry g;
  std::string skipped;  // non-empty: not corrected, and why
  at::Tensor x, qx;     // sums over samples, float64, one sample's shape
  std::vector<int64_t> shape;
  int64_t count = 0;

  void add(const at::Tensor& input) {
    if (!skipped.empty()) return;
    const at::Tensor in = input.detach().to(at::kFloat);
    std::vector<int64_t> s(in.sizes().begin() + 1, in.sizes().end());
    if (count == 0) {
      shape = s;
      x = at::zeros(s, at::kDouble);
      qx = at::zeros(s, at::kDouble);
    } else if (s != shape) {
      skipped = "the layer's inputs differ in shape between calls";
      return;
    }
    x += in.to(at::kDouble).sum(0);
    const at::Tensor quantized = q->input_scale > 0 ? at::fake_quantize_per_tensor_affine(
                                                          in, q->input_scale, q->input_zero_point,
                                                          q->input_qmin, q->input_qmax)
                                                    : in;
    qx += quantized.to(at::kDouble).sum(0);
    count += in.size(0);
  }
};

bool has_bias(const torch::jit::Module& m, const std::string& layer) {
  auto l = find_submodule(m, layer);
  return l.hasattr("bias") && l.attr("bias").isTensor();
}

// Mean over every dimension but the output channel's.
at::Tensor channel_mean(const LayerGeometry& g, const at::Tensor& y) {
  const int64_t channel = g.conv ? 1 : y.dim() - 1;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < y.dim(); ++d)
    if (d != channel) dims.push_back(d);
  return y.mean(dims);
}

// Each layer's statistics, empty, or why it cannot be corrected.
std::map<std::string, Sums> sums_for(const torch::jit::Module& reference,
                                     const torch::jit::Module& target,
                                     const std::map<std::string, StaticBiasLayer>& layers) {
  const auto geoms = layer_geometries(reference);
  std::map<std::string, Sums> sums;
  for (const auto& [name, q] : layers) {
    Sums& s = sums[name];
    s.q = &q;
    auto g = geoms.find(name);
    s.skipped = g == geoms.end() ? "the layer is not called in forward" : g->second.why;
    if (g != geoms.end()) s.g = g->second;
    if (s.skipped.empty() && !has_bias(target, name) && s.g.batch_norm_after.empty())
      s.skipped = "the layer has no bias and no BatchNorm after it";
  }
  return sums;
}

// The layer's output on held-out inputs `x` with its input quantized as
// the backend quantizes it and the weight it stores, without and with the
// shift, against the float output (SQNR, dB): the correction's own check.
std::pair<double, double> holdout_sqnr(const Sums& s, const torch::jit::Module& reference,
                                       const std::string& layer, const at::Tensor& x,
                                       const BiasShift& b) {
  auto m = find_submodule(reference, layer);
  const at::Tensor w = m.attr("weight").toTensor().detach().to(at::kDouble);
  const at::Tensor bias = has_bias(reference, layer)
                              ? m.attr("bias").toTensor().detach().to(at::kDouble)
                              : at::zeros({w.size(0)}, at::kDouble);
  const at::Tensor xf = x.detach().to(at::kFloat);
  const at::Tensor xq = s.q->input_scale > 0 ? at::fake_quantize_per_tensor_affine(
                                                   xf, s.q->input_scale, s.q->input_zero_point,
                                                   s.q->input_qmin, s.q->input_qmax)
                                             : xf;
  const at::Tensor wq = s.q->weight.detach().to(at::kDouble);
  const at::Tensor y = layer_forward(s.g, xf.to(at::kDouble), w, bias);
  const double before = tensor_sqnr_db(y, layer_forward(s.g, xq.to(at::kDouble), wq, bias));
  const double after =
      tensor_sqnr_db(y, layer_forward(s.g, xq.to(at::kDouble), wq, bias + b.shift));
  return {before, after};
}

}  // namespace

at::Tensor static_bias_shift(const LayerGeometry& g, const at::Tensor& mean_input,
                             const at::Tensor& mean_quantized_input, const at::Tensor& w,
                             const at::Tensor& wq) {
  const at::Tensor yf =
      layer_forward(g, mean_input.unsqueeze(0).to(at::kDouble), w.to(at::kDouble), {});
  const at::Tensor yq =
      layer_forward(g, mean_quantized_input.unsqueeze(0).to(at::kDouble), wq.to(at::kDouble), {});
  return -channel_mean(g, yq - yf);
}

void shift_bias(torch::jit::Module& target, const BiasShift& b, double sign) {
  const auto dot = b.target.rfind('.');
  const std::string attr = b.target.substr(dot + 1);
  at::Tensor t = find_submodule(target, b.target.substr(0, dot)).attr(attr).toTensor();
  // A BatchNorm subtracts its running mean: it moves against the output.
  const double s = attr == "running_mean" ? -sign : sign;
  torch::NoGradGuard ng;
  t.add_(b.shift.to(t.scalar_type()), s);
}

void StaticBiasLayer::set_input(const QParams& q) {
  input_scale = q.scale.at(0);
  input_zero_point = q.zero_point.at(0);
  input_qmin = q.quant_min;
  input_qmax = q.quant_max;
}

std::map<std::string, StaticBiasLayer> static_bias_layers(
    const Plan& plan,
    const std::function<std::optional<StaticBiasLayer>(const LayerPlan&)>& describe) {
  const AlgorithmPass* pass = find_algorithm("bias_correction");
  std::map<std::string, StaticBiasLayer> out;
  for (const auto& lp : plan.layers)
    if (!pass->on_layer(lp, plan).empty())
      if (auto b = describe(lp)) out.emplace(lp.info.name, std::move(*b));
  return out;
}

std::map<std::string, BiasShift> correct_biases(
    QuantizeContext& ctx, const torch::jit::Module& reference, torch::jit::Module& target,
    CalibrationData& data, const std::map<std::string, StaticBiasLayer>& layers) {
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, Sums> sums = sums_for(reference, target, layers);
  {
    torch::NoGradGuard ng;
    NoGraphOptimization no_opt;
    LayerInputStream stream(reference);
    data.pass([&](const std::vector<at::Tensor>& inputs, bool) {
      stream.run(inputs, [&](const std::string& layer, const at::Tensor& x) {
        auto it = sums.find(layer);
        if (it != sums.end()) it->second.add(x);
      });
    });
  }
  // The held-out batch's layer inputs, before any bias moves (reference
  // and target may be one model).
  const LayerCapture held = capture_layers(reference, data.holdout(), detail::holdout_capture());
  std::map<std::string, BiasShift> out;
  StageResult result;
  for (auto& [name, s] : sums) {
    auto& facts = result.layers[name]["bias_correction"];
    if (s.skipped.empty() && s.count == 0) s.skipped = "the calibration data never reached it";
    if (!s.skipped.empty()) {
      facts = {{"skipped", s.skipped}};
      continue;
    }
    BiasShift b;
    b.target = has_bias(target, name) ? name + ".bias" : s.g.batch_norm_after + ".running_mean";
    const double n = static_cast<double>(s.count);
    b.shift = static_bias_shift(s.g, s.x / n, s.qx / n,
                                find_submodule(reference, name).attr("weight").toTensor().detach(),
                                s.q->weight.detach());
    facts = {{"samples", s.count},
             {"input_quantized", s.q->input_scale > 0},
             {"max_abs_shift", b.shift.abs().max().item<double>()},
             {"mean_abs_shift", b.shift.abs().mean().item<double>()}};
    auto x = held.inputs.find(name);
    if (x != held.inputs.end()) {
      const auto [before, after] = holdout_sqnr(s, reference, name, x->second, b);
      if (!detail::holdout_verdict(facts, before, after, "bias correction")) {
        result.reject("bias_correction", name);
        continue;
      }
    }
    shift_bias(target, b, 1.0);
    facts["applied_to"] = b.target;
    out.emplace(name, std::move(b));
  }
  const double secs = seconds_since(t0);
  for (auto& [name, b] : out)
    result.layers[name]["bias_correction"]["seconds"] = secs / std::max<size_t>(1, out.size());
  ctx.record_algorithms(result);
  return out;
}

}  // namespace tq
