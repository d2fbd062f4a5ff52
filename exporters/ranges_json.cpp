// Format `ranges_json`: ranges.json, each quantized tensor's numbers for
// tools that set ranges themselves (MQBench's deploy translation): every
// activation by its tensor in model_float.onnx (layer, observed min and
// max, clip range, amax, scale, zero point, dtype), every weight's scales,
// and MQBench's TensorRT form {"tensorrt": {"blob_range": {tensor: amax}}}.
#include "taoquant/error.h"
#include "taoquant/export.h"
#include "taoquant/model.h"
#include "taoquant/record.h"

namespace tq::export_ranges {

namespace {

nlohmann::json weight_entry(const QuantTensor& t) {
  std::vector<double> amax;
  const int32_t lo = static_cast<int32_t>(t.quant_min), hi = static_cast<int32_t>(t.quant_max);
  for (size_t i = 0; i < t.scale.size(); ++i) {
    const int32_t z = i < t.zero_point.size() ? t.zero_point[i] : 0;
    amax.push_back(double(t.scale[i]) * std::max(std::abs(lo - z), std::abs(hi - z)));
  }
  return {{"layer", t.layer},
          {"dtype", to_string(t.dtype)},
          {"granularity", to_string(t.granularity)},
          {"axis", t.axis},
          {"scale", t.scale},
          {"zero_point", t.zero_point},
          {"amax", amax}};
}

nlohmann::json write(const ExportJob& job, const std::string& path) {
  const nlohmann::json& names = job.earlier.at("onnx").at("tensor_names");
  nlohmann::json acts = nlohmann::json::object(), weights = nlohmann::json::object();
  nlohmann::json blob = nlohmann::json::object();
  for (const auto& t : job.record.tensors) {
    if (t.role == QuantTensor::Role::kWeight) {
      weights[t.name] = weight_entry(t);
      continue;
    }
    if (t.scale.empty()) continue;
    const std::string tensor = names.value(t.name, "");
    if (tensor.empty())
      throw RuntimeError("ranges_json: activation '" + t.name +
                         "' has no tensor in model_float.onnx");
    acts[tensor] = {{"name", t.name},
                    {"layer", t.layer},
                    {"min", t.min},
                    {"max", t.max},
                    {"clip_min", t.clip_min},
                    {"clip_max", t.clip_max},
                    {"amax", t.amax()},
                    {"scale", t.scale.at(0)},
                    {"zero_point", t.zero_point.empty() ? 0 : t.zero_point[0]},
                    {"dtype", to_string(t.dtype)},
                    {"observer", t.observer}};
    blob[tensor] = t.amax();
  }
  const nlohmann::json j{{"model", "model_float.onnx"},
                         {"activations", acts},
                         {"weights", weights},
                         {"tensorrt", {{"blob_range", blob}}}};
  write_file_atomic(path, j.dump(2) + "\n");
  return {{"activations", acts.size()}, {"weights", weights.size()}};
}

ExporterInfo info() {
  ExporterInfo e;
  e.name = "ranges_json";
  e.description = "every quantized tensor's range, scale and zero point (MQBench's clip ranges)";
  e.file_name = "ranges.json";
  e.needs = {"onnx"};
  e.write = write;
  return e;
}

}  // namespace

}  // namespace tq::export_ranges

TAOQUANT_REGISTER_EXPORTER(tq::export_ranges::info);
