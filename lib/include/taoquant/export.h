// Exporters: the handoff to other runtimes. One file per format
// (exporters/<format>.cpp), each registering an ExporterInfo in one
// Registry<> as backends do; lib/ never includes an exporter. An exporter
// reads only the neutral quantization record (record.h) and writes one
// file. `quantize` runs the formats `quantize.export.formats` names after
// the artifact is saved, and their files are published with the result
// (temporary names, fsync, rename, size and XXH64 in the report);
// `tao-quant export` runs them on a published result.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/enums.h"
#include "taoquant/error.h"
#include "taoquant/registry.h"
#include "taoquant/spec.h"

namespace tq {

struct QuantRecord;
using ExportSettings = ExportSpec;  // quantize.export (spec.h)

// What an exporter is given.
struct ExportJob {
  const QuantRecord& record;
  const ExportSettings& settings;
  std::string requested_backend;  // names the files (quantized_model_<backend>.onnx)
  std::string observer;           // quantize.algorithm (the calibration algorithm)
  // The facts of the formats written before this one in the same run, by
  // format (an exporter that keys on another's file finds its names there).
  std::map<std::string, nlohmann::json> earlier;
};

struct ExporterInfo {
  std::string name;         // the format: "onnx", "onnx_qdq", ...
  std::string description;  // one line, for `backends` and errors
  // The file it writes in results_dir; "{backend}" is the requested backend.
  std::string file_name;
  std::vector<Mode> modes;         // empty: every mode
  std::vector<std::string> needs;  // formats that run first (and are written too)
  // Writes the file at `path` (a temporary name the caller renames) and
  // returns its facts for the report. Throws tq::Error naming the layer and
  // op that cannot be exported (exit 1).
  std::function<nlohmann::json(const ExportJob& job, const std::string& path)> write;
  std::string origin = "built-in";
  std::string registered_at;
};

class ExporterRegistry : public Registry<ExporterInfo> {
 public:
  static ExporterRegistry& instance();
  // The exporters for `formats` with what they need, in the order they run;
  // an unknown name is a SpecError at `locs[i]` with the known formats.
  std::vector<const ExporterInfo*> resolve(const std::vector<std::string>& formats,
                                           const std::vector<SourceLoc>& locs = {}) const;

 protected:
  void validate(const ExporterInfo& e) const override;

 private:
  ExporterRegistry() : Registry("exporter") {}
};

// The file name an exporter writes for a backend.
std::string export_file_name(const ExporterInfo& e, const std::string& requested_backend);

struct ExportedFile {
  std::string format;
  std::string path;     // final path
  std::string partial;  // where it was written, until published
  nlohmann::json facts;
};

// Runs `exporters` in order into `dir` (each under its temporary name; on a
// failure the ones written are removed and the error goes on). The report's
// `exports` entry is export_report(files) with their fingerprints.
std::vector<ExportedFile> run_exporters(const std::vector<const ExporterInfo*>& exporters,
                                        ExportJob job, const std::string& dir);
nlohmann::json export_report(const std::vector<ExportedFile>& files,
                             const ExportSettings& settings);

// The exporters a spec asks for (quantize.export), checked before the model
// loads: unknown formats, formats the mode cannot export, and settings a
// target cannot take are SpecErrors at their key (exit 2).
std::vector<const ExporterInfo*> check_export_spec(const Spec& spec);

}  // namespace tq

namespace tq::detail {
bool register_exporter(ExporterInfo info, const char* file, int line);
}  // namespace tq::detail

#define TQ_EXPORTER_CONCAT_INNER(a, b) a##b
#define TQ_EXPORTER_CONCAT(a, b) TQ_EXPORTER_CONCAT_INNER(a, b)
#define TAOQUANT_REGISTER_EXPORTER(info_fn)                                                  \
  static const bool TQ_EXPORTER_CONCAT(tq_exporter_registered_, __LINE__) [[maybe_unused]] = \
      ::tq::detail::register_exporter(info_fn(), __FILE__, __LINE__)
