#include "export_onnx.h"

#include <torch/script.h>

#include "taoquant/error.h"
#include "taoquant/model.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

namespace {

c10::ScalarType scalar_type(const std::string& name) {
  for (auto t : {c10::kFloat, c10::kDouble, c10::kHalf, c10::kLong, c10::kInt, c10::kByte,
                 c10::kChar, c10::kBool})
    if (name == c10::toString(t)) return t;
  throw RuntimeError("ONNX export: input dtype '" + name + "' is not supported");
}

}  // namespace

OnnxWritten write_onnx(const ExportJob& job, QuantPolicy* policy, const std::string& path) {
  const QuantRecord& r = job.record;
  if (!r.model) throw RuntimeError("ONNX export: the quantization record has no model");
  if (r.input_shapes.empty())
    throw RuntimeError(
        "ONNX export: the model's input shape is unknown (the run read no data); set "
        "quantize.export.input_shape (one sample's shape) or dataset.quant_calibration_dataset");
  std::vector<c10::ScalarType> dtypes;
  for (const auto& d : r.input_dtypes) dtypes.push_back(scalar_type(d));
  OnnxWritten w;
  ConvertOptions o;
  o.opset = job.settings.opset;
  o.record = &r;
  o.policy = policy;
  o.mark_names = &w.tensor_names;
  w.converted = convert(*r.model, r.input_shapes, dtypes, o);
  write_file_atomic(path, w.converted.bytes);
  return w;
}

nlohmann::json onnx_facts(const ExportJob& job, const OnnxWritten& w) {
  std::map<std::string, int> ops;
  for (const auto& t : w.converted.op_types) ++ops[t];
  return {{"opset", job.settings.opset},
          {"inputs", w.converted.inputs},
          {"outputs", w.converted.outputs},
          {"nodes", w.converted.op_types.size()},
          {"ops", ops},
          {"tensor_names", w.tensor_names}};
}

}  // namespace tq::onnx_export
