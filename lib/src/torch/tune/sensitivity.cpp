// Per-layer sensitivity: each layer quantized alone in each candidate
// format, and the reverse view (each layer alone kept float), one forward
// pass over the evaluation sample each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "session.h"
#include "spec/node.h"
#include "taoquant/interrupt.h"
#include "taoquant/report.h"
#include "taoquant/steps.h"
#include "taoquant/strings.h"
#include "taoquant/tune.h"

namespace tq {

namespace {

using tune::Assignment;

// Every simulated layer in its planned format, else its first candidate.
Assignment all_quantized(const tune::Simulator& sim) {
  Assignment a;
  for (const auto& l : sim.layers())
    a[l.name] = l.planned != DType::kNative &&
                        std::find(l.formats.begin(), l.formats.end(), l.planned) != l.formats.end()
                    ? l.planned
                    : l.formats.front();
  return a;
}

std::optional<double> drop(const std::optional<double>& ref, const std::optional<double>& x) {
  if (!ref || !x) return std::nullopt;
  return *ref - *x;
}

void rank(std::vector<LayerSensitivity>& layers) {
  std::vector<size_t> order(layers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layers[a].float_gain_db > layers[b].float_gain_db;
  });
  for (size_t i = 0; i < order.size(); ++i) layers[order[i]].reverse_rank = static_cast<int>(i + 1);
  std::stable_sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) {
    if (a.worst_sqnr_db != b.worst_sqnr_db) return a.worst_sqnr_db < b.worst_sqnr_db;
    return a.name < b.name;
  });
  for (size_t i = 0; i < layers.size(); ++i) layers[i].rank = static_cast<int>(i + 1);
}

// What "all quantized" leaves out, in words ("" when nothing is).
std::string outside_plan_note(const SensitivityReport& r) {
  const auto& weights = r.outside_plan;
  if (weights.empty()) return "";
  std::string names;
  const size_t shown = std::min<size_t>(weights.size(), 3);
  for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + weights[i];
  if (weights.size() > shown) names += " and " + std::to_string(weights.size() - shown) + " more";
  const std::string head = std::to_string(weights.size()) + " layer call" +
                           (weights.size() > 1 ? "s" : "") +
                           " outside the plan ran float in these probes (" + names + ")";
  if (!r.outside_plan_quantized) return head + ", as backend '" + r.backend + "' runs them";
  return head + "; backend '" + r.backend +
         "' quantizes them, so the artifact has error that the all-quantized figure leaves out";
}

