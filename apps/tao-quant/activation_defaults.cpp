// static_ptq activation defaults and the console/report notes about
// activation formats (see docs/spec.md, "Activations in static_ptq").
#include <spdlog/spdlog.h>

#include "cli.h"
#include "taoquant/pipeline.h"

namespace tqcli {

namespace {

// Whether the spec names an activation dtype anywhere (the default, or a
// layer rule's activations).
bool activations_set(const tq::Spec& spec) {
  if (spec.locs.count("quantize.default_activation_dtype")) return true;
  for (const auto& rule : spec.quantize.layers)
    if (rule.activations && rule.activations->dtype) return true;
  return false;
}

}  // namespace

std::string apply_static_activation_default(tq::Spec& spec) {
  auto& q = spec.quantize;
  if (q.mode != tq::Mode::kStatic || activations_set(spec)) return "";
  // fp8 weights get fp8 activations (ModelOpt's FP8 recipe); everything
  // else int8, the dtype static int8 kernels take (LibTorch runs it as uint8).
  const bool fp8 =
      q.default_layer_dtype == tq::DType::kFp8E4M3 || q.default_layer_dtype == tq::DType::kFp8E5M2;
  q.default_activation_dtype = fp8 ? q.default_layer_dtype : tq::DType::kInt8;
  const std::string name(tq::to_string(q.default_activation_dtype));
  spec.resolved["quantize"]["default_activation_dtype"] = name;
  return "static_ptq with no activation dtype in the spec: activations default to " + name +
         " (set quantize.default_activation_dtype to choose)";
}

std::string native_activation_warning(const tq::Plan& plan) {
  if (plan.mode != tq::Mode::kStatic) return "";
  for (const auto& l : plan.layers)
    if (l.quantized() && l.activations.quantized()) return "";
  return "static_ptq quantized no activation: they are native. Set "
         "quantize.default_activation_dtype=int8 (or remove it: static_ptq then defaults to "
         "int8), or use quantize.mode=weight_only_ptq";
}

std::vector<std::string> activation_notes(const tq::QuantizeOutcome& out) {
  size_t narrowed = 0;
  std::string from, to;
  for (const auto& r : out.layers) {
    const tq::LayerPlan* lp = out.plan.find(r.name);
    if (!lp || r.kept_float || !lp->activations.quantized()) continue;
    const std::string planned(tq::to_string(lp->activations.dtype));
    const std::string ran = r.activation_format.substr(0, r.activation_format.find('/'));
    if (ran != "float" && !ran.empty() && ran != planned) {
      ++narrowed;
      from = planned;
      to = ran;
    }
  }
  if (!narrowed) return {};
  return {"activations: " + from + " in the plan, run as " + to + " by the " +
          out.resolved_backend + " engine on " + std::to_string(narrowed) +
          " layer(s): its static kernels take unsigned 8-bit activations (256 levels as well)"};
}

}  // namespace tqcli
