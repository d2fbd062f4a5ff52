// The neutral quantization record (record.h): what it says of itself, and
// the calls backends fill it with.
#include "taoquant/record.h"

#include <algorithm>
#include <cmath>

#include <torch/script.h>

#include "taoquant/backend.h"
#include "taoquant/formats.h"
#include "taoquant/observer.h"
#include "taoquant/qparams.h"
#include "taoquant/report.h"

// `taoquant::mark(x, id)`: the value x, marked as the quantized value `id`
// of a record (exporters read marks; running the graph passes x through).
TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def("mark(Tensor(a) x, int id) -> Tensor(a)",
        [](const at::Tensor& x, int64_t) -> at::Tensor { return x; });
}

namespace tq {

double QuantTensor::amax() const {
  return std::max(std::abs(clip_min), std::abs(clip_max));
}

int64_t QuantTensor::channels() const {
  return static_cast<int64_t>(scale.size());
}

int32_t QuantTensor::code(size_t i) const {
  const uint8_t c = codes.at(i);
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt4:
      return static_cast<int8_t>(c);
    default:
      return c;
  }
}

namespace {

const char* role_name(QuantTensor::Role r) {
  return r == QuantTensor::Role::kWeight ? "weight" : "activation";
}

// Scales and zero points as the report writes them: all of them for a
// per-tensor range, the range of them for many.
void put_scales(nlohmann::json& j, const QuantTensor& t) {
  if (t.scale.size() == 1) {
    j["scale"] = t.scale[0];
    j["zero_point"] = t.zero_point.empty() ? 0 : t.zero_point[0];
    return;
  }
  if (t.scale.empty()) return;
  const auto [mn, mx] = std::minmax_element(t.scale.begin(), t.scale.end());
  j["scales"] = {{"count", t.scale.size()}, {"min", *mn}, {"max", *mx}};
  const bool zeros =
      std::all_of(t.zero_point.begin(), t.zero_point.end(), [](int32_t z) { return z == 0; });
  j["zero_points"] = zeros ? nlohmann::json("all 0") : nlohmann::json(t.zero_point);
}

// One code byte per element in the weight's own row-major order: int4
// nibbles unpacked (sign kept in the byte), per-group row padding dropped.
std::vector<uint8_t> element_codes(const wformat::QuantizedWeight& q) {
  int64_t n = 1;
  for (int64_t d : q.shape) n *= d;
  const int64_t rows = q.shape.empty() ? 1 : q.shape[0];
  const int64_t cols = rows > 0 ? n / rows : 0;
  const bool grouped = q.format.granularity == Granularity::kPerGroup;
  const int64_t stride = grouped ? q.groups_per_row * q.group_size : cols;
  std::vector<int8_t> nibbles;
  if (q.format.dtype == DType::kInt4) {
    nibbles.resize(static_cast<size_t>(rows * stride));
    wformat::unpack_int4(q.codes.data(), nibbles.size(), nibbles.data());
  }
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const auto src = static_cast<size_t>(r * stride + c);
      out[static_cast<size_t>(r * cols + c)] =
          nibbles.empty() ? q.codes[src] : static_cast<uint8_t>(nibbles[src]);
    }
  return out;
}

}  // namespace

nlohmann::json QuantTensor::to_json() const {
  nlohmann::json j{{"name", name},
                   {"role", role_name(role)},
                   {"layer", layer},
                   {"dtype", to_string(dtype)},
                   {"granularity", to_string(granularity)},
                   {"quant_min", quant_min},
                   {"quant_max", quant_max}};
  if (granularity != Granularity::kPerTensor) j["axis"] = axis;
  if (group_size > 0) j["group_size"] = group_size;
  put_scales(j, *this);
  if (role == Role::kActivation) {
    j["mark"] = mark;
    j["observer"] = observer;
    j["min"] = json_number(min);
    j["max"] = json_number(max);
    j["clip_min"] = json_number(clip_min);
    j["clip_max"] = json_number(clip_max);
    j["amax"] = json_number(amax());
  } else {
    j["shape"] = shape;
  }
  return j;
}

LayerRecord& QuantRecord::layer(const std::string& name) {
  for (auto& l : layers)
    if (l.name == name) return l;
  layers.push_back({});
  layers.back().name = name;
  return layers.back();
}

const LayerRecord* QuantRecord::find_layer(const std::string& name) const {
  for (const auto& l : layers)
    if (l.name == name) return &l;
  return nullptr;
}

const QuantTensor* QuantRecord::find_mark(int64_t mark) const {
  for (const auto& t : tensors)
    if (t.mark == mark && mark >= 0) return &t;
  return nullptr;
}

const QuantTensor* QuantRecord::weight_of(const std::string& layer) const {
  const LayerRecord* l = find_layer(layer);
  return l && l->weight >= 0 ? &tensors.at(static_cast<size_t>(l->weight)) : nullptr;
}

const QuantTensor* QuantRecord::input_of(const std::string& layer) const {
  const LayerRecord* l = find_layer(layer);
  return l && l->input >= 0 ? &tensors.at(static_cast<size_t>(l->input)) : nullptr;
}

size_t QuantRecord::quantized_layers() const {
  return static_cast<size_t>(std::count_if(layers.begin(), layers.end(),
                                           [](const LayerRecord& l) { return l.quantized; }));
}

