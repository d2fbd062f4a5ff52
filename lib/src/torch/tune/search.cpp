#include "search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "taoquant/backend.h"
#include "taoquant/error.h"
#include "taoquant/strings.h"

namespace tq::tune {

namespace {

std::optional<double> number(const nlohmann::json& t, const char* key) {
  if (!t.contains(key) || !t[key].is_number()) return std::nullopt;
  return t[key].get<double>();
}

DType current(const Assignment& a, const std::string& layer) {
  auto it = a.find(layer);
  return it == a.end() ? DType::kNative : it->second;
}

}  // namespace

TuneSettings read_settings(const Spec& spec) {
  const auto q = spec.resolved.value("quantize", nlohmann::json::object());
  if (!q.contains("tune") || !q["tune"].is_object())
    throw SpecError(spec.loc("quantize"),
                    "tao-quant tune needs quantize.tune, e.g. quantize.tune: {formats: [int8, "
                    "int4, native], max_top1_drop: 0.5}");
  const auto& j = q["tune"];
  TuneSettings t;
  std::vector<std::string> names{"int8", "native"};
  if (j.contains("formats")) {
    names.clear();
    for (const auto& f : j["formats"])
      names.push_back(f.is_string() ? f.get<std::string>() : f.dump());
  }
  for (DType d : parse_formats(names, spec.loc("quantize.tune.formats"), "quantize.tune.formats")) {
    if (d == DType::kNative)
      t.allow_float = true;
    else
      t.formats.push_back(d);
  }
  for (const auto& d : gate_table())
    if (d.uses & kTuneGate)
      if (auto v = number(j, d.name)) t.gates.limits[d.gate] = *v;
  t.time_budget_s = number(j, "time_budget_s").value_or(600);
  t.data = j.value("data", "");
  t.search = j.value("search", "greedy");
  t.samples = static_cast<size_t>(number(j, "samples").value_or(2000));
  if (t.formats.empty())
    throw SpecError(spec.loc("quantize.tune.formats"),
                    "quantize.tune.formats: no quantized format to choose from (only native)");
  return t;
}

namespace {

// What candidate x measured for a tune gate (nullopt: not measured).
std::optional<double> measured(Gate g, const Measured& x, std::optional<double> float_top1) {
  switch (g) {
    case Gate::kMaxTop1Drop:
      if (x.m.top1 && float_top1) return *float_top1 - *x.m.top1;
      return std::nullopt;
    case Gate::kMinTop1Agreement:
      return x.m.top1_agreement;
    case Gate::kMinSqnrDb:
      return x.m.sqnr_db;
    case Gate::kEffectiveBits:
      return x.bits;
    case Gate::kMinSpeedup:
      return x.speedup;
    default:
      return std::nullopt;
  }
}

}  // namespace

std::string failed_gate(const TuneSettings& t, const Measured& x, std::optional<double> float_top1,
                        double* shortfall, bool simulated) {
  std::string first;
  double off = 0;
  for (const auto& [gate, limit] : t.gates.limits) {
    const auto value = measured(gate, x, float_top1);
    if (!value && simulated && gate == Gate::kMinSpeedup) continue;
    if (value && t.gates.holds(gate, *value)) continue;
    const GateDef& d = gate_def(gate);
    // Unmeasured (or NaN): as far off as a value can be, ranked last.
    const double miss = value ? std::abs(*value - limit) / d.scale : 0;
    off += std::isfinite(miss) && value ? miss : 1e9;
    if (first.empty())
      first = value ? t.gates.describe(gate, *value)
                    : std::string(d.name) + " " + format_fixed(limit, 2) + ": not measured";
  }
  if (shortfall) *shortfall = off;
  return first;
}

void check_gates_measurable(const Spec& spec, const TuneSettings& t) {
  if (!t.gates.has(Gate::kMinSpeedup)) return;
  const auto b =
      BackendRegistry::instance().resolve(spec.quantize.backend, spec.loc("quantize.backend"));
  const BackendOptions options = check_capabilities(spec, b);
  const bool off = options.has("latency_check") && !options.get_bool("latency_check");
  if (b.info->caps.for_mode(spec.quantize.mode).times_model && !off) return;
  throw SpecError(spec.loc("quantize.tune.min_speedup"),
                  "quantize.tune.min_speedup: backend '" + b.info->name + "' in mode " +
                      std::string(to_string(spec.quantize.mode)) +
                      (off ? " with backend_kwargs.latency_check false times nothing, so"
                           : " does not time the quantized model against float, so") +
                      " tune cannot measure a speedup; remove the gate (evaluate's "
                      "evaluate.gates.min_speedup measures any artifact)");
}

// The float layers, effective bits and speedup of a real run.
Measured measured_run(const Session& s, const QuantizeOutcome& out, const Metrics& m) {
  Measured x;
  x.m = m;
  Assignment real;
  for (const auto& r : out.layers) {
    if (r.kept_float) continue;
    for (const auto& lp : out.plan.layers)
      if (lp.info.name == r.name && lp.weights.quantized()) real[r.name] = lp.weights.dtype;
  }
  x.bits = effective_bits(s.sim().layers(), real);
  for (const auto& l : s.sim().layers())
    if (!real.count(l.name)) ++x.float_layers;
  const auto lat = out.report.value("backend", nlohmann::json::object())
                       .value("meta", nlohmann::json::object())
                       .value("latency_check", nlohmann::json::array());
  for (const auto& e : lat)
    if (e.contains("int8_ms") && e.value("int8_ms", 0.0) > 0) {
      const double sp = e.value("fp32_ms", 0.0) / e.value("int8_ms", 1.0);
      x.speedup = x.speedup ? std::min(*x.speedup, sp) : sp;
    }
  return x;
}

void apply_move(Assignment& a, const Move& m) {
  if (m.to == DType::kNative)
    a.erase(m.layer);
  else
    a[m.layer] = m.to;
}

std::string describe(const Move& m) {
  return m.layer + " " + std::string(to_string(m.from)) + " -> " + std::string(to_string(m.to));
}

nlohmann::json formats_json(const Assignment& a, const std::vector<SimLayer>& layers) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& l : layers) {
    auto it = a.find(l.name);
    j[l.name] = std::string(to_string(it == a.end() ? DType::kNative : it->second));
  }
  return j;
}

