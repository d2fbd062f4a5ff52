// Internals of the evaluate job. Not installed.
#pragma once

#include <string>
#include <vector>

#include <torch/script.h>

#include "taoquant/evaluate.h"

namespace tq::eval {

struct LoadedModel {
  ModelResult* result = nullptr;  // where the measurements go
  torch::jit::Module module;
};

// The qengine a tao-quant artifact names in its tao_quant_meta.json
// (backend_meta.engine); "" when it names none or is no artifact.
std::string read_artifact_qengine(const std::string& path);
// Sets LibTorch's quantized engine; RuntimeError when this build lacks it.
void set_qengine(const std::string& engine, const std::string& model_path);

// The logits in a model output: the tensor, or the first tensor of a
// tuple/list/dict (as scripts/eval_torch.py does).
at::Tensor output_tensor(const c10::IValue& out, const std::string& model_path);

// Top-1/top-5 counts.
class AccuracyMeter {
 public:
  void add(const at::Tensor& logits, const at::Tensor& labels);
  size_t correct1 = 0, correct5 = 0, count = 0;
  bool top5 = false;  // set once the class count is known (>= 5)
};

// Quantized vs float outputs, accumulated in double.
class FidelityMeter {
 public:
  void add(const at::Tensor& ref, const at::Tensor& got);
  Fidelity result() const;
  size_t count() const { return samples_; }

 private:
  double cos_sum_ = 0, signal_ = 0, noise_ = 0, abs_sum_ = 0, max_abs_ = 0;
  size_t samples_ = 0, elements_ = 0, agree_ = 0;
};

// Median/p90/mean/min of per-call seconds.
LatencyStats summarize_latency(std::vector<double> seconds, int batch_size);

// Runs every model on `inputs` tiled to each batch size: warm-up, then
// `iters` timed rounds with the models interleaved (order alternating per
// round). Fills each model's result->latency.
void measure_latency(std::vector<LoadedModel*>& models, const std::vector<at::Tensor>& first_batch,
                     const LatencySpec& spec,
                     const std::function<void(const std::string&, size_t, size_t)>& progress);

// Gates that need the float model as a reference / labels.
bool gates_need_reference(const GatesSpec& g);
std::vector<GateResult> check_gates(const GatesSpec& g, const EvaluateOutcome& out);

nlohmann::json make_evaluate_report(const Spec& spec, const EvaluateOutcome& out);

}  // namespace tq::eval