nlohmann::json QuantRecord::to_json() const {
  nlohmann::json ls = nlohmann::json::array(), ts = nlohmann::json::array();
  for (const auto& t : tensors) ts.push_back(t.to_json());
  for (const auto& l : layers) {
    nlohmann::json j{{"name", l.name}, {"quantized", l.quantized}};
    if (!l.quantized) j["reason"] = l.reason;
    if (l.weight >= 0) j["weight"] = tensors.at(static_cast<size_t>(l.weight)).name;
    if (l.input >= 0) j["input"] = tensors.at(static_cast<size_t>(l.input)).name;
    if (l.dynamic_input) j["input"] = "quantized at run time (dynamic)";
    ls.push_back(std::move(j));
  }
  return {{"mode", to_string(mode)},
          {"backend", backend},
          {"layers", ls},
          {"tensors", ts},
          {"notes", notes}};
}

// ---- Filling -----------------------------------------------------------------

void record_model(QuantizeContext& ctx, const torch::jit::Module& model) {
  ctx.record().model = std::make_shared<torch::jit::Module>(model.clone(/*inplace=*/true));
}

void record_weight(QuantizeContext& ctx, const LayerPlan& lp, const wformat::QuantizedWeight& q) {
  QuantRecord& r = ctx.record();
  QuantTensor t;
  t.role = QuantTensor::Role::kWeight;
  t.name = lp.info.name + ".weight";
  t.layer = lp.info.name;
  t.dtype = q.format.dtype;
  t.granularity = q.format.granularity;
  t.axis = q.format.axis;
  t.group_size = q.group_size;
  t.scale = q.scales;
  for (size_t i = 0; i < q.scales.size(); ++i)
    t.zero_point.push_back(q.zero_points.empty() ? 0 : static_cast<int32_t>(q.zero_points[i]));
  int qmin = 0, qmax = 0;
  if (weight_code_range(q.format, qmin, qmax)) {
    t.quant_min = qmin;
    t.quant_max = qmax;
  }
  t.shape = q.shape;
  t.codes = element_codes(q);
  r.tensors.push_back(std::move(t));
  LayerRecord& l = r.layer(lp.info.name);
  l.quantized = true;
  l.weight = static_cast<int>(r.tensors.size() - 1);
}

QParams QuantTensor::qparams() const {
  QParams q;
  q.dtype = dtype;
  q.per_channel = granularity == Granularity::kPerChannel;
  q.axis = axis;
  q.scale = scale;
  q.zero_point = zero_point;
  q.quant_min = static_cast<int>(quant_min);
  q.quant_max = static_cast<int>(quant_max);
  q.min_val = min;
  q.max_val = max;
  q.clip_min = clip_min;
  q.clip_max = clip_max;
  return q;
}

namespace {

// The quantization parameters of `q` on a recorded tensor.
void set_qparams(QuantTensor& t, const QParams& q) {
  t.dtype = q.dtype;
  t.granularity = q.per_channel ? Granularity::kPerChannel : Granularity::kPerTensor;
  t.axis = q.axis;
  t.scale = q.scale;
  t.zero_point = q.zero_point;
  t.quant_min = q.quant_min;
  t.quant_max = q.quant_max;
}

// A weight's codes as LibTorch's quantize_per_tensor / per_channel store them.
QuantTensor quantized_constant(const std::string& name, const std::string& layer,
                               const at::Tensor& w, const QParams& q) {
  const at::Tensor codes = quantize_codes(w, q);
  QuantTensor t;
  t.role = QuantTensor::Role::kWeight;
  t.name = name;
  t.layer = layer;
  set_qparams(t, q);
  t.shape = w.sizes().vec();
  const auto* p = static_cast<const uint8_t*>(codes.data_ptr());
  t.codes.assign(p, p + codes.numel());
  return t;
}

}  // namespace

void record_weight(QuantizeContext& ctx, const std::string& layer, const at::Tensor& w,
                   const QParams& q) {
  QuantRecord& r = ctx.record();
  r.tensors.push_back(quantized_constant(layer + ".weight", layer, w, q));
  LayerRecord& l = r.layer(layer);
  l.quantized = true;
  l.weight = static_cast<int>(r.tensors.size() - 1);
}

void record_constant(QuantizeContext& ctx, int64_t mark, const std::string& name,
                     const std::string& module, const at::Tensor& value, const QParams& q) {
  QuantTensor t = quantized_constant(name, module, value, q);
  t.mark = mark;
  ctx.record().tensors.push_back(std::move(t));
}

int record_activation(QuantizeContext& ctx, int64_t mark, const std::string& layer,
                      const QParams& q, const std::string& observer) {
  QuantRecord& r = ctx.record();
  QuantTensor t;
  t.role = QuantTensor::Role::kActivation;
  t.mark = mark;
  t.layer = layer;
  set_qparams(t, q);
  t.min = q.min_val;
  t.max = q.max_val;
  t.clip_min = q.clip_min;
  t.clip_max = q.clip_max;
  t.observer = observer;
  r.tensors.push_back(std::move(t));
  const int index = static_cast<int>(r.tensors.size() - 1);
  if (!layer.empty()) r.layer(layer).input = index;
  return index;
}

void record_float(QuantizeContext& ctx, const std::string& layer, const std::string& reason) {
  LayerRecord& l = ctx.record().layer(layer);
  l.quantized = false;
  l.reason = reason;
  l.weight = l.input = -1;
  l.dynamic_input = false;
}

}  // namespace tq
