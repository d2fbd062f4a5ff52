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

#include <nlohmann/json.hpp>

#include "taoquant/enums.h"
#include "taoquant/error.h"
#include "taoquant/plan.h"
#include "taoquant/spec.h"

namespace torch::jit {
struct Module;
}

namespace tq {

class DataLoader;

// Constraints a backend puts on the quantization parameters it accepts. The
// core rejects specs that cannot meet them and applies them to computed
// qparams (see qparams.h).
struct QParamConstraints {
  bool symmetric_only = false;
  bool power_of_two_scale = false;
  double min_scale = 0.0;  // scales are clamped up to this
  std::optional<int> quant_min, quant_max;
};

// Weight and activation dtypes a backend takes in one mode.
struct DTypeConfig {
  Mode mode;
  std::vector<DType> weight_dtypes;
  std::vector<DType> activation_dtypes;
};

// What a backend can do. Checked against the spec before the model loads.
struct Capabilities {
  std::vector<Mode> modes;
  std::vector<DType> weight_dtypes;
  std::vector<DType> activation_dtypes;
  std::vector<Granularity> granularities;
  std::vector<LayerKind> layer_kinds;
  std::vector<std::string> fusion_patterns;  // e.g. "conv-bn-relu", "linear-relu"
  // Per-mode dtypes; when a mode is listed here, its lists replace
  // weight_dtypes/activation_dtypes for that mode.
  std::vector<DTypeConfig> dtype_configs;
  QParamConstraints constraints;
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

// Everything a backend sees while it works.
class QuantizeContext {
 public:
  QuantizeContext(const Spec& spec, const Plan& plan, torch::jit::Module& model,
                  std::string requested_backend, std::string resolved_backend);
  virtual ~QuantizeContext();

  const Spec& spec;
  const Plan& plan;
  torch::jit::Module& model;  // the working copy; backends change it in place
  const std::string requested_backend;
  const std::string resolved_backend;
  const nlohmann::json& backend_kwargs() const { return spec.quantize.backend_kwargs; }

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

 private:
  std::vector<LayerResult> results_;
  std::vector<std::string> warnings_;
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

// Mixin for backends that need calibration data (static PTQ).
class Calibratable {
 public:
  virtual ~Calibratable() = default;
  virtual void calibrate(QuantizeContext& ctx, DataLoader& loader) = 0;
};

// The registry: created on first use, so registration order between
// translation units and plugins does not matter.
class BackendRegistry {
 public:
  static BackendRegistry& instance();

  // Throws tq::Error naming both registrations on a duplicate name or alias.
  void add(BackendInfo info);

  struct Resolved {
    const BackendInfo* info = nullptr;
    std::string requested;  // what the user asked for
    const BackendAlias* alias = nullptr;
    std::vector<Mode> modes;  // modes available under the requested name
  };
  // Throws SpecError with did-you-mean when unknown.
  Resolved resolve(const std::string& name, const SourceLoc& loc = {}) const;
  const BackendInfo* find(const std::string& name) const;  // name or alias
  std::vector<const BackendInfo*> list() const;            // sorted by name
  std::vector<std::string> all_names() const;              // names and aliases

  // While a plugin loads, its registrations are held back until the plugin
  // passes its checks; then they are committed (or dropped).
  void begin_pending(const std::string& origin);
  void commit_pending();
  void drop_pending();

 private:
  BackendRegistry() = default;
  void add_checked(BackendInfo info);
  std::vector<BackendInfo> backends_;
  std::vector<BackendInfo> pending_;
  bool pending_mode_ = false;
  std::string current_origin_ = "built-in";
};

// Checks the spec against a backend's declared capabilities (before the model
// loads). Throws SpecError with the reason and the supported values.
void check_capabilities(const Spec& spec, const BackendRegistry::Resolved& backend);
// Checks the plan (layer kinds, granularities) against the capabilities.
void check_plan_capabilities(const Spec& spec, const Plan& plan,
                             const BackendRegistry::Resolved& backend);

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
