// The neutral quantization record: what a run computed, in terms that any
// runtime understands, with no backend's own structures in it. Every backend
// and mode fills one (QuantizeContext::record()); the report's per-layer
// quantization facts and every exporter (export.h) read it, never a
// backend's session. It is published with the result
// (`quantization_record.pt`), so that `tao-quant export` can export a result
// later without quantizing again.
//
// The record holds:
//  - `model`: the float model as the backend computed with it (BatchNorm
//    folded where the backend folds it, equalization, SmoothQuant/AWQ scales
//    and bias corrections applied, branches specialized), whose forward calls
//    `taoquant::observe(x, mark)` on each activation value the backend
//    quantizes (an inline call, or an observer module whose forward makes it);
//  - `tensors`: each quantized tensor (a layer's weight, with its stored
//    integer codes, or an activation value, by its mark), with dtype,
//    granularity, axis, scales, zero points and clip range;
//  - `layers`: each planned layer, quantized (its weight and input tensors)
//    or kept float with the reason.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/enums.h"

namespace at {
class Tensor;
}
namespace torch::jit {
struct Module;
}

namespace tq {

struct QParams;
class QuantizeContext;
struct LayerPlan;
namespace wformat {
struct QuantizedWeight;
}

struct QuantTensor {
  enum class Role { kWeight, kActivation };
  Role role = Role::kActivation;
  std::string name;   // stable and readable: "features.3.conv.weight", "features.3.conv.input"
  std::string layer;  // the layer whose weight or input it is ("" for none)
  DType dtype = DType::kUInt8;
  Granularity granularity = Granularity::kPerTensor;
  int axis = 0;
  int64_t group_size = 0;  // per_group: elements of a row (dim 0) per scale
  std::vector<float> scale;
  std::vector<int32_t> zero_point;  // one per scale (0 when symmetric)
  int64_t quant_min = 0, quant_max = 255;
  double min = 0, max = 0;            // observed range (activations)
  double clip_min = 0, clip_max = 0;  // the range the grid covers
  std::string observer;
  // Weights: the shape and the stored codes, one per element in row-major
  // order, as integers of `dtype` (int8/int4 two's complement in a byte;
  // fp8: the fp8 bit pattern). Value = (code - zero_point) * scale.
  std::vector<int64_t> shape;
  std::vector<uint8_t> codes;
  // The `taoquant::observe(x, mark)` call of model's forward this tensor
  // quantizes: an activation's range, or a constant's (a LayerNorm's
  // weight); -1 for a layer's weight, which the layer reads.
  int64_t mark = -1;

  double amax() const;             // max(|clip_min|, |clip_max|)
  QParams qparams() const;         // scale, zero point, range and grid as QParams
  int64_t channels() const;        // number of scales
  int32_t code(size_t i) const;    // codes[i] as a signed or unsigned integer of dtype
  nlohmann::json to_json() const;  // everything but the codes
};

struct LayerRecord {
  std::string name;
  bool quantized = false;
  std::string reason;          // why it stays float
  int weight = -1;             // index into tensors
  int input = -1;              // index into tensors: the range that quantizes its input (static)
  bool dynamic_input = false;  // input quantized at run time (dynamic PTQ)
};

struct QuantRecord {
  Mode mode = Mode::kWeightOnly;
  std::string backend;  // the resolved backend that made it
  std::shared_ptr<torch::jit::Module> model;
  std::vector<QuantTensor> tensors;
  std::vector<LayerRecord> layers;
  // What an exporter must know that the numbers do not say
  // ("activations simulated: no int8 kernel runs them").
  std::vector<std::string> notes;
  // The model's inputs as calibration saw them (the first batch): shapes
  // (dim 0 the batch) and dtypes ("Float"); empty when the run read no data.
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<std::string> input_dtypes;
  // Parameters of `model` the run moved away from float (a bias corrected,
  // or put on its int32 accumulator's grid), by attribute path
  // ("features.0.bias"): their float values, for the float model.
  std::map<std::string, std::vector<float>> float_values;

  LayerRecord& layer(const std::string& name);  // added when absent
  const LayerRecord* find_layer(const std::string& name) const;
  const QuantTensor* find_mark(int64_t mark) const;
  const QuantTensor* weight_of(const std::string& layer) const;
  const QuantTensor* input_of(const std::string& layer) const;
  size_t quantized_layers() const;
  // Everything but the model and the codes (the report's `record`).
  nlohmann::json to_json() const;
};

// ---- Filling the record (backends) ----------------------------------------

// The model whose forward carries the marks (see above); a shallow clone is
// kept, so the backend may go on changing its own module.
void record_model(QuantizeContext& ctx, const torch::jit::Module& model);
// A quantized layer's weight, from the stored result of weight quantization.
void record_weight(QuantizeContext& ctx, const LayerPlan& lp, const wformat::QuantizedWeight& q);
// A quantized layer's weight from float values and integer qparams: the
// codes are those LibTorch's quantize_per_tensor/per_channel store.
void record_weight(QuantizeContext& ctx, const std::string& layer, const at::Tensor& w,
                   const QParams& q);
// An activation range, quantizing the value marked `mark` (and the input of
// `layer`, when not empty). Returns its index.
int record_activation(QuantizeContext& ctx, int64_t mark, const std::string& layer,
                      const QParams& q, const std::string& observer);
void record_float(QuantizeContext& ctx, const std::string& layer, const std::string& reason);
// A constant the backend quantizes that is no layer's weight (a LayerNorm's
// weight or bias, as LibTorch quantizes them), read through the mark `mark`.
void record_constant(QuantizeContext& ctx, int64_t mark, const std::string& name,
                     const std::string& module, const at::Tensor& value, const QParams& q);

// ---- On disk ---------------------------------------------------------------

// Saves the record as a TorchScript archive (the model, with the record as
// extra files) at `path`; load_record reads it back (RuntimeError naming the
// file when it is not a record of this version).
void save_record(const QuantRecord& r, const std::string& path);
QuantRecord load_record(const std::string& path);

}  // namespace tq
