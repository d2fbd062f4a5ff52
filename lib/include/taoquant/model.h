// Loading TorchScript models and walking their module tree.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "taoquant/error.h"
#include "taoquant/plan.h"

namespace torch::jit {
struct Module;
}

namespace tq {

// Loads a TorchScript archive on the CPU. A missing, truncated or
// non-TorchScript file is a RuntimeError (exit code 1) naming the file and
// the spec key it came from; `verbose` keeps LibTorch's full message.
// The first call also sets OpenBLAS to one thread per caller unless
// OPENBLAS_NUM_THREADS is set, as the CLI's launcher does: a library user
// gets the CLI's bytes.
torch::jit::Module load_model(const std::string& path, const SourceLoc& from, bool verbose = false);

// The quantizable layers (Linear, Conv1d/2d/3d, ConvTranspose1d/2d/3d), in
// module-tree order.
std::vector<LayerInfo> discover_layers(const torch::jit::Module& model);

// The submodule at a dotted path ("layer1.0.conv1"); throws if absent.
torch::jit::Module find_submodule(const torch::jit::Module& model, const std::string& dotted);

// "Conv2d" for "__torch__.torch.nn.modules.conv.___torch_mangle_3.Conv2d".
std::string module_class_name(const torch::jit::Module& m);

// The type `forward` returns, as its TorchScript schema names it
// ("__torch__.torchvision.models.googlenet.GoogLeNetOutputs", "Tensor",
// "Dict[str, Tensor]"), without LibTorch's ___torch_mangle_N name parts.
std::string forward_return_type(const torch::jit::Module& m);

// Loads a written artifact as plain LibTorch or PyTorch would, compiling its
// code, and checks that its forward returns `expected` (the float model's
// forward_return_type). Otherwise a RuntimeError naming the artifact and the
// backend: an artifact that cannot run where the float model runs is never
// published.
void check_artifact_loads(const std::string& path, const std::string& expected,
                          const std::string& backend);
// The same, returning the loaded module.
torch::jit::Module load_artifact_checked(const std::string& path, const std::string& expected,
                                         const std::string& backend);

// The last check before a result is published: every floating tensor the
// artifact holds (parameters, buffers, attributes, the weights and scales
// of packed int8 params, quantized tensors' scales) is finite, and so is
// its output on `holdout` (the held-out calibration batch; skipped when
// empty). Otherwise the file is removed and a RuntimeError (exit 1) names
// the tensor or the output and the value ("... 'seq.fc2.bias' holds NaN;
// it was not published"). A fresh load of it must also run batch 1, the
// held-out batch's size, then batch 1 again, in one process, as a
// deployment does ("... fails when the batch size changes ...").
void check_artifact_finite(const std::string& path, const std::vector<at::Tensor>& holdout,
                           const std::string& backend);

// Routes LibTorch's warnings (a model's own torch.warn, once per forward:
// scripted GoogLeNet warns on every call) to the log, each distinct message
// once per process. For the whole process; the CLI calls it at start.
void log_torch_warnings_once();

// Total bytes of parameters and buffers.
size_t model_tensor_bytes(const torch::jit::Module& model);

// Writes `data` to `path` through a temporary file in the same directory and a
// rename, creating parent directories. Never leaves a half-written file.
void write_file_atomic(const std::string& path, const std::string& data);

// Saves a module (with extra files, moved into the archive) atomically.
void save_module_atomic(const torch::jit::Module& model, const std::string& path,
                        std::map<std::string, std::string> extra_files);

}  // namespace tq
