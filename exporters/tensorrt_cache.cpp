// Format `tensorrt_cache`: calibration.cache for TensorRT's implicit int8
// path with the float model (model_float.onnx, whose tensors carry the
// record's names): a header `TRT-<version>-<calibrator>`, then one line per
// activation the plan quantized, `<tensor>: <8 hex digits>`, the
// big-endian float32 bits of amax / 127.
#include <cstring>
#include <map>

#include "taoquant/error.h"
#include "taoquant/export.h"
#include "taoquant/model.h"
#include "taoquant/record.h"

namespace tq::export_trt {

namespace {

// TensorRT's calibrator names the algorithm: entropy calibration for the
// entropy observer, min-max for minmax and max; the others have no
// calibrator of their own and take EntropyCalibration2, what trtexec reads.
std::string calibrator(const std::string& observer) {
  if (observer == "minmax" || observer == "max") return "MinMaxCalibration";
  return "EntropyCalibration2";
}

std::string hex_bits(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  char out[9];
  std::snprintf(out, sizeof out, "%08x", bits);
  return out;
}

nlohmann::json write(const ExportJob& job, const std::string& path) {
  const nlohmann::json& names = job.earlier.at("onnx").at("tensor_names");
  const std::string header =
      "TRT-" + job.settings.tensorrt_version + "-" + calibrator(job.observer);
  std::string text = header + "\n";
  std::map<std::string, std::string> written;  // ONNX tensor -> record name
  for (const auto& t : job.record.tensors) {
    if (t.role != QuantTensor::Role::kActivation || t.scale.empty()) continue;
    const std::string tensor = names.value(t.name, "");
    if (tensor.empty())
      throw RuntimeError("tensorrt_cache: activation '" + t.name +
                         "' has no tensor in model_float.onnx");
    if (!written.emplace(tensor, t.name).second) continue;  // one line per tensor
    text += tensor + ": " + hex_bits(static_cast<float>(t.amax() / 127.0)) + "\n";
  }
  write_file_atomic(path, text);
  return {{"header", header},
          {"tensors", written.size()},
          {"calibrator", calibrator(job.observer)},
          {"tensorrt_version", job.settings.tensorrt_version},
          {"for", "model_float.onnx"}};
}

ExporterInfo info() {
  ExporterInfo e;
  e.name = "tensorrt_cache";
  e.description = "TensorRT calibration cache (amax / 127 per activation) for model_float.onnx";
  e.file_name = "calibration.cache";
  e.modes = {Mode::kStatic};
  e.needs = {"onnx"};
  e.write = write;
  return e;
}

}  // namespace

}  // namespace tq::export_trt

TAOQUANT_REGISTER_EXPORTER(tq::export_trt::info);
