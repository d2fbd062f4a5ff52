#include "export_stage.h"

#include <filesystem>

#include <torch/script.h>

#include "taoquant/data.h"
#include "taoquant/result_files.h"

namespace tq {

namespace fs = std::filesystem;

void record_inputs_from(QuantRecord& r, const std::vector<at::Tensor>& inputs) {
  r.input_shapes.clear();
  r.input_dtypes.clear();
  for (const auto& t : inputs) {
    r.input_shapes.push_back(t.sizes().vec());
    r.input_dtypes.emplace_back(c10::toString(t.scalar_type()));
  }
}

void fill_record_inputs(const Spec& spec, QuantRecord& r, bool needed) {
  if (!r.input_shapes.empty() || !needed) return;
  const ExportSpec& e = spec.quantize.export_spec;
  if (!e.input_shape.empty()) {
    std::vector<int64_t> s{1};
    s.insert(s.end(), e.input_shape.begin(), e.input_shape.end());
    r.input_shapes = {s};
    r.input_dtypes = {"Float"};
    return;
  }
  const auto& d = spec.dataset;
  const bool calib = d.quant_calibration_dataset && !d.quant_calibration_dataset->empty();
  if (!calib && !(d.test_dataset && !d.test_dataset->empty()))
    throw SpecError(spec.loc("quantize.export"),
                    "quantize.export: the model's input shape is unknown (this mode reads no "
                    "data); set quantize.export.input_shape (one sample's shape, e.g. [3, 224, "
                    "224]) or a dataset");
  auto loader = calib ? make_data_loader(spec, *d.quant_calibration_dataset,
                                         "dataset.quant_calibration_dataset", false)
                      : make_data_loader(spec, *d.test_dataset, "dataset.test_dataset", false);
  Batch b;
  if (!loader->next(b)) throw RuntimeError("export: " + loader->describe() + " has no sample");
  record_inputs_from(r, b.inputs);
}

void complete_record(QuantRecord& r, const std::vector<LayerResult>& results,
                     const std::string& backend) {
  for (const auto& res : results) {
    if (r.find_layer(res.name)) continue;
    LayerRecord& l = r.layer(res.name);
    l.quantized = !res.kept_float;
    l.reason = res.kept_float ? res.reason : "";
    if (l.quantized)
      r.notes.push_back("backend '" + backend + "' did not record the numbers of layer '" +
                        res.name + "': only the float model can be exported");
  }
}

StagedExports::~StagedExports() {
  if (published_) return;
  std::error_code ec;
  for (const auto& f : files_) fs::remove(f.partial, ec);
  if (!record_partial_.empty()) fs::remove(record_partial_, ec);
}

void StagedExports::write(const std::vector<const ExporterInfo*>& exporters, const ExportJob& job,
                          const std::string& dir, bool write_record) {
  if (!exporters.empty()) files_ = run_exporters(exporters, job, dir);
  if (!write_record) return;
  record_path_ = (fs::path(dir) / kRecordFile).string();
  record_partial_ = partial_path(record_path_);
  save_record(job.record, record_partial_);
  sync_file(record_partial_);
}

void StagedExports::add_to_report(nlohmann::json& report, const ExportSettings& settings) const {
  if (!files_.empty()) report["exports"] = export_report(files_, settings);
  if (!record_partial_.empty()) {
    nlohmann::json rec = artifact_fingerprint(record_partial_, kRecordFile);
    rec["path"] = record_path_;
    report["record"] = rec;
  }
}

void StagedExports::publish() {
  for (const auto& f : files_) rename_file(f.partial, f.path);
  if (!record_partial_.empty()) rename_file(record_partial_, record_path_);
  published_ = true;
}

}  // namespace tq
