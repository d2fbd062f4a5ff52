// Format `onnx_qdq`: the quantized model in Q/DQ form, with exactly the
// numbers of the TorchScript artifact in the form the target runtime takes
// (quantize.export.target): `ort`, ONNX Runtime's int8 kernels (qdq.h);
// `tensorrt`, TensorRT's explicit quantization (qdq_tensorrt.h). Written as
// quantized_model_<backend>.onnx.
#include <memory>

#include "onnx/export_onnx.h"
#include "onnx/qdq.h"
#include "onnx/qdq_tensorrt.h"
#include "taoquant/error.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

namespace {

// A quantized layer the backend left without numbers cannot be written.
void require_numbers(const QuantRecord& r) {
  for (const auto& l : r.layers)
    if (l.quantized && l.weight < 0 && l.input < 0 && !l.dynamic_input)
      throw RuntimeError("ONNX export: backend '" + r.backend + "' quantized layer '" + l.name +
                         "' but did not record its numbers (record.h): its Q/DQ form cannot be "
                         "written; the float model (format onnx) can");
}

nlohmann::json write(const ExportJob& job, const std::string& path) {
  require_numbers(job.record);
  const bool trt = job.settings.target == "tensorrt";
  std::unique_ptr<QdqPolicy> policy =
      trt ? std::make_unique<TensorRtQdqPolicy>() : std::make_unique<QdqPolicy>();
  const OnnxWritten w = write_onnx(job, policy.get(), path);
  nlohmann::json j = onnx_facts(job, w);
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& l : job.record.layers)
    if (!l.quantized) kept.push_back({{"layer", l.name}, {"reason", l.reason}});
  j["target"] = job.settings.target;
  j["quantized_layers"] = job.record.quantized_layers();
  j["weights_quantized"] = policy->weights_written();
  j["activation_qdq_pairs"] = policy->activations_written();
  j["float_layers"] = kept;
  j["notes"] = job.record.notes;
  if (trt) j["requantized_weights"] = static_cast<TensorRtQdqPolicy&>(*policy).weight_facts();
  return j;
}

ExporterInfo info() {
  ExporterInfo e;
  e.name = "onnx_qdq";
  e.description =
      "the quantized model as Q/DQ ONNX, in the form quantize.export.target runs in int8 (ONNX "
      "Runtime, or TensorRT's explicit quantization)";
  e.file_name = "quantized_model_{backend}.onnx";
  e.write = write;
  return e;
}

}  // namespace

}  // namespace tq::onnx_export

TAOQUANT_REGISTER_EXPORTER(tq::onnx_export::info);
