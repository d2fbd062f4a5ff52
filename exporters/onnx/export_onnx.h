// What the ONNX exporters share: the record's model converted with a
// policy and written to the exporter's path, and the facts every ONNX file
// reports.
#pragma once

#include <map>
#include <string>

#include "taoquant/json.h"

#include "convert.h"
#include "taoquant/export.h"

namespace tq::onnx_export {

struct OnnxWritten {
  Converted converted;
  std::map<std::string, std::string> tensor_names;  // record name -> ONNX value
};

// Converts job.record's model with `policy` (nullptr: float) and writes the
// checked model at `path`.
OnnxWritten write_onnx(const ExportJob& job, QuantPolicy* policy, const std::string& path);

// opset, inputs, outputs, node count and op histogram, tensor names.
nlohmann::json onnx_facts(const ExportJob& job, const OnnxWritten& w);

}  // namespace tq::onnx_export
