// What sensitivity and tune share: the spec's model and plan, a simulator
// for it, a bounded evaluation sample with the float reference, and the
// metrics of an assignment on that sample. Not installed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "simulator.h"
#include "taoquant/data.h"
#include "taoquant/pipeline.h"
#include "taoquant/record.h"
#include "taoquant/spec.h"
#include "taoquant/tune.h"

namespace tq::tune {

// The model's outputs under one assignment, against float.
struct Metrics {
  double sqnr_db = 0;
  double top1_agreement = 0;   // percent of samples whose argmax agrees with float
  std::optional<double> top1;  // percent correct (with labels)
};

struct EvalSample {
  std::vector<std::vector<at::Tensor>> batches;
  at::Tensor labels;  // int64 [N], undefined without labels
  size_t samples = 0;
  std::string key;          // "dataset.test_dataset"
  std::string description;  // "dataset.test_dataset npz test.npz (...), first 1000 samples"
  std::shared_ptr<DataLoader> loader;  // the source, for the names of its samples
  bool has_labels() const { return labels.defined(); }
};

// Up to `max_samples` leading samples of the data source at `key`
// ("dataset.test_dataset", "dataset.validation_dataset",
// "dataset.quant_calibration_dataset"), checked to be finite.
EvalSample read_sample(const Spec& spec, const std::string& key, size_t max_samples);

// Metrics of `out` (the outputs of the leading samples of `labels`'s data)
// against the float model's outputs `reference` (flattened per sample).
Metrics metrics_against(const at::Tensor& reference, const at::Tensor& labels,
                        const at::Tensor& out);

// Checks the sample's labels against the model's `classes` outputs
// (check_labels: exit 1 naming the file, the sample and the range).
void check_sample_labels(const EvalSample& s, int64_t classes);

using Progress = std::function<void(const std::string& what, size_t done, size_t total)>;

class Session {
 public:
  // Everything from the spec (tune, inspect --sensitivity): the model is
  // loaded and planned, static mode observes the calibration data.
  // `data`: "validation" (dataset.validation_dataset, the default when it
  // is set), "test" (dataset.test_dataset, the default otherwise, when
  // set) or "calibration" (leading samples of
  // dataset.quant_calibration_dataset).
  // `formats`: candidate weight formats (empty: the plan's, else int8).
  Session(const Spec& spec, const std::vector<DType>& formats, const std::string& data,
          size_t max_samples, const Progress& progress);
  // A quantize run's session: its plan and backend; then read() (which
  // loads the model file: a module of its own, which no pass of the run
  // touched), and start() with the run's input ranges.
  Session(const Spec& spec, InspectOutcome run, const std::vector<DType>& formats);
  ~Session();

  // Reads the evaluation sample (see the first constructor for `data`), and
  // loads the model once.
  void read(const std::string& data, size_t max_samples);
  // Sets up the simulator and the float reference on the sample. Static
  // mode: each layer's input range from `ranges`, the others observed over
  // the calibration data (opened only then).
  void start(const Progress& progress, const InputRanges& ranges = {});

  const Spec& spec() const { return spec_; }
  const InspectOutcome& inspected() const { return inspect_; }
  const Plan& plan() const { return inspect_.plan; }
  Simulator& sim() { return *sim_; }
  const Simulator& sim() const { return *sim_; }
  const EvalSample& sample() const { return sample_; }
  const std::vector<DType>& formats() const { return formats_; }
  std::optional<double> float_top1() const { return float_top1_; }
  // Runs the simulator under `a` over the sample (its first batches that
  // hold `limit` samples, when given).
  Metrics measure(const Assignment& a, size_t limit = 0);
  // Metrics of outputs (concatenated over the sample, or its leading part)
  // against float.
  Metrics metrics_of(const at::Tensor& out) const;
  size_t forwards() const { return forwards_; }

 private:
  const Spec& spec_;
  InspectOutcome inspect_;
  std::vector<DType> formats_;
  torch::jit::Module model_;  // the float model, the simulator's from start() on
  bool loaded_ = false;
  std::unique_ptr<Simulator> sim_;
  EvalSample sample_;
  at::Tensor reference_;  // float outputs, concatenated
  std::optional<double> float_top1_;
  size_t forwards_ = 0;
};

// Each layer alone in each candidate format, and alone kept float (the
// reverse view), ranked: what `inspect --sensitivity` prints.
// `limit`: samples per probe (0: the whole sample); `reverse`: also the
// reverse view (tune does without it); `budget_s` (> 0): fewer samples per
// probe when the probes at `limit` would take longer (timed on the first).
SensitivityReport measure_sensitivity(Session& s, const TuneProgress& progress, size_t limit = 0,
                                      bool reverse = true, double budget_s = 0);

// A quantize run's input ranges, by layer (static mode).
InputRanges input_ranges(const QuantRecord& record);

}  // namespace tq::tune
