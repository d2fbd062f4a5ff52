// What the pipeline checks on a saved artifact before it publishes it,
// beyond check_artifact_finite (taoquant/model.h).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tq {

// A deployment changes the batch size in one process: a fresh load of the
// artifact at two or more threads runs batch 1, the held-out batch's size,
// then batch 1 again. LibTorch 1.13's onednn int8 convolutions fail a weight
// reorder there on some models (MobileNetV2: "could not create a primitive
// descriptor for a reorder primitive" on every change between batch 1 and
// more, at 2 threads; never at 1 thread or with qnnpack; fixed upstream in
// PyTorch #86876). Returns what failed ("fails when the batch size changes
// (...): <the error>"), or "" when it runs, or when the model does not take
// batch 1 at all (a fixed batch size: nothing changes in deployment).
std::string batch_change_problem(const std::string& path, const std::vector<at::Tensor>& holdout);

// Publishing's form of batch_change_problem: a failure removes the artifact
// at `path` and throws RuntimeError (exit 1) with what failed, the
// artifact's code line that failed, and what to do.
void check_batch_change(const std::string& path, const std::vector<at::Tensor>& holdout,
                        const std::string& backend);

// Everything publishing checks on a saved artifact, on one fresh load:
// check_artifact_loads, batch_change_problem (its batch 1, held-out size, 1
// sequence runs first, on the fresh module) and check_artifact_finite (the
// output is the held-out batch's from that sequence). On a failure the file
// is removed and a RuntimeError (exit 1) says why, the first of: does not
// load or returns another type; a non-finite tensor; a non-finite output;
// fails when the batch size changes. Returns the held-out batch's output
// when it is a tensor (else an undefined tensor).
at::Tensor check_saved_artifact(const std::string& path, const std::string& return_type,
                                const std::vector<at::Tensor>& holdout, const std::string& backend);

}  // namespace tq
