// Format `onnx`: the float model tao-quant calibrated, as model_float.onnx.
// It is the user's model up to float rounding, with the function-preserving
// rewrites of the run applied (BatchNorm folded where the backend folds it,
// equalization and SmoothQuant scales), so that the activation ranges of
// ranges.json and calibration.cache hold for it; its marked tensors carry
// the record's names.
#include "onnx/export_onnx.h"

namespace tq::onnx_export {

namespace {

nlohmann::json write(const ExportJob& job, const std::string& path) {
  return onnx_facts(job, write_onnx(job, nullptr, path));
}

ExporterInfo info() {
  ExporterInfo e;
  e.name = "onnx";
  e.description = "the float model as tao-quant calibrated it (ONNX, opset 13-17)";
  e.file_name = "model_float.onnx";
  e.write = write;
  return e;
}

}  // namespace

}  // namespace tq::onnx_export

TAOQUANT_REGISTER_EXPORTER(tq::onnx_export::info);
