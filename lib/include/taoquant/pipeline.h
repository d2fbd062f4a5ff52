// The quantize and inspect jobs: spec -> backend check -> model -> plan ->
// backend -> artifact -> report. The CLI is a thin layer over these.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/backend.h"
#include "taoquant/export.h"
#include "taoquant/plan.h"
#include "taoquant/result_files.h"  // artifact_name
#include "taoquant/spec.h"

namespace tq {

struct QuantizeOptions {
  bool verbose = false;  // keep LibTorch's full error messages
  // Called once the plan is known (before any quantization work).
  std::function<void(const Plan&)> on_plan;
  // Called per layer as the backend reports it.
  std::function<void(const LayerResult&, size_t index, size_t total)> on_layer;
  // Progress of long steps (calibration); only the CLI on a TTY draws it.
  std::function<void(const std::string& what, size_t done, size_t total)> on_progress;
  // `profile`: time every layer and the whole model into the timing cache
  // and write only the cache (no artifact, no report).
  bool profile = false;
  // Without quantize.sensitivity, the report still gets a small sensitivity
  // table (automatic_sensitivity_samples); tune's own runs turn it off.
  bool sensitivity_by_default = true;
  // A given timing cache that lacks timings gets the ones this run measured
  // (written back to its own file, without the "lacked timings" warning):
  // tune's runs share one cache, so each names a cache that holds every
  // timing it used.
  bool extend_timing_cache = false;
};

struct QuantizeOutcome;
struct InspectOutcome;
struct QuantRecord;

// A stage that adds to the report of a saved, checked artifact before the
// report is written (the sensitivity table): set by the job that runs the
// pipeline (run_quantize, quantize_job.cpp), so the pipeline knows none.
struct ReportStage {
  std::string key;  // report[key]; its time is timings[key + "_s"]
  // Spec-only checks, before the model loads (after the pipeline's own).
  std::function<void(const Spec& spec)> check;
  std::function<nlohmann::json(const InspectOutcome& run, const QuantizeOutcome& out,
                               const QuantRecord& record)>
      run;
};

struct QuantizeOutcome {
  Plan plan;
  std::string requested_backend, resolved_backend;
  std::string artifact_path, report_path;
  size_t model_file_bytes = 0, artifact_file_bytes = 0;
  std::vector<LayerResult> layers;
  std::vector<std::string> warnings;
  nlohmann::json calibration = nlohmann::json::object();  // samples, batches, seconds
  nlohmann::json report;
  double total_seconds = 0;
  // The timing cache: its file when this run wrote one (something was
  // measured), and the facts (given, written, entries read and measured).
  std::string timing_cache_path;
  nlohmann::json timing_cache = nlohmann::json::object();
};

// Builds the plan only (no quantization): what `inspect` and `--dry-run` show.
struct InspectOutcome {
  Plan plan;
  BackendRegistry::Resolved backend;
  std::string model_path;
  nlohmann::json to_json() const;
};
InspectOutcome run_inspect(const Spec& spec, const QuantizeOptions& opts = {});

// The quantize job: the pipeline, with the sensitivity table (automatic,
// or quantize.sensitivity) as its report stage (quantize_job.cpp).
QuantizeOutcome run_quantize(const Spec& spec, const QuantizeOptions& opts = {});
// The pipeline alone: plan, algorithm stages, backend, checks, exports,
// `report_stages`, report, publish.
QuantizeOutcome run_quantize_stages(const Spec& spec, const QuantizeOptions& opts,
                                    const std::vector<ReportStage>& report_stages = {});

// `tao-quant export`: the formats of quantize.export (export.h) from the
// published result in results_dir, without quantizing again. The pair is
// checked as evaluate checks it; the record must be the one the report
// lists. The files are published and the report lists them.
struct ExportOutcome {
  std::vector<ExportedFile> files;
  std::string report_path;
  nlohmann::json report;
};
ExportOutcome run_export(const Spec& spec);

}  // namespace tq
