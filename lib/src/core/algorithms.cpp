// The pass table: one row per error-correcting algorithm, read by the spec
// reader (its key and settings), validation (its modes), the plan (the
// layers it changes), the pipeline (its stage), `backends --json`, `--help`
// and the report (its settings).
#include "taoquant/algorithms.h"

#include <algorithm>
#include <climits>

#include "spec/values.h"
#include "taoquant/plan.h"
#include "taoquant/strings.h"

namespace tq {

using spec_detail::Node;
using spec_detail::Section;

namespace {

// `true | false`, or a mapping of the algorithm's settings (`read` reads
// them); either way the key's location is kept. Returns whether it is on.
template <typename Read>
bool read_switch(const Node& n, const std::string& path, SourceLoc& loc,
                 const std::vector<std::string>& fields, Read read) {
  loc = n.loc;
  if (n.is_scalar()) return spec_detail::to_bool(n, path);
  Section sub(n, path);
  sub.only(fields);
  read(sub);
  return true;
}

// quantize.weight_rounding: a method name, or {method, damp, block_size,
// act_order, scale_search, sequential}.
void read_weight_rounding(const Node& n, const std::string& path, AlgorithmSettings& a) {
  using namespace spec_detail;
  a.weight_rounding_loc = n.loc;
  if (n.is_scalar()) {
    a.weight_rounding = to_enum(rounding_table())(n, path);
    return;
  }
  Section s(n, path);
  s.only({"method", "damp", "block_size", "act_order", "scale_search", "sequential"});
  if (!s.get("method"))
    fail(n, path,
         "needs method: " + rounding_table().joined() +
             " (e.g. {method: gptq, damp: 0.01, block_size: 128, act_order: false})");
  s.read("method", a.weight_rounding, to_enum(rounding_table()));
  s.read("damp", a.gptq.damp, positive_number());
  s.read("block_size", a.gptq.block_size, int_at_least(1));
  s.read("act_order", a.gptq.act_order, to_bool);
  s.read("scale_search", a.gptq.scale_search, to_bool);
  s.read("sequential", a.gptq.sequential, to_bool);
}

// The stage a pass runs in, whatever the mode.
std::function<std::string(Mode)> always(std::string stage) {
  return [stage](Mode) { return stage; };
}

std::string setting_key(std::string_view key) {
  return "quantize." + std::string(key);
}

// A layer whose weights are quantized (what weight passes change).
bool weights_quantized(const LayerPlan& lp) {
  return lp.quantized() && lp.weights.quantized();
}

AlgorithmPass equalization_pass() {
  return {"equalization",
          "true, or {iterations: 20, absorb_bias: false}: cross-layer equalization of conv/linear "
          "pairs joined by ReLU, ReLU6, max-pooling or nothing (after BatchNorm); the float model "
          "computes the same; absorb_bias: DFQ's high-bias absorption",
          {Mode::kWeightOnly, Mode::kStatic, Mode::kDynamic},
          always("equalization"),
          /*needs_data=*/false,
          /*whole_model=*/true,
          [](const Node& n, const std::string& path, AlgorithmSettings& a) {
            a.equalization.enabled = read_switch(
                n, path, a.equalization_loc, {"iterations", "absorb_bias"}, [&](const Section& e) {
                  e.read("iterations", a.equalization.iterations, spec_detail::int_at_least(1));
                  e.read("absorb_bias", a.equalization.absorb_bias, spec_detail::to_bool);
                });
          },
          [](const AlgorithmSettings& a) { return a.equalization.enabled; },
          [](const AlgorithmSettings& a) { return a.equalization_loc; },
          [](const AlgorithmSettings& a, nlohmann::json& j) {
            j["equalization"] = a.equalization.enabled;
            if (a.equalization.enabled) j["equalization_iterations"] = a.equalization.iterations;
          },
          [](const LayerPlan& lp, const Plan&) {
            return lp.equalized_with.empty() ? "" : "equalization";
          },
          [](const AlgorithmSettings&) { return setting_key("equalization"); }};
}

AlgorithmPass smoothquant_pass() {
  return {"smoothquant",
          "true, or {alpha: 0.5}: Linear layers whose input comes from a LayerNorm or a layer: "
          "moves the input's outlier channels into the weights with a per-channel scale folded "
          "into the op before (SmoothQuant)",
          {Mode::kStatic, Mode::kDynamic},
          always("smoothing"),
          /*needs_data=*/true,
          /*whole_model=*/false,
          [](const Node& n, const std::string& path, AlgorithmSettings& a) {
            a.smoothquant.enabled =
                read_switch(n, path, a.smoothquant_loc, {"alpha"}, [&](const Section& e) {
                  e.read("alpha", a.smoothquant.alpha, spec_detail::number_in(0.0, 1.0));
                });
          },
          [](const AlgorithmSettings& a) { return a.smoothquant.enabled; },
          [](const AlgorithmSettings& a) { return a.smoothquant_loc; },
          [](const AlgorithmSettings& a, nlohmann::json& j) {
            j["smoothquant"] = a.smoothquant.enabled;
            if (a.smoothquant.enabled) j["smoothquant_alpha"] = a.smoothquant.alpha;
          },
          [](const LayerPlan& lp, const Plan& plan) {
            const bool on = plan.algorithms.smoothquant.enabled && lp.quantized() &&
                            !lp.smoothed_by.empty() && lp.activations.quantized() &&
                            plan.mode != Mode::kWeightOnly;
            return on ? "smoothquant" : "";
          },
          [](const AlgorithmSettings&) { return setting_key("smoothquant"); }};
}

AlgorithmPass awq_pass() {
  return {"awq",
          "true, or {grid: 20}: Linear layers whose input comes from a LayerNorm or a layer: "
          "searches the per-input-channel scale that least changes the quantized layer's output on "
          "the calibration data, folded into the op before (AWQ)",
          {Mode::kWeightOnly},
          always("smoothing"),
          /*needs_data=*/true,
          /*whole_model=*/false,
          [](const Node& n, const std::string& path, AlgorithmSettings& a) {
            a.awq.enabled = read_switch(n, path, a.awq_loc, {"grid"}, [&](const Section& e) {
              e.read("grid", a.awq.grid, spec_detail::int_at_least(2));
            });
          },
          [](const AlgorithmSettings& a) { return a.awq.enabled; },
          [](const AlgorithmSettings& a) { return a.awq_loc; },
          [](const AlgorithmSettings& a, nlohmann::json& j) {
            j["awq"] = a.awq.enabled;
            if (a.awq.enabled) j["awq_grid"] = a.awq.grid;
          },
          [](const LayerPlan& lp, const Plan& plan) {
            const bool on = plan.algorithms.awq.enabled && weights_quantized(lp) &&
                            !lp.smoothed_by.empty() && plan.mode == Mode::kWeightOnly;
            return on ? "awq" : "";
          },
          [](const AlgorithmSettings&) { return setting_key("awq"); }};
}

AlgorithmPass weight_rounding_pass() {
  return {"weight_rounding",
          "nearest (default) | gptq, or {method: gptq, damp: 0.01, block_size: 128, act_order: "
          "true, scale_search: true, sequential: true}: how quantized weights are rounded "
          "(sequential: each layer against the partly rounded model's inputs); per layer: "
          "weights.rounding",
          {Mode::kWeightOnly},
          always("weights"),
          /*needs_data=*/true,
          /*whole_model=*/false,
          read_weight_rounding,
          [](const AlgorithmSettings& a) { return a.weight_rounding != Rounding::kNearest; },
          [](const AlgorithmSettings& a) { return a.weight_rounding_loc; },
          [](const AlgorithmSettings& a, nlohmann::json& j) {
            j["weight_rounding"] = std::string(to_string(a.weight_rounding));
            if (a.weight_rounding == Rounding::kGptq)
              j["gptq"] = {{"damp", a.gptq.damp},
                           {"block_size", a.gptq.block_size},
                           {"act_order", a.gptq.act_order},
                           {"scale_search", a.gptq.scale_search},
                           {"sequential", a.gptq.sequential}};
          },
          // Per layer: the layer's own rounding (quantize.layers[].weights.rounding).
          [](const LayerPlan& lp, const Plan&) {
            const bool on = weights_quantized(lp) && lp.weights.rounding != Rounding::kNearest;
            return on ? std::string(to_string(lp.weights.rounding)) : "";
          },
          [](const AlgorithmSettings& a) {
            return setting_key("weight_rounding") + " " + std::string(to_string(a.weight_rounding));
          }};
}

AlgorithmPass bias_correction_pass() {
  return {"bias_correction",
          "true: subtract each quantized layer's mean output error, measured on the calibration "
          "data, from its bias (static_ptq: from the weights and input quantization the backend "
          "chose, after BatchNorm folding)",
          {Mode::kWeightOnly, Mode::kStatic},
          // In static mode the backend corrects the biases it quantized
          // (correct_biases, ModeCaps::bias_correction).
          [](Mode m) { return std::string(m == Mode::kStatic ? "" : "weights"); },
          /*needs_data=*/true,
          /*whole_model=*/false,
          [](const Node& n, const std::string& path, AlgorithmSettings& a) {
            a.bias_correction = spec_detail::to_bool(n, path);
            a.bias_correction_loc = n.loc;
          },
          [](const AlgorithmSettings& a) { return a.bias_correction; },
          [](const AlgorithmSettings& a) { return a.bias_correction_loc; },
          [](const AlgorithmSettings& a, nlohmann::json& j) {
            j["bias_correction"] = a.bias_correction;
          },
          [](const LayerPlan& lp, const Plan& plan) {
            return plan.algorithms.bias_correction && weights_quantized(lp) ? "bias_correction"
                                                                            : "";
          },
          [](const AlgorithmSettings&) { return setting_key("bias_correction"); }};
}

std::vector<AlgorithmPass>& rows() {
  static std::vector<AlgorithmPass> r{equalization_pass(), smoothquant_pass(), awq_pass(),
                                      weight_rounding_pass(), bias_correction_pass()};
  return r;
}

}  // namespace

const std::vector<AlgorithmPass>& algorithm_passes() {
  return rows();
}

const AlgorithmPass* find_algorithm(std::string_view key) {
  for (const auto& p : algorithm_passes())
    if (p.key == key) return &p;
  return nullptr;
}

ScopedAlgorithmPass::ScopedAlgorithmPass(AlgorithmPass pass) : key_(pass.key) {
  if (find_algorithm(key_)) throw Error(ExitCode::kUsage, "algorithm '" + key_ + "' exists");
  rows().push_back(std::move(pass));
}

ScopedAlgorithmPass::~ScopedAlgorithmPass() {
  auto& r = rows();
  r.erase(std::remove_if(r.begin(), r.end(), [&](const AlgorithmPass& p) { return p.key == key_; }),
          r.end());
}

AlgorithmPass other_pass(std::string_view key, std::string_view help, std::vector<Mode> modes,
                         bool needs_data) {
  const std::string k(key);
  auto on = [k](const AlgorithmSettings& a) {
    auto it = a.other.find(k);
    return it != a.other.end() && it->second.value != false;
  };
  return {key,
          help,
          std::move(modes),
          always(k),
          needs_data,
          /*whole_model=*/false,
          [k](const Node& n, const std::string& path, AlgorithmSettings& a) {
            auto& o = a.other[k];
            o.loc = n.loc;
            o.value = n.is_scalar() ? nlohmann::json(spec_detail::to_bool(n, path))
                                    : spec_detail::to_json_map(n, path);
          },
          on,
          [k](const AlgorithmSettings& a) {
            auto it = a.other.find(k);
            return it == a.other.end() ? SourceLoc{} : it->second.loc;
          },
          [k](const AlgorithmSettings& a, nlohmann::json& j) {
            auto it = a.other.find(k);
            j[k] = it == a.other.end() ? nlohmann::json(false) : it->second.value;
          },
          [k, on](const LayerPlan& lp, const Plan& plan) {
            return on(plan.algorithms) && weights_quantized(lp) ? k : "";
          },
          [k](const AlgorithmSettings&) { return setting_key(k); }};
}

bool AlgorithmSettings::needs_data() const {
  return std::any_of(algorithm_passes().begin(), algorithm_passes().end(),
                     [&](const AlgorithmPass& p) { return p.needs_data && p.on(*this); });
}

void check_algorithm_modes(const AlgorithmSettings& a, Mode mode) {
  for (const auto& p : algorithm_passes()) {
    if (!p.on(a) || std::find(p.modes.begin(), p.modes.end(), mode) != p.modes.end()) continue;
    throw SpecError(p.loc(a), "quantize." + std::string(p.key) + " applies to mode " +
                                  join(names_of(p.modes)) + " in this version, not " +
                                  std::string(to_string(mode)) +
                                  " (set quantize.mode, or remove the key)");
  }
}

nlohmann::json algorithms_to_json(const AlgorithmSettings& a) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& p : algorithm_passes()) p.to_json(a, j);
  return j;
}

std::vector<std::string> layer_algorithms(const LayerPlan& layer, const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& p : algorithm_passes()) {
    std::string name = p.on_layer(layer, plan);
    if (!name.empty()) out.push_back(std::move(name));
  }
  return out;
}

}  // namespace tq
