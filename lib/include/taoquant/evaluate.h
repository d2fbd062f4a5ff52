// The evaluate job: accuracy on the test data, fidelity of a quantized model
// against its float model, latency (float and quantized interleaved), and the
// quality gates CI uses. `tao-quant evaluate` is a thin layer over this.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/spec.h"

namespace tq {

constexpr int kEvaluateReportSchema = 1;

struct EvaluateOptions {
  bool is_quantized = false;  // --is-quantized (ORed with evaluate.is_quantized)
  std::string checkpoint;     // --checkpoint (wins over evaluate.checkpoint)
  bool compare = false;       // --compare: float and quantized side by side
  bool verbose = false;       // keep LibTorch's full error messages
  bool write_report = true;   // <results_dir>/evaluate_report.json
  // Progress of the accuracy pass and the latency runs.
  std::function<void(const std::string& what, size_t done, size_t total)> on_progress;
};

struct LatencyStats {
  int batch_size = 0;
  int iters = 0;
  double median_ms = 0, p90_ms = 0, mean_ms = 0, min_ms = 0;
  double throughput = 0;  // samples/s at the median
  // Other processes took the CPUs in too many rounds (latency.h,
  // interleaved_times): the figures are not clean, and are said so.
  bool contended = false;
  int rounds_dropped = 0;
};

// One evaluated model.
struct ModelResult {
  std::string role;  // "float" or "quantized"
  std::string path;
  size_t file_bytes = 0;
  std::string qengine;                // set before running ("" = LibTorch's default)
  std::optional<double> top1, top5;   // percent; unset without labels (top5: < 5 classes)
  size_t correct1 = 0, correct5 = 0;  // counts behind top1/top5
  std::vector<LatencyStats> latency;  // per batch size
  double forward_s = 0;               // model time in the accuracy pass
  const LatencyStats* latency_at(int batch_size) const;
};

// Quantized against float on the same inputs.
struct Fidelity {
  double cosine = 0;   // mean over samples of the cosine of the flattened outputs
  double sqnr_db = 0;  // 10 log10(sum f^2 / sum (f-q)^2) over all outputs; +inf when equal
  double max_abs_error = 0;
  double mean_abs_error = 0;
  double top1_agreement = 0;  // percent of samples whose argmax agrees
};

struct GateResult {
  std::string name;  // "min_cosine", "min_speedup (batch 32)"
  std::string op;    // ">=" or "<="
  double limit = 0;
  std::optional<double> value;
  bool passed = false;
  std::string unit;  // "%", " dB", "x", ...
};

struct EvaluateOutcome {
  std::vector<ModelResult> models;  // float first when both ran
  std::optional<Fidelity> fidelity;
  std::vector<int> latency_batch_sizes;
  std::vector<double> speedup;       // float/quantized median, per latency batch size
  std::optional<double> size_ratio;  // quantized / float file size
  std::optional<double> top1_drop;   // float - quantized top-1, percentage points
  std::string data_description;
  size_t num_samples = 0;
  int num_classes = 0;  // model outputs (dim 1)
  bool has_labels = false;
  int threads = 0;  // LibTorch intra-op threads
  std::vector<GateResult> gates;
  std::vector<std::string> notes;
  nlohmann::json timings = nlohmann::json::object();
  nlohmann::json report;
  std::string report_path;

  const ModelResult* find(const std::string& role) const;
  // The model the headline metrics describe: the quantized one when present.
  const ModelResult& primary() const;
  bool gates_passed() const;
  // "quality gates failed: min_cosine 0.9512 < 0.99; ..." ("" when all pass).
  std::string gate_failure_message() const;
};

// Loads the model(s) and the test data, measures, checks the gates and writes
// the report. Gate failures are in the outcome (not thrown): the CLI prints
// the table first, then exits with code 3. Throws SpecError (2) for a spec
// that cannot be evaluated, RuntimeError (1) for model/data failures
// (including a model whose outputs do not fit the labels).
EvaluateOutcome run_evaluate(const Spec& spec, const EvaluateOptions& opts = {});

// The console table (float | quantized | change) and the gate lines.
std::string format_evaluate_table(const EvaluateOutcome& out);

// Throws Error(ExitCode::kGate) with gate_failure_message() when a gate failed.
void throw_if_gates_failed(const EvaluateOutcome& out);

}  // namespace tq
