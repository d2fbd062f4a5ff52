// `tao-quant tune`: sensitivity, a search in simulation, then real quantize
// runs of the spec's backend, checked on the evaluation sample, until the
// gates hold or the time budget ends. The best candidate so far is always
// on disk (artifact, report, and the tuned_spec.yaml it was built from,
// which reproduces it byte for byte), also after SIGINT or SIGTERM; with
// validation data to select on, the result is also measured on the test set.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <spdlog/spdlog.h>
#include <torch/script.h>

#include "search.h"
#include "taoquant/calibration.h"
#include "taoquant/interrupt.h"
#include "taoquant/model.h"
#include "taoquant/result_files.h"
#include "taoquant/steps.h"
#include "taoquant/timing_cache.h"
#include "taoquant/tune.h"
#include "test_set.h"
#include "tuned_spec.h"

namespace tq {

namespace fs = std::filesystem;
using tune::Assignment;
using tune::Measured;

namespace {

using Clock = std::chrono::steady_clock;

// Copies a file through a temporary file and a rename (write_text_atomic).
void copy_atomic(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw RuntimeError("tune: cannot read '" + from + "'");
  write_text_atomic(to, std::string(std::istreambuf_iterator<char>(in), {}));
}

struct Candidate {
  Assignment a;
  Measured x;
  std::string failed;
  double shortfall = 0;
  int step = 0;
  std::string spec_text;  // the tuned spec a real run was built from
};

}  // namespace

namespace {

class Tuner {
 public:
  Tuner(const Spec& spec, const TuneOptions& opts)
      : spec_(spec),
        opts_(opts),
        t_(tune::read_settings(spec)),
        t0_(opts.started.value_or(Clock::now())) {
    dir_ = spec.effective_results_dir();
    user_cache_ = !spec.quantize.timing_cache.empty();
    cache_ = (fs::path(dir_) / "timing_cache.json").string();
  }

  TuneOutcome run();

 private:
  double elapsed() const { return seconds_since(t0_); }
  // What must still fit in the budget after the current phase: one real
  // run (the slowest so far, else as long as the setup took) and, in static
  // mode with a timing cache written here, the final rebuild.
  double reserve() const {
    const double run = slowest_real_s_ > 0 ? slowest_real_s_ : stage_s_.value("setup", 1.0);
    return run * (s_->plan().mode == Mode::kStatic && !user_cache_ ? 2 : 1);
  }
  bool out_of_time(double next_s) const {
    return elapsed() + next_s + reserve() > t_.time_budget_s;
  }
  void say(const std::string& line) {
    if (opts_.on_step) opts_.on_step(line);
  }
  nlohmann::json tuned_tree(const Assignment& a) const;
  Candidate real_step(const Assignment& a);
  tune::Metrics measure_artifact(const std::string& path);
  void start();
  void search();
  [[noreturn]] void interrupted(const Interrupted& e);
  nlohmann::json tune_json(const std::string& status, const Candidate& c) const;
  void record(const char* kind, const Candidate& c, const std::string& change, double seconds);
  void keep(const Candidate& c, const QuantizeOutcome& out);
  void plan_path();
  bool simulated_pass(size_t i);
  double predicted_db(size_t i) const;
  size_t next_by_db(size_t from, double db) const;
  size_t first_simulated_pass();
  Candidate verify(Assignment a);
  TuneOutcome finish();

