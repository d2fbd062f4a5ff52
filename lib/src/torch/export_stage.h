// The export stage of a result: the quantization record and the files of
// quantize.export, written under temporary names beside the artifact, then
// published with it (renamed before the report, which lists them with their
// fingerprints) or removed. `quantize` and `tao-quant export` share it.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include "taoquant/json.h"

#include "taoquant/backend.h"
#include "taoquant/export.h"
#include "taoquant/record.h"
#include "taoquant/spec.h"

namespace tq {

// The file the record is published as, in results_dir.
constexpr const char* kRecordFile = "quantization_record.pt";

// When the run read no data, the model's input shape from
// quantize.export.input_shape, else the first batch of the calibration or
// test data (SpecError when none says it and an exporter needs it).
void fill_record_inputs(const Spec& spec, QuantRecord& r, bool needed);
// The record's input shapes and dtypes from a batch.
void record_inputs_from(QuantRecord& r, const std::vector<at::Tensor>& inputs);

// Layers of the plan the backend did not describe: kept float with their
// result's reason, or quantized with no numbers (exporters refuse those).
void complete_record(QuantRecord& r, const std::vector<LayerResult>& results,
                     const std::string& backend);

class StagedExports {
 public:
  StagedExports() = default;
  ~StagedExports();  // removes what was not published
  StagedExports(const StagedExports&) = delete;
  StagedExports& operator=(const StagedExports&) = delete;

  // Writes the exports (when `exporters` is not empty) and, when `record`
  // is set, the record itself.
  void write(const std::vector<const ExporterInfo*>& exporters, const ExportJob& job,
             const std::string& dir, bool write_record);
  // The report's entries: `exports` (when any) and `record`.
  void add_to_report(nlohmann::json& report, const ExportSettings& settings) const;
  // Renames every file into place (before the report is renamed).
  void publish();
  const std::vector<ExportedFile>& files() const { return files_; }

 private:
  std::vector<ExportedFile> files_;
  std::string record_path_, record_partial_;
  bool published_ = false;
};

}  // namespace tq