nlohmann::json settings_json(const TuneSettings& t) {
  auto formats = names_of(t.formats);
  if (t.allow_float) formats.push_back("native");
  nlohmann::json j{{"formats", formats},
                   {"search", t.search},
                   {"time_budget_s", t.time_budget_s},
                   {"samples", t.samples},
                   {"data", t.data.empty() ? "default" : t.data}};
  for (const auto& [gate, limit] : t.gates.limits) j[gate_def(gate).name] = limit;
  return j;
}

bool better(const Measured& a, const std::string& a_failed, double a_short, const Measured& b,
            const std::string& b_failed, double b_short) {
  if (a_failed.empty() != b_failed.empty()) return a_failed.empty();
  if (!a_failed.empty() && a_short != b_short) return a_short < b_short;
  if (a.float_layers != b.float_layers) return a.float_layers < b.float_layers;
  if (std::abs(a.bits - b.bits) > 1e-9) return a.bits < b.bits;
  return a.m.sqnr_db > b.m.sqnr_db;
}

std::vector<DType> ladder(const SimLayer& l, const TuneSettings& t) {
  std::vector<DType> out;
  for (DType d : t.formats)
    if (std::find(l.formats.begin(), l.formats.end(), d) != l.formats.end()) out.push_back(d);
  std::stable_sort(out.begin(), out.end(),
                   [](DType a, DType b) { return format_bits(a) < format_bits(b); });
  if (t.allow_float) out.push_back(DType::kNative);
  return out;
}

Assignment cheapest(const std::vector<SimLayer>& layers, const TuneSettings& t) {
  Assignment a;
  for (const auto& l : layers) {
    const auto steps = ladder(l, t);
    if (!steps.empty() && steps.front() != DType::kNative) a[l.name] = steps.front();
  }
  return a;
}

NoiseTable noise_table(const SensitivityReport& r) {
  NoiseTable n;
  for (const auto& l : r.layers) {
    n[l.name][DType::kNative] = 0;
    for (const auto& f : l.alone)
      n[l.name][f.format] = std::isfinite(f.sqnr_db) ? std::pow(10.0, -f.sqnr_db / 10.0) : 0.0;
  }
  return n;
}

std::optional<Move> next_move(const std::vector<SimLayer>& layers, const Assignment& a,
                              const NoiseTable& nsr, const TuneSettings& t) {
  struct Option {
    Move move;
    double gain, score;
  };
  std::vector<Option> options;
  double max_gain = 0;
  for (const auto& l : layers) {
    const auto steps = ladder(l, t);
    const DType cur = current(a, l.name);
    auto it = std::find(steps.begin(), steps.end(), cur);
    if (it == steps.end() || std::next(it) == steps.end()) continue;
    const DType to = t.search == "revert_worst" ? DType::kNative : *std::next(it);
    if (to == DType::kNative && !t.allow_float) continue;
    const auto& n = nsr.at(l.name);
    const double gain = n.at(cur) - n.at(to);
    if (t.search == "revert_worst") {
      options.push_back({{l.name, cur, to}, gain, n.at(cur)});  // the worst SQNR now
      continue;
    }
    if (t.gates.has(Gate::kEffectiveBits)) {
      Assignment next = a;
      next[l.name] = to;
      if (to == DType::kNative) next.erase(l.name);
      if (!t.gates.holds(Gate::kEffectiveBits, effective_bits(layers, next))) continue;
    }
    const double bits = double(format_bits(to) - format_bits(cur)) * double(l.weight_params);
    options.push_back({{l.name, cur, to}, gain, gain / std::max(bits, 1.0)});
    max_gain = std::max(max_gain, gain);
  }
  // Greedy weighs noise removed per added bit, among the moves that remove a
  // real share of it (>= 10% of the best one): a tiny layer whose change
  // removes next to nothing is not worth a step however cheap it is.
  std::optional<Move> best;
  double best_score = -1e300;
  for (const auto& o : options) {
    if (t.search != "revert_worst" && o.gain < 0.1 * max_gain) continue;
    if (o.score > best_score) {
      best_score = o.score;
      best = o.move;
    }
  }
  return best;
}

std::string overrun_note(double budget_s, double elapsed_s) {
  if (elapsed_s <= budget_s) return "";
  const std::string note = "the time budget of " + format_fixed(budget_s, 3) +
                           " s was exceeded: tune took " + format_fixed(elapsed_s, 1) +
                           " s (setup, the sensitivity table and one real quantize run are the "
                           "least it does)";
  spdlog::warn("tune: {}", note);
  return note;
}

}  // namespace tq::tune
