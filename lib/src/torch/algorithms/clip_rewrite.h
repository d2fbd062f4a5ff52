// ReLU6 inside cross-layer equalization: the module that clips between two
// equalized layers gets a per-channel clip (private to equalization.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <map>
#include <string>

namespace tq::detail {

// The module instance (path) whose forward an inlined node came from: the
// instance names of its call stack. "" when unknown.
std::string node_owner(torch::jit::Node* n);

// The per-channel clip `aten::minimum(aten::relu(x), <module>._tq_clip)`
// (what rewrite_clip_modules writes): the minimum node.
bool is_channel_clip(torch::jit::Node* n);

// Whether the module at `path` exists and its forward is one clip of its
// input and nothing else: relu6-like (hardtanh(x, 0, c)), or a per-channel
// clip (relu, then minimum with its `_tq_clip` buffer).
bool is_clip_module(const torch::jit::Module& model, const std::string& path);

// Rewrites the forward of each clip module's type to
// minimum(relu(x), self._tq_clip) and gives every instance of those types a
// `_tq_clip` buffer: the tensor in `clips` (by instance path), else the
// type's clip value. The function is unchanged wherever `clips` holds c.
// A module already in that form only gets its buffer from `clips`.
void rewrite_clip_modules(torch::jit::Module& model,
                          const std::map<std::string, at::Tensor>& clips);

}  // namespace tq::detail
