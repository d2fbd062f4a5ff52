#include "qdq_tensorrt.h"

#include <algorithm>
#include <cmath>

#include "taoquant/sqnr.h"

namespace tq::onnx_export {

QuantTensor TensorRtQdqPolicy::symmetric(const QuantTensor& t) {
  QuantTensor s = t;
  const double amax = t.amax() > 0 ? t.amax() : 1.0;
  s.dtype = DType::kInt8;
  s.granularity = Granularity::kPerTensor;
  s.scale = {static_cast<float>(amax / 127.0)};
  s.zero_point = {0};
  s.quant_min = -128;
  s.quant_max = 127;
  return s;
}

QuantTensor TensorRtQdqPolicy::requantized(const QuantTensor& t, double& sqnr_db) {
  QuantTensor r = t;
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t n = static_cast<int64_t>(t.codes.size()), per = rows > 0 ? n / rows : 0;
  // The record's values: (code - zero point) * scale of each element's slice.
  auto slice_of = [&](int64_t i) -> size_t {
    if (t.scale.size() == 1) return 0;
    if (t.granularity == Granularity::kPerGroup)
      return static_cast<size_t>((i / per) * ((per + t.group_size - 1) / t.group_size) +
                                 (i % per) / t.group_size);
    // per channel on `axis`: the index along that axis
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(t.axis) + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
    return static_cast<size_t>((i / inner) % t.shape[static_cast<size_t>(t.axis)]);
  };
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t s = slice_of(i);
    const int32_t zp = s < t.zero_point.size() ? t.zero_point[s] : 0;
    values[static_cast<size_t>(i)] = (t.code(static_cast<size_t>(i)) - zp) * double(t.scale[s]);
  }
  r.dtype = DType::kInt8;
  r.granularity = Granularity::kPerChannel;
  r.axis = 0;
  r.group_size = 0;
  r.quant_min = -127;
  r.quant_max = 127;
  r.scale.assign(static_cast<size_t>(rows), 1.0f);
  r.zero_point.assign(static_cast<size_t>(rows), 0);
  SqnrEnergy e;
  for (int64_t row = 0; row < rows; ++row) {
    double amax = 0;
    for (int64_t i = row * per; i < (row + 1) * per; ++i)
      amax = std::max(amax, std::abs(values[static_cast<size_t>(i)]));
    const float s = amax > 0 ? static_cast<float>(amax / 127.0) : 1.0f;
    r.scale[static_cast<size_t>(row)] = s;
    for (int64_t i = row * per; i < (row + 1) * per; ++i) {
      const double v = values[static_cast<size_t>(i)];
      const double q = std::max(-127.0, std::min(127.0, std::nearbyint(v / s)));
      r.codes[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<int8_t>(q));
      e.add(v, q * s);
    }
  }
  sqnr_db = e.db();
  return r;
}

std::string TensorRtQdqPolicy::qdq_of(Converter& c, const std::string& x, const QuantTensor& t) {
  auto it = done_.find(x);
  if (it != done_.end()) return it->second;
  return done_[x] = QdqPolicy::qdq(c, x, t);
}

std::string TensorRtQdqPolicy::mark(Converter& c, const std::string& x, int64_t mark) {
  const std::string name = QuantPolicy::mark(c, x, mark);  // the record's name; no Q/DQ here
  if (layer_outputs_.count(x)) layer_outputs_.insert(name);
  const QuantTensor* t = c.record() ? c.record()->find_mark(mark) : nullptr;
  if (t && !t->scale.empty()) pending_.emplace(name, symmetric(*t));
  return name;
}

std::string TensorRtQdqPolicy::layer_input(Converter& c, const std::string& layer,
                                           const std::string& x) {
  if (auto it = pending_.find(x); it != pending_.end()) return qdq_of(c, x, it->second);
  const QuantTensor* t = c.record() ? c.record()->input_of(layer) : nullptr;
  if (!t || t->scale.empty()) return x;
  auto [it, fresh] = pending_.emplace(x, symmetric(*t));
  (void)fresh;
  return qdq_of(c, x, it->second);
}

std::string TensorRtQdqPolicy::weight(Converter& c, const std::string& layer, const at::Tensor& w,
                                      bool transposed) {
  const QuantTensor* t = c.record() ? c.record()->weight_of(layer) : nullptr;
  if (!t) return QuantPolicy::weight(c, layer, w, transposed);
  double sqnr = 0;
  auto [it, fresh] = weights_.emplace(layer, requantized(*t, sqnr));
  if (fresh)
    weight_facts_[layer] = {
        {"from", std::string(to_string(t->dtype)) + "/" + std::string(to_string(t->granularity))},
        {"weight_sqnr_db", std::isfinite(sqnr) ? nlohmann::json(sqnr) : nlohmann::json(nullptr)}};
  return weight_dq(c, it->second, transposed);
}

void TensorRtQdqPolicy::add_inputs(Converter& c, std::string& a, std::string& b) {
  const bool la = layer_outputs_.count(a) > 0, lb = layer_outputs_.count(b) > 0;
  auto quantize = [&](std::string& v) {
    if (auto it = pending_.find(v); it != pending_.end()) v = qdq_of(c, v, it->second);
  };
  if (la && !lb)
    quantize(b);  // the residual beside a conv's output
  else if (lb && !la)
    quantize(a);
  else if (la && lb)
    quantize(b);  // two convs' outputs: the second is the residual
}

}  // namespace tq::onnx_export