nlohmann::json finite(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

namespace tune {

SensitivityReport measure_sensitivity(Session& s, const TuneProgress& progress, size_t limit,
                                      bool reverse, double budget_s) {
  auto& sim = s.sim();
  SensitivityReport r;
  r.formats = s.formats();
  r.data = s.sample().description;
  r.samples = s.sample().samples;
  r.float_top1 = s.float_top1();
  if (sim.layers().empty())
    throw UsageError("sensitivity: no layer of this model can take any of the formats " +
                     join(names_of(r.formats)) + " with backend '" +
                     s.inspected().backend.info->name + "' in " +
                     std::string(to_string(s.plan().mode)));
  const Assignment all = all_quantized(sim);
  const auto t0 = std::chrono::steady_clock::now();
  auto base = s.measure(all, limit);
  limit = limit ? std::min(limit, r.samples) : r.samples;
  const size_t total = sim.layers().size() * (r.formats.size() + (reverse ? 1 : 0));
  const double cost = seconds_since(t0) * static_cast<double>(total);
  if (budget_s > 0 && cost > budget_s && limit > 32) {  // fewer samples per probe
    limit = std::max<size_t>(32, static_cast<size_t>(static_cast<double>(limit) * budget_s / cost));
    base = s.measure(all, limit);
  }
  r.all_sqnr_db = base.sqnr_db;
  r.all_agreement = base.top1_agreement;
  r.all_top1 = base.top1;
  size_t done = 0;
  for (const auto& l : sim.layers()) {
    LayerSensitivity ls{l.name, std::string(to_string(l.kind)), l.weight_params, {}, 0, 0, 0, 0, 0};
    ls.worst_sqnr_db = std::numeric_limits<double>::infinity();
    for (DType d : l.formats) {
      const auto m = s.measure({{l.name, d}}, limit);
      ls.alone.push_back({d, m.sqnr_db, m.top1_agreement, drop(r.float_top1, m.top1)});
      ls.worst_sqnr_db = std::min(ls.worst_sqnr_db, m.sqnr_db);
      if (progress) progress("sensitivity", ++done, total);
    }
    if (reverse) {
      Assignment others = all;
      others.erase(l.name);
      const auto m = s.measure(others, limit);
      ls.float_gain_db = m.sqnr_db - base.sqnr_db;
      ls.float_gain_agreement = m.top1_agreement - base.top1_agreement;
      if (progress) progress("sensitivity", ++done, total);
    }
    r.layers.push_back(ls);
  }
  rank(r.layers);
  r.reverse = reverse;
  r.samples = limit;
  r.forward_passes = s.forwards();
  r.outside_plan = sim.outside_plan();
  const BackendInfo& backend = *s.inspected().backend.info;
  r.backend = backend.name;
  r.outside_plan_quantized = backend.caps.for_mode(s.plan().mode).quantizes_unowned_calls;
  return r;
}

}  // namespace tune

SensitivityReport run_sensitivity(const Spec& spec, const SensitivityOptions& opts) {
  tune::Session s(spec, opts.formats, opts.data, opts.max_samples, opts.on_progress);
  return tune::measure_sensitivity(s, opts.on_progress);
}

SensitivityStage::SensitivityStage(const Spec& spec, SensitivityOptions opts,
                                   const InspectOutcome& run)
    : spec_(spec), opts_(std::move(opts)) {
  if (opts_.automatic && !spec.dataset.test_dataset && !spec.dataset.quant_calibration_dataset) {
    skipped_ =
        "no evaluation data: set dataset.test_dataset or dataset.quant_calibration_dataset "
        "(quantize.sensitivity: false turns this off)";
    return;
  }
  try {
    s_ = std::make_unique<tune::Session>(spec, run, opts_.formats);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    if (!opts_.automatic) throw;
    spdlog::debug("automatic sensitivity: {}", e.what());
    skipped_ = first_line(e.what());
  }
}

SensitivityStage::~SensitivityStage() = default;

nlohmann::json SensitivityStage::measure(const QuantRecord& record, size_t quantized_layers,
                                         size_t calibration_samples) {
  if (opts_.automatic) return measure_automatic(record, quantized_layers, calibration_samples);
  s_->read(opts_.data, opts_.max_samples);
  s_->start(opts_.on_progress, tune::input_ranges(record));
  return tune::measure_sensitivity(*s_, opts_.on_progress).to_json();
}

// The automatic table: about one calibration pass of C samples (64 when
// the run calibrates nothing), counted in samples, not seconds, so that the
// same inputs give the same report: its L x (F + 1) + 2 probes (each of the
// L layers alone in each of the F formats and alone float, all, none) of at
// least one sample each fit in C; else without the reverse view, L x F + 2;
// else none.
nlohmann::json SensitivityStage::measure_automatic(const QuantRecord& record,
                                                   size_t quantized_layers,
                                                   size_t calibration_samples) {
  nlohmann::json j{{"automatic", true}};
  if (skipped_.empty() && quantized_layers == 0) skipped_ = "no layer is quantized";
  const size_t pass = calibration_samples > 0 ? calibration_samples : 64;
  const size_t formats = s_ ? s_->formats().size() : 1;
  const size_t full = quantized_layers * (formats + 1) + 2, alone = quantized_layers * formats + 2;
  if (skipped_.empty() && alone > pass)
    skipped_ = "its " + std::to_string(alone) +
               " forward passes of one sample each (every layer alone, all, none) are more than "
               "the calibration pass's " +
               std::to_string(pass) +
               " samples it is sized to; quantize.sensitivity: true measures it whatever it costs";
  if (!skipped_.empty()) {
    j["skipped"] = skipped_;
    return j;
  }
  try {
    s_->read(opts_.data, automatic_sensitivity_samples(quantized_layers, calibration_samples));
    s_->start(opts_.on_progress, tune::input_ranges(record));
    j.update(tune::measure_sensitivity(*s_, opts_.on_progress, 0, full <= pass).to_json());
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::debug("automatic sensitivity: {}", e.what());
    j["skipped"] = first_line(e.what());
  }
  return j;
}

std::optional<SensitivityOptions> sensitivity_request(const Spec& spec, bool by_default) {
  const auto q = spec.resolved.value("quantize", nlohmann::json::object());
  if (!q.contains("sensitivity")) {
    if (!by_default) return std::nullopt;
    SensitivityOptions o;
    o.automatic = true;
    return o;
  }
  const auto& j = q["sensitivity"];
  if (!j.is_object()) {  // a boolean (the spec reader checked it), maybe a quoted "yes"
    const bool on =
        j.is_boolean()
            ? j.get<bool>()
            : j.is_string() && spec_detail::parse_bool(j.get<std::string>()).value_or(false);
    if (!on) return std::nullopt;
  }
  SensitivityOptions o;
  o.max_samples = 256;  // a report's table: the ranking, not the gates
  if (!j.is_object()) return o;
  if (j.contains("formats")) {
    std::vector<std::string> names;
    for (const auto& f : j["formats"])
      names.push_back(f.is_string() ? f.get<std::string>() : f.dump());
    o.formats = parse_formats(names, spec.loc("quantize.sensitivity.formats"),
                              "quantize.sensitivity.formats");
  }
  if (j.contains("samples")) o.max_samples = j["samples"].get<size_t>();
  o.data = j.value("data", "");
  return o;
}

size_t automatic_sensitivity_samples(size_t quantized_layers, size_t calibration_samples) {
  const size_t pass = calibration_samples > 0 ? calibration_samples : 64;
  const size_t probes = 2 * quantized_layers + 2;
  return std::clamp<size_t>((pass + probes - 1) / probes, 1, 64);
}

nlohmann::json SensitivityReport::to_json() const {
  nlohmann::json layers_j = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json alone_j = nlohmann::json::object();
    for (const auto& f : l.alone) {
      nlohmann::json e{{"sqnr_db", finite(f.sqnr_db)}, {"top1_agreement", f.top1_agreement}};
      if (f.top1_drop) e["top1_drop"] = *f.top1_drop;
      alone_j[std::string(to_string(f.format))] = e;
    }
    layers_j.push_back(
        {{"name", l.name},
         {"kind", l.kind},
         {"weight_params", l.weight_params},
         {"rank", l.rank},
         {"alone", alone_j},
         {"worst_sqnr_db", finite(l.worst_sqnr_db)},
         {"reverse_rank", reverse ? nlohmann::json(l.reverse_rank) : nlohmann::json()},
         {"float_gain_db", reverse ? finite(l.float_gain_db) : nlohmann::json()},
         {"float_gain_top1_agreement",
          reverse ? nlohmann::json(l.float_gain_agreement) : nlohmann::json()}});
  }
  nlohmann::json j{
      {"formats", names_of(formats)},
      {"data", data},
      {"samples", samples},
      {"forward_passes", forward_passes},
      {"reverse", reverse},
      {"all_quantized", {{"sqnr_db", finite(all_sqnr_db)}, {"top1_agreement", all_agreement}}},
      {"layers", layers_j}};
  if (float_top1) j["float_top1"] = *float_top1;
  if (all_top1) j["all_quantized"]["top1"] = *all_top1;
  if (!outside_plan.empty()) {
    j["all_quantized"]["float_outside_plan"] = outside_plan;
    j["all_quantized"]["backend_quantizes_outside_plan"] = outside_plan_quantized;
    j["all_quantized"]["note"] = outside_plan_note(*this);
  }
  return j;
}

