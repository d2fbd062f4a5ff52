// Compact weight storage inside a TorchScript artifact: codes, scales and a
// lookup table are saved instead of the float weight, and TorchScript
// `__setstate__` code in the artifact decodes them once, at load. Plain
// `torch.jit.load` runs the result; no tao-quant library is needed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "taoquant/formats.h"

namespace torch::jit {
struct Module;
}

namespace tq::libtorch {

// Why a layer cannot carry compact weights ("" when it can): its module type
// must be a leaf with no custom __getstate__.
std::string compact_blocker(const torch::jit::Module& model, const std::string& layer_name);

// Installs compact storage for one layer and sets its in-memory weight to
// the decoded values, so the model in memory equals the artifact after load.
// Returns the bytes stored for it.
size_t install_compact_weight(torch::jit::Module& model, const std::string& layer_name,
                              const wformat::QuantizedWeight& q);

}  // namespace tq::libtorch
