// The quantization simulator behind sensitivity and tune: a private copy of
// the float model in which any layer can be given any candidate weight
// format (its weight replaced by the format's rounded values) and, in
// static and dynamic modes, a quantize-dequantize of its input (static:
// qparams from the planned observer over the calibration data; dynamic:
// the range of each call). One forward pass then shows what a whole
// assignment of formats does to the model's output. Not installed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "taoquant/backend.h"
#include "taoquant/observer.h"
#include "taoquant/plan.h"

namespace tq {
class CalibrationData;
}

namespace tq::tune {

// One layer the simulator can change.
struct SimLayer {
  std::string name;
  LayerKind kind = LayerKind::kLinear;
  size_t weight_params = 0;
  std::vector<DType> formats;  // candidate weight formats this layer may take (no native)
  DType planned = DType::kNative;
};

// A format per layer name; a layer not named stays float.
using Assignment = std::map<std::string, DType>;

// Static mode: a layer's input quantization as a quantize run chose it (its
// record's range), by layer name.
using InputRanges = std::map<std::string, QParams>;

class Simulator {
 public:
  // `candidates`: the weight formats to consider (native excluded); each
  // layer gets those its backend supports for its kind in the plan's mode
  // (`backend`: the backend's capabilities in that mode; static mode folds
  // BatchNorm first where the backend does).
  // Static mode: inputs are left alone until quantize_inputs. The
  // simulator changes `float_model`'s weights and taps its graph: it must
  // be a module of its own (a fresh load, or a clone()).
  Simulator(const Plan& plan, torch::jit::Module float_model, const std::vector<DType>& candidates,
            const ModeCaps& backend);
  // Static mode: each layer's input qparams, from `known` where it names
  // the layer, else from the planned observer over the calibration data
  // (`calib()` is called, once, only when some layer needs it; null: those
  // layers' inputs stay float). Returns how many layers were observed.
  size_t quantize_inputs(const InputRanges& known, const std::function<CalibrationData*()>& calib);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  const std::vector<SimLayer>& layers() const { return layers_; }
  // The conv/linear calls of the model that no planned layer owns (by their
  // weight's attribute path: nn.MultiheadAttention's in_proj_weight), first
  // call each. The simulation runs them float; a backend may quantize them
  // (ModeCaps::quantizes_unowned_calls).
  const std::vector<std::string>& outside_plan() const { return outside_plan_; }
  // Applies an assignment (every other layer float).
  void assign(const Assignment& a);
  // The model's output (logits) on `inputs` under the current assignment.
  at::Tensor run(const std::vector<at::Tensor>& inputs);

  struct Impl;

 private:
  std::vector<SimLayer> layers_;
  std::vector<std::string> outside_plan_;
  std::unique_ptr<Impl> impl_;
};

// The candidate weight setting of a layer in `format`: its planned setting
// with that dtype (per-channel where the dtype has no such granularity).
TensorQuant weight_setting(const LayerPlan& lp, DType format);

// Storage bits per weight element of a format (native: 32).
int format_bits(DType d);

// The effective bits of an assignment, as ModelOpt's auto_quantize counts
// them: weight bits summed over every simulated layer (float ones at 32)
// divided by their weight count.
double effective_bits(const std::vector<SimLayer>& layers, const Assignment& a);

}  // namespace tq::tune
