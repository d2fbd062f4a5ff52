// The backend API, named as TAO Quant users know it: QuantizerBase with
// prepare/quantize, the optional Calibratable mixin, an optional save_model
// override, and a declared capability table checked before any work.
//
// Built-in backends and plugins register with one line:
//   TAOQUANT_REGISTER_BACKEND(MyBackend, my_backend_info);
// where `my_backend_info` is a function returning a BackendInfo.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/enums.h"
#include "taoquant/error.h"
#include "taoquant/options.h"
#include "taoquant/plan.h"
#include "taoquant/registry.h"
#include "taoquant/spec.h"
#include "taoquant/stage_result.h"

namespace at {
class Tensor;
}  // namespace at
namespace torch::jit {
struct Module;
}

namespace tq {

class CalibrationData;
class TimingCache;
struct QuantRecord;
namespace wformat {
struct QuantizedWeight;
}

// What a backend does in one mode: the capability table that the spec
// checks, `inspect`, `backends [--json]` and the backend itself all read.
// Empty lists inherit the backend-wide lists of Capabilities.
struct ModeCaps {
  Mode mode = Mode::kWeightOnly;
  std::vector<DType> weight_dtypes;
  std::vector<DType> activation_dtypes;
  std::vector<LayerKind>
      layer_kinds;  // quantized in this mode; the backend's other kinds stay float
  std::vector<Granularity> granularities;
  // What runs the layers, for the reasons `inspect` shows:
  // "<kind> has no <kernel>", "activations native: <kernel> need ...".
  std::string kernel;
  bool needs_quantized_weights = false;      // layers with native weights stay float
  bool needs_quantized_activations = false;  // layers with native activations stay float
  // Formats the backend narrows: int8 activations computed as uint8, per_group
  // weights stored per_channel. The plan shows the narrowed format and a warning.
  std::vector<std::pair<DType, DType>> activation_as;
  std::vector<std::pair<Granularity, Granularity>> granularity_as;
  // Static mode: the backend rounds the weights itself and calls
  // tq::correct_biases (weight_algorithms.h) with them; without it a spec
  // with bias_correction is refused. (Weight-only mode: the library corrects
  // before the backend stores the weights, for every backend.)
  bool bias_correction = false;
  // The run times the quantized model against float (the report's
  // backend.meta.latency_check) unless backend_kwargs.latency_check is
  // false: what tune's min_speedup gate needs.
  bool times_model = false;
  // Static mode: Conv+BatchNorm pairs are folded before the weights are
  // quantized (the folded weight is the one rounded): what the tune and
  // sensitivity simulator must do to predict this backend's artifact.
  bool folds_batchnorm = false;
  // Static mode: layer calls that no planned layer owns (a linear on a
  // module attribute other than a layer's `weight`: nn.MultiheadAttention's
  // in_proj_weight) are quantized in the artifact too. The sensitivity
  // simulator runs them float; with this set, its report says that the
  // artifact's error includes theirs (ABI 8).
  bool quantizes_unowned_calls = false;
};

// What a backend can do. Checked against the spec before the model loads.
struct Capabilities {
  std::vector<Mode> modes;
  std::vector<DType> weight_dtypes;
  std::vector<DType> activation_dtypes;
  std::vector<Granularity> granularities;
  std::vector<LayerKind> layer_kinds;  // kinds the backend knows; others are a spec error
  std::vector<ModeCaps> per_mode;      // a listed mode uses its own table
  QParamConstraints constraints;
  std::vector<OptionDef> options;  // quantize.backend_kwargs schema
  // The resolved table of one mode (per_mode entry, empty lists inherited).
  ModeCaps for_mode(Mode m) const;
};

// Another name for a backend, optionally limited to some modes
// (e.g. TAO's `torchao` is `libtorch` for weight-only PTQ).
struct BackendAlias {
  std::string name;
  std::vector<Mode> modes;  // empty = all modes of the target
  std::string note;
};

class QuantizerBase;
using BackendFactory = std::function<std::unique_ptr<QuantizerBase>()>;

struct BackendInfo {
  std::string name;
  std::string description;
  std::vector<BackendAlias> aliases;
  Capabilities caps;
  BackendFactory factory;
  std::string origin = "built-in";  // or the plugin path
  std::string registered_at;        // "file:line"
};

// One layer's outcome, reported by the backend through the context.
struct LayerResult {
  std::string name;
  std::string class_name;
  std::vector<int64_t> weight_shape;
  std::string weight_format = "float";  // "int8/per_channel", "int4/g128", ...
  std::string activation_format = "float";
  double scale_min = 0, scale_max = 0;
  double weight_sqnr_db = 0;  // +inf when exact
  size_t bytes_before = 0, bytes_after = 0;
  bool kept_float = false;
  std::string reason;  // why kept float / notes
  nlohmann::json extra = nlohmann::json::object();
};

// A result for a planned layer: name, class and weight shape filled.
LayerResult layer_result(const LayerPlan& lp);
// A layer kept float, with its weight bytes and why (default: the plan's reason).
LayerResult kept_float_result(const LayerPlan& lp, size_t weight_bytes, std::string reason = "");

// Everything a backend sees while it works.
class QuantizeContext {
 public:
  QuantizeContext(const Plan& plan, torch::jit::Module& model);
  virtual ~QuantizeContext();

  const Plan& plan;           // the contract: formats, options, locations
  torch::jit::Module& model;  // the working copy; backends change it in place
  const BackendOptions& options() const { return plan.options; }

