// `tao-quant export`: the formats of quantize.export (or --formats) from a
// published result, without quantizing again: the result pair is checked as
// evaluate checks it, the record must be the one its report lists, and the
// new files are published with an updated report.
#include <filesystem>
#include <fstream>

#include "export_stage.h"
#include "taoquant/model.h"
#include "taoquant/pipeline.h"
#include "taoquant/result_files.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_report(const std::string& path) {
  try {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw RuntimeError("export: the report '" + path + "' is not valid JSON");
  }
}

// The record the report lists, checked against its fingerprint.
QuantRecord published_record(const fs::path& dir, const nlohmann::json& report,
                             const std::string& report_path) {
  const std::string path = (dir / kRecordFile).string();
  const auto it = report.find("record");
  std::error_code ec;
  if (it == report.end() || !it->is_object() || !fs::exists(path, ec))
    throw RuntimeError("export: the result in '" + dir.string() +
                       "' has no quantization record ('" + path +
                       "'; results of tao-quant before 0.2 have none): run quantize again, with "
                       "quantize.export to export at once");
  const nlohmann::json actual = artifact_fingerprint(path, kRecordFile);
  if (actual["xxh64"] != it->value("xxh64", nlohmann::json()) ||
      actual["bytes"] != it->value("bytes", nlohmann::json()))
    throw RuntimeError("export: '" + path + "' is not the record the report '" + report_path +
                       "' lists (it was changed or replaced); run quantize again");
  return load_record(path);
}

}  // namespace

ExportOutcome run_export(const Spec& spec) {
  const auto exporters = check_export_spec(spec);
  if (exporters.empty())
    throw UsageError(
        "export: no format to export: pass --formats (e.g. --formats onnx_qdq) or set "
        "quantize.export.formats");
  require_results_dir(spec);
  const auto backend =
      BackendRegistry::instance().resolve(spec.quantize.backend, spec.loc("quantize.backend"));
  const fs::path dir = spec.effective_results_dir();
  ExportOutcome out;
  const std::string artifact = (dir / artifact_name(backend.requested)).string();
  out.report_path = (dir / "quantize_report.json").string();
  std::error_code ec;
  if (!fs::exists(artifact, ec))
    throw RuntimeError("export: no result to export: '" + artifact +
                       "' is missing (run tao-quant quantize with this spec first)");
  if (const std::string problem = result_pair_problem(artifact, out.report_path); !problem.empty())
    throw RuntimeError("export: " + problem);
  out.report = read_report(out.report_path);
  QuantRecord record = published_record(dir, out.report, out.report_path);
  fill_record_inputs(spec, record, true);
  const ExportJob job{
      record, spec.quantize.export_spec, backend.requested, spec.quantize.algorithm, {}};
  StagedExports staged;
  staged.write(exporters, job, dir.string(), /*write_record=*/false);
  // The report lists the new files, and keeps the other formats' entries.
  nlohmann::json entry = export_report(staged.files(), spec.quantize.export_spec);
  if (auto old = out.report.find("exports"); old != out.report.end() && old->contains("files"))
    for (const auto& f : (*old)["files"]) {
      bool replaced = false;
      for (const auto& n : staged.files()) replaced = replaced || n.format == f.value("format", "");
      if (!replaced) entry["files"].push_back(f);
    }
  out.report["exports"] = entry;
  const std::string report_partial = partial_path(out.report_path);
  write_file_atomic(report_partial, out.report.dump(2) + "\n");
  sync_file(report_partial);
  staged.publish();
  rename_durably(report_partial, out.report_path);
  out.files = staged.files();
  return out;
}

}  // namespace tq
