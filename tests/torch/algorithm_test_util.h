// What the algorithm tests share: temporary folders, the Python references
// (tests/data/make_algorithm_refs.py) and top-1 on the Fashion-MNIST test set.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "taoquant/json.h"

#include "taoquant/pipeline.h"
#include "taoquant/weight_algorithms.h"

namespace tq::test {

// A fresh folder under the temporary directory, unique to this process.
std::string alg_tmpdir(const std::string& name);

// The references, made once per test run by the Python script, and the
// folder it writes them to (with the models they were computed on).
const nlohmann::json& algorithm_refs();
const std::string& algorithm_refs_dir();

// The geometry of a reference's 2-D conv (kernel, stride, padding,
// dilation, groups keys of make_algorithm_refs.py's entries).
LayerGeometry conv2d_geometry_of(const nlohmann::json& r);

// A nested JSON list of numbers as a float64 tensor.
at::Tensor tensor_of(const nlohmann::json& j);

// Top-1 (%) of a model or artifact over the 10k Fashion-MNIST test images,
// run by plain LibTorch.
double fmnist_top1(const std::string& path);

// Share (%) of the 10k test images whose argmax from `artifact` is the
// float model's. Close to float, top-1 moves by a few images either way;
// this says which of two artifacts is closer to the model they quantize.
double fmnist_agreement(const std::string& float_model, const std::string& artifact);

// The images of the 10k test set that exactly one of two artifacts gets
// right: `only_a` of them A gets right, `only_b` B.
struct PairedFlips {
  int64_t only_a = 0, only_b = 0;
  // Whether B is worse than A beyond the noise of paired flips: a one-sided
  // sign test at about the 2.5 % level (B's deficit above twice its standard
  // deviation under "A and B are as good", sqrt(only_a + only_b)). Close to
  // float, top-1 moves by a few images either way with every training run;
  // a method that really loses accuracy loses many more.
  bool b_worse() const;
};
PairedFlips fmnist_paired_flips(const std::string& a, const std::string& b);

// `model` quantized weight-only int4 per-channel (libtorch) into `dir`, with
// the Fashion-MNIST calibration images and `extra` lines of the quantize:
// section ("  weight_rounding: gptq\n"). Returns run_quantize's outcome.
QuantizeOutcome fmnist_int4(const std::string& model, const std::string& dir,
                            const std::string& extra);

}  // namespace tq::test