std::string format_sensitivity_table(const SensitivityReport& r) {
  std::vector<std::string> head{"rank", "layer", "kind", "params"};
  for (DType d : r.formats) head.push_back(std::string(to_string(d)) + " alone: SQNR dB / agree %");
  head.insert(head.end(), {"float alone: +dB", "rev. rank"});
  std::vector<std::vector<std::string>> rows;
  char buf[64];
  for (const auto& l : r.layers) {
    std::vector<std::string> row{std::to_string(l.rank), l.name, l.kind,
                                 std::to_string(l.weight_params)};
    for (DType d : r.formats) {
      auto it = std::find_if(l.alone.begin(), l.alone.end(),
                             [&](const FormatEffect& f) { return f.format == d; });
      if (it == l.alone.end()) {
        row.push_back("-");
        continue;
      }
      std::snprintf(buf, sizeof buf, "%7.2f / %6.2f", it->sqnr_db, it->top1_agreement);
      row.push_back(buf);
    }
    std::snprintf(buf, sizeof buf, "%+.2f", l.float_gain_db);
    row.push_back(buf);
    row.push_back(std::to_string(l.reverse_rank));
    rows.push_back(row);
  }
  std::snprintf(buf, sizeof buf, "%.2f dB, top-1 agreement %.2f %%", r.all_sqnr_db,
                r.all_agreement);
  std::string tail = "all quantized: " + std::string(buf);
  if (r.all_top1 && r.float_top1) {
    std::snprintf(buf, sizeof buf, "; top-1 %.2f %% (float %.2f %%)", *r.all_top1, *r.float_top1);
    tail += buf;
  }
  if (!r.outside_plan.empty()) tail += "\n" + outside_plan_note(r);
  return format_table(head, rows) + tail + "\ndata: " + r.data + " (" +
         std::to_string(r.forward_passes) + " forward passes)\n";
}

}  // namespace tq
