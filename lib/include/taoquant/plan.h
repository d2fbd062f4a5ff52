// The per-layer plan: which layer gets which format, and which rule decided
// it. Built before any quantization work, so a dry run (`inspect`) is free.
// Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/enums.h"
#include "taoquant/options.h"
#include "taoquant/spec.h"

namespace tq {

// A quantizable layer found in the model.
struct LayerInfo {
  std::string name;        // qualified name, e.g. "layer1.0.conv1"
  std::string class_name;  // e.g. "Conv2d"
  LayerKind kind = LayerKind::kLinear;
  std::vector<int64_t> weight_shape;
  bool has_bias = false;
};

// A fully resolved quantization setting for one tensor.
struct TensorQuant {
  DType dtype = DType::kNative;
  Granularity granularity = Granularity::kPerTensor;
  int axis = 0;
  int group_size = 128;
  bool symmetric = true;
  std::string observer;                    // observer name: the setting's, else quantize.algorithm
  bool observer_explicit = false;          // set by a `layers` rule (observer_or_fake_quant)
  Rounding rounding = Rounding::kNearest;  // weights: quantize.weight_rounding or the rule's
  nlohmann::json observer_kwargs = nlohmann::json::object();
  SourceLoc loc;  // the spec setting that decided this format (for errors)
  bool quantized() const { return dtype != DType::kNative; }
  std::string str() const;  // "int8/per_channel", "int4/g128", "fp32"
};

// Constraints a backend puts on the quantization parameters it accepts
// (Capabilities::constraints). The core rejects specs that cannot meet them
// and applies them to computed qparams (see qparams.h).
struct QParamConstraints {
  bool symmetric_only = false;
  bool power_of_two_scale = false;
  double min_scale = 0.0;  // scales are clamped up to this
  std::optional<int> quant_min, quant_max;
};

struct Plan;

struct LayerPlan {
  LayerInfo info;
  TensorQuant weights;
  TensorQuant activations;
  // Which rule decided: "default", "layers[2] 'Linear'", "skip_names[0] 'fc'".
  std::string decided_by;
  int rule_index = -1;  // index into quantize.layers; -1 default
  SourceLoc loc;        // the deciding rule's location
  bool skipped = false;
  // Set when the backend keeps this layer float in this mode although the
  // spec asks for a format (no kernel for the layer kind, native activations
  // where the kernels need quantized ones): the reason, as `inspect` shows it.
  std::string float_reason;
  // Cross-layer equalization: the layers this one is equalized with (the
  // one before it and the one after it in a chain), found in the graph.
  std::vector<std::string> equalized_with;
  // SmoothQuant and AWQ: the op whose output channels absorb this layer's
  // per-input-channel scale (a LayerNorm, or the layer before it), found in
  // the graph; "" when there is none.
  std::string smoothed_by;
  bool quantized() const {
    return !skipped && float_reason.empty() && (weights.quantized() || activations.quantized());
  }
  // Why the layer stays float ("" when it is quantized).
  std::string why_float() const;
  // The algorithms that change this layer, in the order they run
  // ("smoothquant", "gptq", "bias_correction"); empty when it stays float.
  std::vector<std::string> algorithms(const Plan& plan) const;
};

// The contract between the core and a backend: everything a backend needs
// to know about the spec is here, resolved and located.
struct Plan {
  Mode mode = Mode::kWeightOnly;
  std::string algorithm = "minmax";  // default observer (quantize.algorithm)
  SourceLoc algorithm_loc;
  AlgorithmSettings algorithms;  // the error-correcting algorithms (algorithms.h)
  std::string backend_requested, backend_resolved;
  BackendOptions options;  // quantize.backend_kwargs, typed by the backend's schema
  // The backend's qparam constraints: what the library's weight rounding
  // (GPTQ, AWQ, bias correction) applies, as the backend will.
  QParamConstraints constraints;
  std::string device = "cpu";
  std::vector<LayerPlan> layers;
  std::vector<std::string> warnings;
  size_t num_quantized() const;
  const LayerPlan* find(const std::string& name) const;
};

// Shell-style wildcard match (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`; `\`
// makes the next character literal), case-sensitive.
bool wildcard_match(const std::string& pattern, const std::string& text);

// Does a pattern select this layer (qualified name first, then class name,
// then the canonical kind name)? A pattern that starts with `=` is an
// exact name: `=seq.l[1]` selects the layer named `seq.l[1]` and nothing
// else (no wildcards, no class names); tune writes its rules this way.
bool pattern_selects(const std::string& pattern, const LayerInfo& layer);

// The pattern that selects exactly the layer named `name`: "=" + name.
std::string exact_name_pattern(const std::string& name);

// Applies the defaults, the `layers` rules in order (later ones win) and
// `skip_names` last. Validates per-layer settings against the layer (axis in
// range, granularity allowed for the dtype): throws SpecError with the rule's
// location.
Plan build_plan(const Spec& spec, const std::vector<LayerInfo>& layers);

nlohmann::json plan_to_json(const Plan& plan);

}  // namespace tq
