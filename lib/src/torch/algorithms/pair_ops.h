// What cross-layer equalization, SmoothQuant and AWQ share (private to
// lib/src/torch/algorithms/): the forward graph they read, and the scaling
// of the channels between a layer and the op it feeds.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <memory>
#include <vector>

#include "taoquant/calibration.h"
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

}  // namespace tq::detail
