// SmoothQuant (Xiao et al. 2022, "SmoothQuant: Accurate and Efficient
// Post-Training Quantization for Large Language Models", sec. 4): the
// per-input-channel scale that moves a Linear input's outlier channels into
// the weights, s_j = max|X_j|^alpha / max|W_j|^(1 - alpha). The input is
// divided by s (folded into the op before, smoothing.cpp) and the weight's
// column j multiplied by it, so X W^T is unchanged and both are easier to
// quantize per tensor.
#include <ATen/ATen.h>

#include "taoquant/smoothing.h"
#include "taoquant/weight_algorithms.h"

namespace tq {

at::Tensor smoothquant_scales(const at::Tensor& input_absmax,
                              const std::vector<at::Tensor>& weights, double alpha) {
  // max over the consumers' rows of |W[:, j]|: they all read the same input.
  at::Tensor w_absmax = at::zeros_like(input_absmax, at::kDouble);
  for (const auto& w : weights)
    w_absmax = at::maximum(w_absmax, w.detach().to(at::kDouble).abs().amax(0));
  const at::Tensor x = input_absmax.to(at::kDouble);
  at::Tensor s = x.pow(alpha) / w_absmax.pow(1.0 - alpha);
  return at::where((x > 0) & (w_absmax > 0) & s.isfinite(), s, at::ones_like(s));
}

}  // namespace tq
