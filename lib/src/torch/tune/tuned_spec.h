// tuned_spec.yaml: the spec that rebuilds tune's artifact. Not installed.
#pragma once

#include <string>
#include <vector>

#include "taoquant/json.h"

#include "simulator.h"
#include "taoquant/plan.h"
#include "taoquant/spec.h"

namespace tq::tune {

// The tuned spec's tree: the spec without quantize.tune and
// quantize.sensitivity, one exact-name rule (`module_name: "=<layer>"`,
// exact_name_pattern) per layer of `layers` that `a` quantizes, with the
// weight setting the simulator used, and the others in skip_names; with
// `timing_cache` (non-empty) as quantize.timing_cache.
nlohmann::json tuned_tree(const Spec& spec, const Plan& plan, const std::vector<SimLayer>& layers,
                          const Assignment& a, const std::string& timing_cache);

// Checks that `tuned` (the tuned spec, read back) plans for each layer of
// `layers` exactly the format `a` gives it (float where `a` has none):
// RuntimeError (exit 1) naming the layer, the rule and both formats
// otherwise, before the spec is run or written.
void check_tuned_plan(const Spec& tuned, const Plan& plan, const std::vector<SimLayer>& layers,
                      const Assignment& a);

}  // namespace tq::tune
