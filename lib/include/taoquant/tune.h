// Per-layer sensitivity (`tao-quant inspect --sensitivity`) and the gated
// mixed-precision search (`tao-quant tune`, quantize.tune in the spec).
// Both simulate quantization on a private copy of the float model (each
// candidate weight format rounded in place, layer inputs quantized as the
// plan says) and measure the model's output on a bounded evaluation sample
// against float; tune then quantizes for real, with the spec's backend, and
// keeps the best artifact found so far on disk.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/enums.h"
#include "taoquant/pipeline.h"
#include "taoquant/spec.h"

namespace tq {

using TuneProgress = std::function<void(const std::string& what, size_t done, size_t total)>;

// ---- Sensitivity -----------------------------------------------------------

struct SensitivityOptions {
  std::vector<DType> formats;  // candidate weight formats; empty: the plan's (else int8)
  std::string data;            // "test" or "calibration"; empty: test when set
  size_t max_samples = 1000;
  TuneProgress on_progress;
  // Not asked for: the table every quantize report gets by default.
  bool automatic = false;
};

struct FormatEffect {
  DType format = DType::kInt8;
  double sqnr_db = 0;               // model output vs float, this layer alone quantized
  double top1_agreement = 0;        // percent
  std::optional<double> top1_drop;  // float - this, percentage points (labels)
};

struct LayerSensitivity {
  std::string name, kind;
  size_t weight_params = 0;
  std::vector<FormatEffect> alone;  // one per candidate format
  double worst_sqnr_db = 0;         // min over `alone`: the ranking key
  // The reverse view: every layer quantized (planned format, else the first
  // candidate) except this one.
  double float_gain_db = 0;         // output SQNR gained by keeping it float
  double float_gain_agreement = 0;  // top-1 agreement gained, points
  int rank = 0, reverse_rank = 0;   // 1 = most sensitive
};

struct SensitivityReport {
  std::vector<LayerSensitivity> layers;  // most sensitive first
  std::vector<DType> formats;
  std::string data;
  size_t samples = 0;
  std::optional<double> float_top1;
  double all_sqnr_db = 0, all_agreement = 0;  // everything quantized
  std::optional<double> all_top1;
  size_t forward_passes = 0;
  bool reverse = true;  // the reverse view was measured
  // Layer calls no planned layer owns (their weights' attribute paths:
  // nn.MultiheadAttention's in_proj_weight): float in every probe here.
  // Where the backend quantizes them (ModeCaps::quantizes_unowned_calls),
  // "all quantized" leaves their error out, and the note says so.
  std::vector<std::string> outside_plan;
  bool outside_plan_quantized = false;
  std::string backend;  // the backend's name, for that note
  nlohmann::json to_json() const;
};

SensitivityReport run_sensitivity(const Spec& spec, const SensitivityOptions& opts = {});

namespace tune {
class Session;
}

// The report's sensitivity table as a stage of a quantize run: on the
// run's plan and backend (nothing planned twice), static layers' inputs at
// the run's own ranges (nothing calibrated twice), the model file loaded
// afresh when the table is measured (a module no pass of the run touched).
// The automatic table never fails the run: its JSON says why it is missing.
class SensitivityStage {
 public:
  SensitivityStage(const Spec& spec, SensitivityOptions opts, const InspectOutcome& run);
  ~SensitivityStage();
  SensitivityStage(const SensitivityStage&) = delete;
  SensitivityStage& operator=(const SensitivityStage&) = delete;
  // The table, or {automatic, skipped: why}. The automatic one: about one
  // calibration pass of `calibration_samples` (automatic_sensitivity_samples);
  // when even one sample per probe is more, without the reverse view, and
  // when that still is, skipped (counted in samples: the same inputs give
  // the same report).
  nlohmann::json measure(const QuantRecord& record, size_t quantized_layers,
                         size_t calibration_samples);

 private:
  nlohmann::json measure_automatic(const QuantRecord& record, size_t quantized_layers,
                                   size_t calibration_samples);
  const Spec& spec_;
  SensitivityOptions opts_;
  std::unique_ptr<tune::Session> s_;
  std::string skipped_;  // why the automatic table cannot be made
};
// quantize.sensitivity (true, or {formats, samples, data}): what `quantize`
// measures for its report; nullopt when false. Unset: the automatic table
// (the plan's formats, `automatic` set; the caller sizes its sample) when
// `by_default`, else nullopt.
std::optional<SensitivityOptions> sensitivity_request(const Spec& spec, bool by_default = false);
// Samples per probe of the automatic table: its 2L+2 forward passes (L
// quantized layers, each alone and each alone float, plus all and none)
// cost about one pass over `calibration_samples` (64 when nothing was
// calibrated), within [1, 64].
size_t automatic_sensitivity_samples(size_t quantized_layers, size_t calibration_samples);
// The evaluation data of sensitivity and tune for `data` ("test",
// "calibration", or empty: test when set): its spec key, checked to be set
// (SpecError otherwise) before any work.
std::string evaluation_source(const Spec& spec, const std::string& data);
std::string format_sensitivity_table(const SensitivityReport& r);

// ---- Tune ------------------------------------------------------------------

struct TuneOptions {
  bool verbose = false;
  // When the time budget began (the CLI: its process start, so that the
  // budget holds for the command's wall clock); default: run_tune's call.
  std::optional<std::chrono::steady_clock::time_point> started;
  TuneProgress on_progress;
  std::function<void(const std::string& line)> on_step;  // one line per search step
};

struct TuneOutcome {
  bool passed = false;
  std::string failed_gate;  // "max_top1_drop 0.5: measured 0.8" when !passed
  std::string artifact_path, report_path, tuned_spec_path;
  nlohmann::json report;  // the final quantize report, with "tune"
  QuantizeOutcome quantize;
};

// Reads quantize.tune, searches, and writes the best artifact, its report
// (with the search trace) and tuned_spec.yaml into the results dir. A
// search that meets no assignment's gates still writes its best candidate;
// passed is false and failed_gate names the gate.
TuneOutcome run_tune(const Spec& spec, const TuneOptions& opts = {});

// The dtypes named in a list ("int8", "native", ...), without repeats;
// SpecError at `loc` naming `key` for an unknown one.
std::vector<DType> parse_formats(const std::vector<std::string>& names, const SourceLoc& loc,
                                 const std::string& key);

// The spec as YAML text (keys sorted, strings quoted): what tuned_spec.yaml
// holds; parse_spec_text reads it back to the same tree.
std::string spec_yaml(const nlohmann::json& tree);

}  // namespace tq