  // Reports one layer (printed as it arrives and stored for the report).
  void add_layer_result(LayerResult r);
  const std::vector<LayerResult>& layer_results() const { return results_; }
  void warn(const std::string& msg);
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Files embedded next to the model in the artifact (tao_quant/...).
  std::map<std::string, std::string> extra_files;
  // Backend facts for the report and the artifact metadata (e.g. engine).
  nlohmann::json backend_meta = nlohmann::json::object();

  // Called for each layer result as it arrives (the CLI prints a line).
  std::function<void(const LayerResult&, size_t index)> on_layer;
  // Progress of long steps ("calibrate", done, total); drawn on a TTY only.
  std::function<void(const std::string& what, size_t done, size_t total)> on_progress;
  // Calibration facts for the report (samples, batches, seconds).
  nlohmann::json calibration = nlohmann::json::object();
  // The float model's output on the held-out calibration batch, when the
  // backend has it (libtorch's static mode captures it as it calibrates).
  // Publishing runs the saved artifact on that batch anyway (its checks),
  // and reports that output's SQNR against this one as
  // backend_meta.holdout_output_sqnr_db: the figure is the published
  // artifact's own, for one int8 pass fewer.
  std::shared_ptr<const at::Tensor> holdout_reference;

  // Set by the library's algorithm stage (GPTQ) before the backend
  // quantizes: the quantized weight of a layer, which
  // quantize_planned_weight returns instead of rounding to nearest.
  std::map<std::string, std::shared_ptr<const wformat::QuantizedWeight>> weight_overrides;
  // What an algorithm did (a stage's result, or a backend-run pass's):
  // its per-layer facts go into each layer's result (layers[].algorithms),
  // its held-out refusals become warnings.
  void record_algorithms(const StageResult& r);
  // Per-layer report facts, by facts key (written by record_algorithms and
  // by a backend adding to a pass it runs; merged into each LayerResult).
  std::map<std::string, nlohmann::json> algorithm_facts;

  // The neutral quantization record (record.h) the backend fills as it
  // quantizes: the report and the exporters read it.
  QuantRecord& record() { return *record_; }
  const QuantRecord& record() const { return *record_; }

  // The run's timing cache (set by run_quantize; may be null elsewhere):
  // latency decisions read it first and record what they measure, so that a
  // rerun with the cache decides the same without measuring.
  TimingCache* timing_cache = nullptr;

 private:
  std::vector<LayerResult> results_;
  std::vector<std::string> warnings_;
  std::unique_ptr<QuantRecord> record_;
};

class QuantizerBase {
 public:
  virtual ~QuantizerBase() = default;
  // Checks and rewrites before calibration (e.g. fold BN, insert observers).
  virtual void prepare(QuantizeContext& ctx) { (void)ctx; }
  // Produces the quantized model in ctx.model.
  virtual void quantize(QuantizeContext& ctx) = 0;
  // Writes the artifact. The default saves ctx.model as TorchScript with
  // ctx.extra_files, through a temporary file renamed into place.
  virtual void save_model(QuantizeContext& ctx, const std::string& path);
};

// Mixin for backends that need calibration data (static PTQ). The library
// owns the loop (CalibrationData: batches, held-out batch, progress, facts);
// the backend inserts its observers and runs `data.pass(...)`.
class Calibratable {
 public:
  virtual ~Calibratable() = default;
  virtual void calibrate(QuantizeContext& ctx, CalibrationData& data) = 0;
};

// The registry: created on first use, so registration order between
// translation units and plugins does not matter.
class BackendRegistry : public Registry<BackendInfo> {
 public:
  static BackendRegistry& instance();

  struct Resolved {
    const BackendInfo* info = nullptr;
    std::string requested;  // what the user asked for
    const BackendAlias* alias = nullptr;
    std::vector<Mode> modes;  // modes available under the requested name
  };
  // Throws SpecError with did-you-mean when unknown.
  Resolved resolve(const std::string& name, const SourceLoc& loc = {}) const;
  std::vector<std::string> all_names() const { return keys(); }  // names and aliases

 protected:
  std::vector<std::string> keys_of(const BackendInfo& b) const override;
  void validate(const BackendInfo& b) const override;
  std::string where(const BackendInfo& b) const override;

 private:
  BackendRegistry() : Registry("backend") {}
};

// Checks the spec against a backend's declared capabilities and option
// schema (before the model loads) and returns the typed options. Throws
// SpecError with the key's location, the reason and the supported values.
BackendOptions check_capabilities(const Spec& spec, const BackendRegistry::Resolved& backend);
// Applies the mode's capability table to the plan: layer kinds the backend
// does not know are a SpecError; layers it keeps float in this mode get their
// float_reason; narrowed formats are rewritten, with a plan warning. Also
// records the backend and options in the plan. Both `inspect` and `quantize`
// call it, so they always agree.
void apply_capabilities(const Spec& spec, Plan& plan, const BackendRegistry::Resolved& backend,
                        BackendOptions options);

nlohmann::json backend_to_json(const BackendInfo& info);

namespace detail {
template <class T>
bool register_backend(BackendInfo info, const char* file, int line) {
  info.factory = [] { return std::unique_ptr<QuantizerBase>(new T()); };
  info.registered_at = std::string(file) + ":" + std::to_string(line);
  BackendRegistry::instance().add(std::move(info));
  return true;
}
}  // namespace detail

}  // namespace tq

#define TQ_CONCAT_INNER(a, b) a##b
#define TQ_CONCAT(a, b) TQ_CONCAT_INNER(a, b)
#define TAOQUANT_REGISTER_BACKEND(Class, info_fn)                                  \
  static const bool TQ_CONCAT(tq_backend_registered_, __LINE__) [[maybe_unused]] = \
      ::tq::detail::register_backend<Class>(info_fn(), __FILE__, __LINE__)
