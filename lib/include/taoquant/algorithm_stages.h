// The library's algorithm stages: the pass table's stage column
// (taoquant/algorithms.h) names a row here. Each stage runs once per
// quantize, on the float model before the backend gets it, in this table's
// order, when one of its passes is on for the model or changes a layer.
// Static bias correction is the backend's (a stage of "").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "taoquant/algorithms.h"
#include "taoquant/stage_result.h"

namespace torch::jit {
struct Module;
}

namespace tq {

class CalibrationData;
class QuantizeContext;

struct AlgorithmStage {
  std::string name;  // what the pass table's stage column says
  std::string what;  // in errors: "backend 'x' failed in <what>: ..."
  // Before any work (inspect shows it): which layers it changes, set on the
  // plan's layers (LayerPlan::equalized_with, smoothed_by), with warnings.
  // Empty when the plan says enough.
  std::function<void(Plan& plan, const torch::jit::Module& model)> plan;
  // Runs it on ctx.model. `data` is the calibration data when one of its
  // passes needs data, else null. Returns what it did (the pipeline times
  // it, records it in ctx and puts its counts in the report's
  // calibration.algorithms.<name>).
  std::function<StageResult(QuantizeContext& ctx, CalibrationData* data)> run;
};

const std::vector<AlgorithmStage>& algorithm_stages();

// Adds a stage for the scope's life (tests; a plugin's pass), after the
// built-in ones.
class ScopedAlgorithmStage {
 public:
  explicit ScopedAlgorithmStage(AlgorithmStage stage);
  ~ScopedAlgorithmStage();
  ScopedAlgorithmStage(const ScopedAlgorithmStage&) = delete;
  ScopedAlgorithmStage& operator=(const ScopedAlgorithmStage&) = delete;

 private:
  std::string name_;
};

// Whether a pass of `stage` (in the plan's mode) changes `layer`: what a
// stage's run selects its layers by.
bool stage_changes_layer(const std::string& stage, const LayerPlan& layer, const Plan& plan);

// Each stage's plan step, for the passes that are on.
void plan_algorithm_stages(Plan& plan, const torch::jit::Module& model);

// The stages that run for a plan, in order, and whether each reads data.
struct ScheduledStage {
  const AlgorithmStage* stage;
  bool needs_data;
};
std::vector<ScheduledStage> scheduled_stages(const Plan& plan);

}  // namespace tq
