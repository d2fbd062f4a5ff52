// The experiment spec (TAO Toolkit format): parsed, interpolated,
// overridden and validated. Torch-free.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/algorithms.h"
#include "taoquant/enums.h"
#include "taoquant/error.h"
#include "taoquant/gates.h"

namespace tq {

// `weights:` or `activations:` of a `layers` entry. Unset optionals inherit
// the defaults (see plan.h for how they are resolved).
struct TensorQuantSpec {
  std::optional<DType> dtype;
  std::optional<Granularity> granularity;
  std::optional<int> quant_axis;
  std::optional<int> group_size;
  std::optional<bool> symmetric;
  std::optional<Rounding> rounding;                           // weights only
  std::optional<std::string> observer;                        // observer_or_fake_quant
  nlohmann::json observer_kwargs = nlohmann::json::object();  // observer_or_fake_quant_kwargs
  SourceLoc loc;
};

struct LayerRule {
  std::string module_name;  // shell wildcard pattern
  std::optional<TensorQuantSpec> weights;
  std::optional<TensorQuantSpec> activations;
  SourceLoc loc;
};

struct SkipRule {
  std::string pattern;
  SourceLoc loc;
};

// quantize.export: the formats handed to other runtimes (export.h). The
// names are checked against the exporter registry before the model loads.
struct ExportSpec {
  std::vector<std::string> formats;
  std::vector<SourceLoc> format_locs;
  int opset = 17;
  std::string target = "ort";             // ort | tensorrt
  std::string tensorrt_version = "8601";  // calibration cache header: TensorRT 8.6.1
  std::vector<int64_t> input_shape;       // one sample's shape, when no data gives it
};

struct QuantizeSpec {
  std::string backend = "torchao";
  Mode mode = Mode::kWeightOnly;
  // The default observer: a name in the observer registry (plugins may add
  // observers), checked with the backend before the model loads.
  std::string algorithm = "minmax";
  AlgorithmSettings algorithms;  // equalization, bias_correction, weight_rounding, ...
  DType default_layer_dtype = DType::kNative;
  DType default_activation_dtype = DType::kNative;
  std::vector<LayerRule> layers;
  std::vector<SkipRule> skip_names;
  std::string model_path;   // required for quantize/inspect
  std::string results_dir;  // quantize.results_dir, else top-level results_dir
  nlohmann::json backend_kwargs = nlohmann::json::object();
  std::string device = "cpu";  // cpu | cuda | cuda:N
  // A timing cache (`tao-quant profile`, or the timing_cache.json a quantize
  // run writes): latency decisions come from it, not from measuring.
  std::string timing_cache;
  ExportSpec export_spec;  // quantize.export
};

struct PreprocessSpec {
  std::vector<int> input_size;  // [H, W]; empty = keep
  int resize = 0;               // shorter side; 0 = none
  bool center_crop = false;
  std::vector<double> mean;   // per channel; empty = none
  std::vector<double> std;    // per channel; empty = none
  std::string color = "rgb";  // rgb | bgr | gray
  double scale = 1.0 / 255.0;
};

// `dataset.quant_calibration_dataset`, `dataset.validation_dataset` and
// `dataset.test_dataset`.
struct DataSourceSpec {
  std::string images_dir;               // JPEG/PNG/BMP, flat or class sub-folders
  std::vector<std::string> data_files;  // .npz/.npy/.pt; several = tuple of inputs
  std::vector<std::string> input_keys;  // npz/pt input keys; empty = {"x"}
  std::string label_key = "y";          // npz/pt label key (test data)
  std::vector<std::string> classes;     // explicit class-folder order
  int batch_size = 32;
  int max_batches = 0;  // 0 = all
  bool shuffle = false;
  uint64_t seed = 0;
  int num_workers = 2;  // image decode threads
  PreprocessSpec preprocess;
  SourceLoc loc;  // where the section starts
  bool empty() const { return images_dir.empty() && data_files.empty(); }
};

struct DatasetSpec {
  std::optional<DataSourceSpec> quant_calibration_dataset;
  // tune's selection data (and sensitivity's) when set; the test set then
  // only reports the final result.
  std::optional<DataSourceSpec> validation_dataset;
  std::optional<DataSourceSpec> test_dataset;
};

struct LatencySpec {
  std::vector<int> batch_sizes = {1, 32};
  int warmup = 5;
  int iters = 50;
};

struct EvaluateSpec {
  std::string checkpoint;
  bool is_quantized = false;
  int batch_size = 64;
  int num_batches = 0;  // 0 = all
  std::optional<LatencySpec> latency;
  GatesSpec gates;  // evaluate.gates (gates.h)
};

struct Spec {
  std::string path;         // the spec file ("<string>" when parsed from text)
  std::string results_dir;  // top-level results_dir
  QuantizeSpec quantize;
  DatasetSpec dataset;
  EvaluateSpec evaluate;
  // The whole tree after interpolation and overrides, as JSON: embedded in
  // artifacts and reports.
  nlohmann::json resolved = nlohmann::json::object();
  // Location of every key that was present, by dotted path
  // ("quantize.model_path", "quantize.layers.0.weights.dtype").
  std::map<std::string, SourceLoc> locs;
  // Dotted keys whose value is `???` ("a value you must fill in"), also
  // through interpolation. Such keys are treated as unset.
  std::set<std::string> missing;
  // What the reader decided for the user (a default it filled in, and
  // how to choose otherwise): said once, kept in the report's `notes`.
  std::vector<std::string> notes;

  // Location of a key, or the spec file with no line when unknown.
  SourceLoc loc(const std::string& dotted) const;
  // The directory results go to: quantize.results_dir, then results_dir.
  std::string effective_results_dir() const;
};

// Reads, interpolates (`${a.b}`, `${env:VAR}`), applies `key=value`
// overrides, and validates. Throws SpecError (exit code 2).
Spec load_spec(const std::string& path, const std::vector<std::string>& overrides = {});
Spec parse_spec_text(const std::string& text, const std::string& name,
                     const std::vector<std::string>& overrides = {});

// What a command needs that a spec may leave unset (`???` or missing):
// each throws SpecError naming the key, file and line.
void require_model_path(const Spec& spec);
void require_calibration(const Spec& spec);  // static_ptq, GPTQ and bias correction need data
// quantize.results_dir or the top-level results_dir, set and usable as a
// folder: a path that is (or lies under) a file is a SpecError at its key,
// found before the model loads.
void require_results_dir(const Spec& spec);

// The resolved spec as the artifact embeds it: what builds the model,
// without where the results go (results_dir, quantize.results_dir), the
// evaluate section (checks made afterwards, often naming a path in
// results_dir) and quantize.export (other files, from the same numbers). The same spec into two
// folders gives the same artifact bytes; the report keeps the whole resolved spec.
nlohmann::json artifact_spec(const Spec& spec);

}  // namespace tq
