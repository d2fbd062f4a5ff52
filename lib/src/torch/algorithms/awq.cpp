// AWQ (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization for LLM
// Compression and Acceleration", sec. 3.2): a per-input-channel scale
// s = m^a, with m the input's mean magnitude per channel, searched over a
// grid of a in [0, 1). Weight column j is multiplied by s_j before it is
// quantized and the input divided by it (folded into the op before,
// smoothing.cpp): channels that carry large activations get finer steps.
// The loss of each a is the layer's output error on the calibration
// inputs, computed exactly from their second moment H = sum x x^T:
// ||X E^T||^2 = tr(E H E^T). a = 0 (no scaling) is on the grid, so the
// result never has a larger calibration error than plain rounding.
#include <ATen/ATen.h>

#include <limits>

#include "taoquant/smoothing.h"
#include "taoquant/weight_algorithms.h"

namespace tq {

namespace {

// m^a, normalized so that max(s) min(s) = 1 (the paper's normalization).
at::Tensor awq_scale(const at::Tensor& m, double a) {
  at::Tensor s = m.clamp_min(1e-8).pow(a);
  s = s / (s.max() * s.min()).sqrt();
  return at::where(s.isfinite(), s, at::ones_like(s));
}

// sum_c tr(E_c H E_c^T), E_c = Q_c(W_c diag(s)) diag(s)^-1 - W_c.
double awq_loss(const std::vector<at::Tensor>& weights, const at::Tensor& s, const at::Tensor& h,
                const AwqQuantizeFn& quantize) {
  double loss = 0;
  for (size_t c = 0; c < weights.size(); ++c) {
    const at::Tensor w = weights[c].detach().to(at::kDouble);
    const at::Tensor q = quantize(c, (w * s).to(at::kFloat)).to(at::kDouble);
    const at::Tensor e = q / s - w;
    loss += (at::matmul(e, h) * e).sum().item<double>();
  }
  return loss;
}

}  // namespace

AwqResult awq_search(const std::vector<at::Tensor>& weights, const at::Tensor& mean_abs,
                     const at::Tensor& h, int grid, const AwqQuantizeFn& quantize,
                     const at::Tensor& h_holdout) {
  const at::Tensor m = mean_abs.to(at::kDouble), hd = h.to(at::kDouble);
  AwqResult best;
  double best_loss = std::numeric_limits<double>::infinity();
  for (int i = 0; i < grid; ++i) {
    const double a = static_cast<double>(i) / grid;
    const at::Tensor s = i == 0 ? at::ones_like(m) : awq_scale(m, a);
    const double loss = awq_loss(weights, s, hd, quantize);
    best.loss.push_back(loss);
    if (loss < best_loss) {
      best_loss = loss;
      best.alpha = a;
      best.scale = s;
    }
  }
  if (h_holdout.defined() && best.alpha > 0) {
    const at::Tensor hh = h_holdout.to(at::kDouble);
    best.holdout_loss_nearest = awq_loss(weights, at::ones_like(m), hh, quantize);
    best.holdout_loss = awq_loss(weights, best.scale, hh, quantize);
    if (best.holdout_loss >= best.holdout_loss_nearest) {
      best.rejected_on_holdout = true;
      best.alpha = 0;
      best.scale = at::ones_like(m);
    }
  }
  return best;
}

}  // namespace tq
