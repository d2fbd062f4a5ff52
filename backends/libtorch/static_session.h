// The calibrated state of the libtorch backend's static PTQ, private to
// backends/libtorch/: calibrate_static makes it, convert_static consumes it,
// and record_static describes the result in the neutral record.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/steps.h"
#include "taoquant/weight_algorithms.h"

namespace tq::libtorch {

// How many leading samples of a layer's held-out input its per-layer SQNR
// is measured on (static_ptq.cpp).
int64_t sqnr_sample_count(const at::Tensor& x, const at::Tensor& w);

struct StaticSession {
  std::unique_ptr<ObserverTable> table;
  torch::jit::Module folded;    // BN-folded, specialized float model
  torch::jit::Module observed;  // folded + observers
  ObservedLinears linears;      // observed's graph read, set with it (observe_and_run)
  std::vector<at::Tensor> holdout;
  std::unique_ptr<StepTimer> steps;  // calibrate() through convert()
  bool check_speed = true;           // backend_kwargs.latency_check
  bool reduce_range = false;         // 7-bit activations (engine.cpp)
  std::vector<int64_t> latency_batch_sizes = {1, 32};
  std::set<std::string> keep_float;  // layers kept float by the speed check
  // Modules whose layers are all float, run float whole (static_ptq.cpp).
  std::vector<std::string> float_modules;
  std::map<std::string, std::string> reasons;  // layer -> why it stays float
  CalibrationData* data = nullptr;             // alive from calibrate() through convert()
  std::map<std::string, BiasShift> shifts;     // bias correction, by layer (in `folded`)
  // Each layer's bias (attribute path in `folded`) before bias correction
  // and the accumulator grid moved it: the float model's.
  std::map<std::string, at::Tensor> float_biases;
  // Those of float_biases that are biases of linears no planned layer owns
  // (nn.MultiheadAttention's in_proj_bias), snapped by snap_biases.
  std::set<std::string> unplanned_biases;
  // Each layer's float input and output (leading samples) and the model's
  // float output on the held-out batch: one pass of a tapped copy of
  // `folded`, or of `observed` when the held-out batch is also the only
  // calibration batch (that pass calibrates).
  LayerCapture cap;
  bool captured = false;
  Batch first;                 // the first calibration batch
  bool input_checked = false;  // a pass over `first` succeeded
  CaptureOptions capture_options() const {
    CaptureOptions o;
    o.outputs = true;
    o.samples = [this](const std::string& layer, const at::Tensor& x) {
      try {
        return sqnr_sample_count(x, find_submodule(folded, layer).attr("weight").toTensor());
      } catch (const std::exception&) {
        return x.dim() > 0 ? x.size(0) : int64_t{1};
      }
    };
    return o;
  }
  // The float reference of the fidelity figures, on the held-out batch:
  // convert_static takes it before bias correction and snapping move the
  // folded biases.
  const LayerCapture& capture() {
    if (!captured) {
      cap = capture_layers(folded, holdout, capture_options());
      captured = true;
    }
    return cap;
  }
};

// Each quantized layer's bias on its int32 accumulator's grid (step s_in *
// s_w[c]): LibTorch's kernels add a float bias, the int8 kernels of ONNX
// Runtime and TensorRT an int32 one; on that grid both compute the same
// numbers. Moves a bias by at most half a step of the accumulator, far
// below one step of the output. Keeps the float biases (s.float_biases)
// the first time.
void snap_biases(QuantizeContext& ctx, StaticSession& s);

// The observer of a layer's input (`inputs`: ObservedLinears::layer_inputs), or
// null when it has none.
const ObserverSlot* input_slot(const ObserverTable& t,
                               const std::map<std::string, std::string>& inputs,
                               const std::string& layer);

// Inserts observers for the plan (minus `s.keep_float`) and runs the
// calibration batches: fills s.table, s.observed (static_ptq.cpp).
void observe_and_run(QuantizeContext& ctx, StaticSession& s);

// The observed model -> the int8 module (a shallow copy converts).
torch::jit::Module convert_observed(torch::jit::Module& observed);

// Layers kept float after bias correction and snapping get their float
// bias back (the float model's, s.float_biases), exactly.
void undo_bias_corrections(QuantizeContext& ctx, StaticSession& s);

// With the onednn engine, the int8 layers whose kernel fails when the batch
// size changes in one process stay float (s.keep_float, s.reasons, a
// warning), and the model is observed again without them; the report's
// backend.meta.batch_change says what was run (batch_change.cpp), or,
// where the failure cannot happen, why nothing was (`skipped`).
void keep_batch_change_safe(QuantizeContext& ctx, StaticSession& s);

// The oneDNN LibTorch runs on: version and dnnl_cpu_isa_t (-1: unknown).
struct OnednnRuntime {
  std::array<int, 3> version = {-1, -1, -1};
  int isa = -1;
};
// Why no weight can be reordered when the batch size changes with this
// oneDNN, or "" where it can (or nothing is known): the probe's gate.
std::string batch_change_impossible(const OnednnRuntime& r);

// The batch sizes the never-slower promise covers: each listed size and
// every power of two between two listed ones ([1, 32] -> 1, 2, 4, 8, 16, 32).
std::vector<int64_t> covered_batch_sizes(std::vector<int64_t> listed);

// Never slower than float over the covered batch sizes (never_slower.cpp):
// measures int8 `q` against float; where it is slower, keeps the slower
// layers float, then every layer. Returns the model to ship.
torch::jit::Module never_slower(QuantizeContext& ctx, StaticSession& s, torch::jit::Module q);

// Fidelity on the held-out batch (static_report.cpp): the float model's
// output for publishing to measure the artifact's against
// (ctx.holdout_reference), then each layer's result, into ctx.
void report_static(QuantizeContext& ctx, StaticSession& s);

// The session's result in the neutral record (record.h): the observed
// model with its marks, each observer's range, each layer's int8 weight
// codes and input range, and the layers kept float; `float_artifact`: the
// artifact is the float model (every layer kept float).
void record_static(QuantizeContext& ctx, StaticSession& s, bool float_artifact);

}  // namespace tq::libtorch