  const Spec& spec_;
  TuneOptions opts_;
  tune::TuneSettings t_;
  Clock::time_point t0_;
  std::string dir_, cache_;
  bool user_cache_ = false;
  std::unique_ptr<tune::Session> s_;
  tune::NoiseTable nsr_;
  SensitivityReport sens_;
  nlohmann::json trace_ = nlohmann::json::array();
  std::optional<Candidate> best_;
  std::optional<QuantizeOutcome> best_out_;            // its run, paths in results_dir
  nlohmann::json stage_s_ = nlohmann::json::object();  // seconds per stage
  std::vector<Assignment> path_;
  std::vector<std::string> changes_;
  std::map<size_t, bool> sim_passed_;
  double slowest_real_s_ = 0, sim_s_ = 0;
  std::string budget_note_;  // what the time budget cut short, if anything
  std::string data_key_;     // the selection data's spec key
  int steps_ = 0, real_steps_ = 0;
};

// The tuned spec of `a`: tune's own timing cache (static mode) from the
// first real run on, so that every run and tuned_spec.yaml name it.
nlohmann::json Tuner::tuned_tree(const Assignment& a) const {
  const std::string cache = !user_cache_ && fs::exists(cache_) ? cache_ : "";
  return tune::tuned_tree(spec_, s_->plan(), s_->sim().layers(), a, cache);
}

tune::Metrics Tuner::measure_artifact(const std::string& path) {
  return s_->metrics_of(tune::artifact_outputs(path, s_->sample().batches));
}

void Tuner::record(const char* kind, const Candidate& c, const std::string& change,
                   double seconds) {
  nlohmann::json j{{"step", c.step},
                   {"kind", kind},
                   {"sqnr_db", std::isfinite(c.x.m.sqnr_db) ? nlohmann::json(c.x.m.sqnr_db)
                                                            : nlohmann::json(nullptr)},
                   {"top1_agreement", c.x.m.top1_agreement},
                   {"effective_bits", c.x.bits},
                   {"float_layers", c.x.float_layers},
                   {"gates", c.failed.empty() ? "pass" : c.failed},
                   {"seconds", seconds}};
  if (c.x.m.top1) j["top1"] = *c.x.m.top1;
  if (c.x.speedup) j["speedup"] = *c.x.speedup;
  if (!change.empty()) j["change"] = change;
  if (std::string(kind) == "quantize") j["formats"] = tune::formats_json(c.a, s_->sim().layers());
  trace_.push_back(j);
  char buf[160];
  std::snprintf(buf, sizeof buf, "[%3d] %-8s %6.2f dB  agree %6.2f%%  bits %5.2f  float %2zu  ",
                c.step, kind, c.x.m.sqnr_db, c.x.m.top1_agreement, c.x.bits, c.x.float_layers);
  std::string line = buf;
  if (c.x.m.top1) {
    std::snprintf(buf, sizeof buf, "top-1 %6.2f%%  ", *c.x.m.top1);
    line += buf;
  }
  say(line + (c.failed.empty() ? "pass" : "fails " + c.failed) +
      (change.empty() ? "" : "  (" + change + ")"));
}

// A better real candidate replaces the kept one: artifact, report and
// tuned_spec.yaml in the results dir, each written whole and renamed.
void Tuner::keep(const Candidate& c, const QuantizeOutcome& out) {
  if (best_ && !tune::better(c.x, c.failed, c.shortfall, best_->x, best_->failed, best_->shortfall))
    return;
  best_ = c;
  const fs::path dir(dir_);
  const std::string art = (dir / artifact_name(out.requested_backend)).string();
  best_out_ = out;
  best_out_->artifact_path = art;
  best_out_->report_path = (dir / "quantize_report.json").string();
  best_out_->report["artifact"]["path"] = art;
  nlohmann::json report = best_out_->report;
  report["tune"] = {{"status", "searching"}, {"best_step", c.step}, {"trace", trace_}};
  // One result (result_files.h): the report, with the copy's fingerprint, first.
  write_text_atomic(best_out_->report_path, report.dump(2) + "\n");
  copy_atomic(out.artifact_path, art);
  // The very text the run was built from: the spec the artifact embeds.
  write_text_atomic((dir / "tuned_spec.yaml").string(), c.spec_text);
}

// One real quantize run of `a` with the spec's backend, into a step folder;
// its spec tree is the tuned spec's, so the artifact embeds the same spec.
// Tune's own timing cache (static mode) is given to every run, which adds
// what it measures to it: each run's decisions are in the cache it names.
Candidate Tuner::real_step(const Assignment& a) {
  const auto t0 = Clock::now();
  const std::string text = spec_yaml(tuned_tree(a));
  Spec sp = parse_spec_text(text, (fs::path(dir_) / "tuned_spec.yaml").string());
  tune::check_tuned_plan(sp, s_->plan(), s_->sim().layers(), a);
  const std::string step_dir = (fs::path(dir_) / ".tune" / std::to_string(++real_steps_)).string();
  sp.quantize.results_dir = step_dir;  // the tree (embedded) keeps the real one
  QuantizeOptions qo;
  qo.verbose = opts_.verbose;
  qo.sensitivity_by_default = false;  // tune measures its own table
  qo.extend_timing_cache = !user_cache_;
  auto out = run_quantize(sp, qo);
  Candidate c{
      a, tune::measured_run(*s_, out, measure_artifact(out.artifact_path)), "", 0, ++steps_, text};
  c.failed = tune::failed_gate(t_, c.x, s_->float_top1(), &c.shortfall);
  const double secs = seconds_since(t0);
  slowest_real_s_ = std::max(slowest_real_s_, secs);
  record("quantize", c, "", secs);
  keep(c, out);
  std::error_code ec;
  fs::remove_all(step_dir, ec);
  return c;
}

// The search's path: the cheapest assignment, then one move at a time
// until no move is left. The moves depend only on the sensitivity table,
// so the whole path is known before anything is measured on it.
void Tuner::plan_path() {
  path_ = {tune::cheapest(s_->sim().layers(), t_)};
  changes_ = {""};
  while (auto mv = tune::next_move(s_->sim().layers(), path_.back(), nsr_, t_)) {
    Assignment a = path_.back();
    tune::apply_move(a, *mv);
    path_.push_back(a);
    changes_.push_back(tune::describe(*mv));
  }
}

// Whether path step i passes the gates in simulation (measured once).
bool Tuner::simulated_pass(size_t i) {
  auto it = sim_passed_.find(i);
  if (it != sim_passed_.end()) return it->second;
  const auto t0 = Clock::now();
  Candidate c{path_[i], {}, "", 0, ++steps_, ""};
  c.x.m = s_->measure(c.a);
  c.x.bits = tune::effective_bits(s_->sim().layers(), c.a);
  for (const auto& l : s_->sim().layers()) c.x.float_layers += c.a.count(l.name) ? 0 : 1;
  c.failed = tune::failed_gate(t_, c.x, s_->float_top1(), &c.shortfall, /*simulated=*/true);
  const double secs = seconds_since(t0);
  sim_s_ = std::max(sim_s_, secs);
  record("simulate", c, "path step " + std::to_string(i) + (i ? ": " + changes_[i] : ""), secs);
  return sim_passed_[i] = c.failed.empty();
}

// The additive-noise prediction of path step i's output SQNR: the layers'
// noise-to-signal ratios alone, from the sensitivity table, summed.
double Tuner::predicted_db(size_t i) const {
  double n = 0;
  for (const auto& [layer, d] : path_[i]) n += nsr_.at(layer).at(d);
  return n > 0 ? -10.0 * std::log10(n) : std::numeric_limits<double>::infinity();
}

// The first step after `from` predicted at `db` or better (the last step
// when none is).
size_t Tuner::next_by_db(size_t from, double db) const {
  for (size_t i = from + 1; i < path_.size(); ++i)
    if (predicted_db(i) >= db) return i;
  return path_.size() - 1;
}

// The first step of the path that passes in simulation: steps predicted
// 3, 6, 12, ... dB better than the start until one passes, then bisection
// (a few forward passes instead of one per move). The last step when none
// does, or when another check and a real run would end past the budget.
size_t Tuner::first_simulated_pass() {
  const size_t last = path_.size() - 1;
  if (simulated_pass(0)) return 0;
  const double start_db = predicted_db(0);
  size_t lo = 0, hi = 0;
  for (double gain = 3;; gain *= 2) {
    hi = next_by_db(lo, start_db + gain);
    if (simulated_pass(hi)) break;
    if (hi == last) return last;
    if (out_of_time(sim_s_)) {
      budget_note_ =
          "the time budget ended the simulation before a step passed; the real run takes the "
          "last step of the path (" +
          std::to_string(s_->sim().layers().size() - path_[last].size()) + " float layers)";
      spdlog::warn("tune: {}", budget_note_);
      return last;
    }
    lo = hi;
  }
  while (hi - lo > 1 && !out_of_time(sim_s_)) {
    const size_t mid = lo + (hi - lo) / 2;
    (simulated_pass(mid) ? hi : lo) = mid;
  }
  return hi;
}

// The session, the checks before any work, and a clean results dir.
void Tuner::start() {
  tune::check_gates_measurable(spec_, t_);
  s_ = std::make_unique<tune::Session>(spec_, t_.formats, t_.data, t_.samples, opts_.on_progress);
  if (t_.gates.has(Gate::kMaxTop1Drop) && !s_->sample().has_labels())
    throw SpecError(spec_.loc("quantize.tune.max_top1_drop"),
                    "quantize.tune.max_top1_drop needs labels, and " + s_->sample().description +
                        " has none; use min_top1_agreement or min_sqnr_db, or set "
                        "dataset.test_dataset with labels");
  if (s_->sim().layers().empty())
    throw UsageError("tune: no layer of this model can take any of the formats " +
                     join(names_of(t_.formats)) + " with backend '" +
                     s_->inspected().backend.info->name + "'");
  data_key_ = s_->sample().key;
  if (const std::string w = tune::test_set_selection_warning(spec_, data_key_); !w.empty())
    spdlog::warn("{}", w);
  std::error_code ec;
  fs::remove_all(fs::path(dir_) / ".tune", ec);
  if (user_cache_) return;
  fs::remove(cache_, ec);  // an earlier run's: this one measures afresh
  // Static runs time layers: every run, from the first, names this cache.
  if (s_->plan().mode == Mode::kStatic) TimingCache(TimingEnv::this_machine()).save(cache_);
}

// Sensitivity, the path, the simulated search, then real runs from the
// first simulated pass, 1, 2, 4, ... steps further on the path while the
// measured gates fail.
void Tuner::search() {
  auto t0 = Clock::now();
  start();
  stage_s_["setup"] = seconds_since(t0);
  // The ranking needs fewer samples than the gates (256 per probe), and at
  // most half of the time left after one real run.
  t0 = Clock::now();
  sens_ = tune::measure_sensitivity(*s_, opts_.on_progress, 256, /*reverse=*/false,
                                    std::max(1e-3, (t_.time_budget_s - elapsed() - reserve()) / 2));
  stage_s_["sensitivity"] = seconds_since(t0);
  nsr_ = tune::noise_table(sens_);
  plan_path();
  t0 = Clock::now();
  const size_t first = first_simulated_pass();
  stage_s_["simulate"] = seconds_since(t0);
  t0 = Clock::now();
  const size_t last = path_.size() - 1;
  for (size_t i = first, k = 1;; i = std::min(last, i + k), k *= 2) {
    throw_if_interrupted();
    if (real_step(path_[i]).failed.empty() || i == last) break;
    if (out_of_time(0)) {
      if (budget_note_.empty())
        budget_note_ = "the time budget ended the real runs before the gates held";
      spdlog::warn("tune: {}", budget_note_);
      break;
    }
  }
  stage_s_["quantize"] = seconds_since(t0);
}

// SIGINT/SIGTERM: the best candidate so far stays (artifact, report with
// status "interrupted", tuned_spec.yaml that rebuilds it); .tune goes.
void Tuner::interrupted(const Interrupted& e) {
  std::error_code ec;
  fs::remove_all(fs::path(dir_) / ".tune", ec);
  if (!best_ || !best_out_)
    throw Interrupted(e.signal(), "tune stopped before its first real run; nothing was written");
  nlohmann::json report = best_out_->report;
  report["tune"] = tune_json("interrupted", *best_);
  write_text_atomic(best_out_->report_path, report.dump(2) + "\n");
  throw Interrupted(e.signal(), "tune kept its best candidate so far (step " +
                                    std::to_string(best_->step) + ") in " + dir_ +
                                    "; tuned_spec.yaml rebuilds it");
}

TuneOutcome Tuner::run() {
  try {
    search();
    return finish();
  } catch (const Interrupted& e) {
    interrupted(e);
  }
}

// The kept candidate as tuned_spec.yaml makes it: the kept run itself when
// it was built from that very spec text (the artifact embeds the spec, not
// the step folder), else rebuilt from tuned_spec.yaml as a user would run
// it and checked once more. The report gets the search.
TuneOutcome Tuner::finish() {
  if (budget_note_.empty()) budget_note_ = tune::overrun_note(t_.time_budget_s, elapsed());
  TuneOutcome o;
  const fs::path dir(dir_);
  o.tuned_spec_path = (dir / "tuned_spec.yaml").string();
  const std::string text = spec_yaml(tuned_tree(best_->a));
  write_text_atomic(o.tuned_spec_path, text);
  Candidate c = *best_;
  if (text == best_->spec_text) {
    o.quantize = *best_out_;
  } else {
    const auto t0 = Clock::now();
    QuantizeOptions qo;
    qo.verbose = opts_.verbose;
    qo.sensitivity_by_default = false;
    qo.extend_timing_cache = !user_cache_;
    o.quantize = run_quantize(load_spec(o.tuned_spec_path), qo);
    c.x = tune::measured_run(*s_, o.quantize, measure_artifact(o.quantize.artifact_path));
    c.failed = tune::failed_gate(t_, c.x, s_->float_top1(), &c.shortfall);
    c.step = ++steps_;
    stage_s_["rebuild"] = seconds_since(t0);
    record("final", c, "tuned_spec.yaml", seconds_since(t0));
  }
  o.passed = c.failed.empty();
  o.failed_gate = c.failed;
  o.artifact_path = o.quantize.artifact_path;
  o.report_path = o.quantize.report_path;
  o.report = o.quantize.report;
  o.report["tune"] = tune_json(o.passed ? "passed" : "failed", c);
  // The final artifact on the test set, beside the selection figures.
  const auto tt = Clock::now();
  o.report["tune"]["test"] = tune::test_set_report(spec_, data_key_, t_.samples, o.artifact_path);
  if (o.report["tune"]["test"].is_null()) o.report["tune"].erase("test");
  stage_s_["test_set"] = seconds_since(tt);
  o.report["tune"]["seconds"] = elapsed();
  o.report["tune"]["seconds_by_stage"] = stage_s_;
  if (const std::string w = tune::test_set_selection_warning(spec_, data_key_); !w.empty())
    o.report["warnings"].push_back(w);
  write_text_atomic(o.report_path, o.report.dump(2) + "\n");
  std::error_code ec;
  fs::remove_all(dir / ".tune", ec);
  return o;
}

// The report's tune section for the kept candidate `c`.
nlohmann::json Tuner::tune_json(const std::string& status, const Candidate& c) const {
  nlohmann::json result{{"formats", tune::formats_json(c.a, s_->sim().layers())},
                        {"effective_bits", c.x.bits},
                        {"float_layers", c.x.float_layers},
                        {"sqnr_db", std::isfinite(c.x.m.sqnr_db) ? nlohmann::json(c.x.m.sqnr_db)
                                                                 : nlohmann::json(nullptr)},
                        {"top1_agreement", c.x.m.top1_agreement}};
  if (c.x.m.top1) result["top1"] = *c.x.m.top1;
  if (s_->float_top1()) result["float_top1"] = *s_->float_top1();
  if (c.x.speedup) result["speedup"] = *c.x.speedup;
  const auto& sample = s_->sample();
  return {
      {"status", status},
      {"failed_gate", c.failed},
      {"settings", tune::settings_json(t_)},
      {"data", sample.description},
      {"selection", tune::side_json(sample.description, sample.samples, c.x.m, s_->float_top1())},
      {"tuned_spec", (fs::path(dir_) / "tuned_spec.yaml").string()},
      {"best_step", best_->step},
      {"result", result},
      {"simulated_forward_passes", s_->forwards()},
      {"quantize_runs", real_steps_ + (stage_s_.contains("rebuild") ? 1 : 0)},
      {"seconds", elapsed()},
      {"seconds_by_stage", stage_s_},
      {"budget_cut", budget_note_.empty() ? nlohmann::json(nullptr) : nlohmann::json(budget_note_)},
      {"trace", trace_},
      {"sensitivity", sens_.to_json()}};
}

}  // namespace

TuneOutcome run_tune(const Spec& spec, const TuneOptions& opts) {
  return Tuner(spec, opts).run();
}

}  // namespace tq
