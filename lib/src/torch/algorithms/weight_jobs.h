// The jobs of the weight-only algorithm stage (private to
// lib/src/torch/algorithms/): one planned layer and what GPTQ and bias
// correction gather and decide for it, shared by the stage
// (weight_algorithms.cpp) and its held-out checks (weight_holdout.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/backend.h"
#include "taoquant/weight_algorithms.h"

namespace tq::detail {

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

// What the layer's result is: GPTQ's rounding (else nearest) and the bias
// shift; facts on the calibration data (GPTQ) and on the held-out batch.
struct Outcome {
  std::shared_ptr<const wformat::QuantizedWeight> rounded;  // set by GPTQ
  at::Tensor bias_shift;                                    // set by bias correction
};

struct Results {
  std::map<std::string, Outcome> outcomes;
  size_t passes = 0, peak = 0;
  std::string pieces_why;                     // sequential: why the model was not cut into pieces
  std::optional<torch::jit::Module> rounded;  // the model with every result in (sequential)
};

// A quantized weight's values as a float tensor shaped like `like`.
at::Tensor values_of(const wformat::QuantizedWeight& q, const at::Tensor& like);

// Where the job's bias shift goes: the layer's bias, else the running mean
// of the BatchNorm that reads its output; and the shift added there.
std::string bias_target(const QuantizeContext& ctx, const Job& j);
void apply_bias_shift(const QuantizeContext& ctx, torch::jit::Module& model, const Job& j,
                      const at::Tensor& shift);

// A copy of the float model whose quantized layers are rounded to nearest,
// but for the GPTQ layers of `jobs`; and a job's result put into such a copy.
torch::jit::Module rounded_shadow(const QuantizeContext& ctx, const std::vector<Job>& jobs);
void apply_outcome(const QuantizeContext& ctx, torch::jit::Module& rounded, const Job& j,
                   const Outcome& o);

// The held-out checks of every job, then the results that pass them into
// the context (weight_holdout.cpp); each job's facts and the refusals go to
// `result`.
void apply_results(QuantizeContext& ctx, CalibrationData& data, std::vector<Job>& jobs, Results& r,
                   bool gptq, bool sequential, StageResult& result);

}  // namespace tq::detail
