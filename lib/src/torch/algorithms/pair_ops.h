// What cross-layer equalization, SmoothQuant and AWQ share (private to
// lib/src/torch/algorithms/): the forward graph they read, and the scaling
// of the channels between a layer and the op it feeds.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "taoquant/calibration.h"
#include "taoquant/equalization.h"
#include "taoquant/weight_algorithms.h"

namespace tq::detail {

// The model's forward graph as the algorithms read it: calls inlined,
// training flags, structure flags (bool attributes) and constant branches
// folded.
std::shared_ptr<torch::jit::Graph> simplified_forward(const torch::jit::Module& model);

// Uses of `v` other than shape reads (BatchNorm checks input.size()).
std::vector<torch::jit::Use> data_uses(torch::jit::Value* v);

// Divides output channel i of the pair's first layer (its BatchNorm's
// affine when there is one) by s_i and multiplies the second layer's input
// channel i by it. The function is unchanged when no clip lies between them.
void scale_pair(torch::jit::Module& model, const EqualizationPair& p, const at::Tensor& s);

// Replaces a module's tensor attribute, keeping its dtype and requires_grad.
void set_tensor(torch::jit::Module& m, const char* name, const at::Tensor& v);

// Capture options for the held-out batch: at most ~2^17 values of each
// layer's input (an SQNR over that many is stable to ~0.1 dB), at least one
// sample.
CaptureOptions holdout_capture();

// 10 log10(signal / noise); +inf when noise is 0.
inline double energy_db(double signal, double noise) {
  return noise <= 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(signal / noise);
}

// An algorithm's own held-out check (issue 30): the layer's output SQNR on
// the held-out batch without it (`before`) and with it (`after`), recorded
// in `facts` as holdout_output_sqnr_db {before, after}. An algorithm that
// did not keep the SQNR at least as good (or made it NaN) is not applied to
// the layer: `facts["rejected"]` says why, and the result is false (the
// caller adds the layer to its StageResult's refusals).
bool holdout_verdict(nlohmann::json& facts, double before, double after, const char* algorithm);

// Greedy passes over the data: consecutive jobs whose statistics
// (job.bytes()) together fit the budget; a job larger than it gets a pass alone.
template <typename Job>
std::vector<std::vector<Job*>> passes_within(std::vector<Job>& jobs, size_t budget) {
  std::vector<std::vector<Job*>> passes(1);
  size_t used = 0;
  for (auto& j : jobs) {
    if (!passes.back().empty() && used + j.bytes() > budget) {
      passes.emplace_back();
      used = 0;
    }
    passes.back().push_back(&j);
    used += j.bytes();
  }
  return passes;
}

}  // namespace tq::detail
