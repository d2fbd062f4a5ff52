#include "taoquant/pipeline.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include "artifact_checks.h"
#include "export_stage.h"
#include "run_files.h"
#include "taoquant/algorithm_stages.h"
#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/export.h"
#include "taoquant/html_report.h"
#include "taoquant/interrupt.h"
#include "taoquant/latency.h"
#include "taoquant/model.h"
#include "taoquant/report.h"
#include "taoquant/result_files.h"
#include "taoquant/steps.h"
#include "taoquant/timing_cache.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
const auto since = seconds_since;

size_t file_size_or_zero(const std::string& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<size_t>(n);
}

void check_device(const Spec& spec) {
  const auto& dev = spec.quantize.device;
  if (dev == "cpu") return;
  if (!torch::cuda::is_available())
    throw SpecError(
        spec.loc("quantize.device"),
        "quantize.device: " + quote_value(dev) +
            " requested, but this LibTorch build has no CUDA support (or no GPU is visible); "
            "use device: cpu, or build tao-quant against a CUDA-enabled LibTorch");
}

struct CheckedBackend {
  BackendRegistry::Resolved backend;
  BackendOptions options;
  std::vector<const ExporterInfo*> exporters;  // quantize.export
};

// Everything about the backend that can be checked before the model loads.
CheckedBackend resolve_backend(const Spec& spec) {
  auto b = BackendRegistry::instance().resolve(spec.quantize.backend, spec.loc("quantize.backend"));
  // quantize.export first: a target's own rules (TensorRT's) name what it
  // cannot take more precisely than the backend's tables.
  auto exporters = check_export_spec(spec);
  auto options = check_capabilities(spec, b);
  return {b, std::move(options), std::move(exporters)};
}

Plan plan_for(const Spec& spec, const CheckedBackend& b, const torch::jit::Module& model) {
  Plan plan = build_plan(spec, discover_layers(model));
  apply_capabilities(spec, plan, b.backend, b.options);
  plan_algorithm_stages(plan, model);
  return plan;
}

}  // namespace

nlohmann::json InspectOutcome::to_json() const {
  auto j = plan_to_json(plan);
  j["backend"] = {{"requested", backend.requested}, {"resolved", backend.info->name}};
  j["model_path"] = model_path;
  j["tool"] = tool_info();
  return j;
}

InspectOutcome run_inspect(const Spec& spec, const QuantizeOptions& opts) {
  InspectOutcome out;
  auto checked = resolve_backend(spec);
  out.backend = checked.backend;
  require_model_path(spec);
  out.model_path = spec.quantize.model_path;
  auto model = load_model(out.model_path, spec.loc("quantize.model_path"), opts.verbose);
  out.plan = plan_for(spec, checked, model);
  return out;
}

namespace {

// Runs one backend stage; its failure names the backend and the stage.
void run_stage(const std::string& backend, const char* what, bool verbose,
               const std::function<void()>& fn) {
  const std::string head = "backend '" + backend + "' failed in " + what + ": ";
  try {
    throw_if_interrupted();
    fn();
  } catch (const SpecError&) {
    throw;
  } catch (const Interrupted&) {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), head + e.what());
  } catch (const c10::Error& e) {
    throw RuntimeError(head + (verbose ? e.what() : e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw RuntimeError(head + e.what());
  }
}

struct StageTimes {
  double algorithms_s = 0, calibrate_s = 0, quantize_s = 0, save_s = 0;
};

// prepare, calibrate (static mode, Calibratable backends), quantize.
// Returns the held-out calibration batch (empty when no data was read).
std::vector<at::Tensor> run_backend(const Spec& spec, QuantizerBase& quantizer,
                                    QuantizeContext& ctx, const QuantizeOptions& opts,
                                    StageTimes& times) {
  const std::string& name = ctx.plan.backend_requested;
  const auto t0 = Clock::now();
  // The data stays open until the backend has finished (it may calibrate again).
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<CalibrationData> data;
  auto open_data = [&] {
    loader = make_data_loader(spec, *spec.dataset.quant_calibration_dataset,
                              "dataset.quant_calibration_dataset", /*want_labels=*/false);
    data = std::make_unique<CalibrationData>(*loader, opts.on_progress);
    // Before any stage runs on it: a failed forward names the model's error
    // (and the data's shape), not a stage's traceback.
    check_input_fits(ctx.model, data->first(), "calibration data");
    if (ctx.record().input_shapes.empty()) record_inputs_from(ctx.record(), data->first().inputs);
  };
  ctx.on_progress = opts.on_progress;
  // The library's algorithm stages (algorithm_stages.h), on the float model.
  std::vector<std::pair<std::string, StageResult>> stages;  // for the report
  for (const auto& st : scheduled_stages(ctx.plan)) {
    if (st.needs_data) open_data();
    const auto ta = Clock::now();
    StageResult r;
    run_stage(name, st.stage->what.c_str(), opts.verbose,
              [&] { r = st.stage->run(ctx, st.needs_data ? data.get() : nullptr); });
    r.seconds = since(ta);
    times.algorithms_s += r.seconds;
    ctx.record_algorithms(r);
    stages.emplace_back(st.stage->name, std::move(r));
    if (st.needs_data) ctx.calibration = data->facts();
  }
  // The float model as the backend gets it: the record's model when the
  // backend records none itself (a shallow copy: tensors the backend
  // replaces stay float here).
  const torch::jit::Module before_backend = ctx.model.clone(/*inplace=*/true);
  run_stage(name, "prepare", opts.verbose, [&] { quantizer.prepare(ctx); });
  if (auto* cal = dynamic_cast<Calibratable*>(&quantizer); cal && ctx.plan.mode == Mode::kStatic) {
    open_data();
    const auto tc = Clock::now();
    run_stage(name, "calibrate", opts.verbose, [&] { cal->calibrate(ctx, *data); });
    times.calibrate_s = since(tc);
    ctx.calibration = data->facts();
    ctx.calibration["seconds"] = times.calibrate_s;
  }
  run_stage(name, "quantize", opts.verbose, [&] { quantizer.quantize(ctx); });
  if (!ctx.record().model) record_model(ctx, before_backend);
  complete_record(ctx.record(), ctx.layer_results(), name);
  for (const auto& [stage, r] : stages) ctx.calibration["algorithms"][stage] = r.to_json();
  times.quantize_s = since(t0) - times.calibrate_s - times.algorithms_s;
  return data ? data->holdout() : std::vector<at::Tensor>{};
}

// The backend saves the artifact under its temporary name (partial_path),
// made durable; on any failure that file is gone and the earlier result, if
// any, is untouched.
void save_artifact(QuantizerBase& quantizer, QuantizeContext& ctx, const std::string& partial,
                   bool verbose) {
  const std::string& name = ctx.plan.backend_requested;
  std::error_code ec;
  fs::create_directories(fs::path(partial).parent_path(), ec);  // the backend writes into it
  try {
    run_stage(name, "save_model", verbose, [&] { quantizer.save_model(ctx, partial); });
    if (!fs::exists(partial))
      throw RuntimeError("backend '" + name + "' did not write the artifact '" + partial + "'");
    sync_file(partial);
  } catch (...) {
    fs::remove(partial, ec);
    throw;
  }
}

// The plan's warnings, and whether this run replaces another backend's
// result in results_dir (profile writes none).
void warn_at_start(const Spec& spec, const QuantizeOutcome& out, const QuantizeOptions& opts,
                   QuantizeContext& ctx) {
  for (const auto& w : out.plan.warnings) ctx.warn(w);
  const std::string replaced =
      opts.profile ? ""
                   : replaced_result_warning(spec.effective_results_dir(), out.requested_backend);
  if (!replaced.empty()) ctx.warn(replaced);
}

// Everything that can be checked without the model, checked first.
CheckedBackend check_before_model(const Spec& spec, const std::vector<ReportStage>& stages) {
  auto checked = resolve_backend(spec);
  require_model_path(spec);
  require_results_dir(spec);
  check_device(spec);
  require_calibration(spec);
  for (const auto& st : stages)
    if (st.check) st.check(spec);
  return checked;
}

// One result (result_files.h): the report, with the artifact's
// fingerprint, is written whole and synced under its temporary name, then
// renamed into place first, the artifact last, and the directory synced.
// A failure before the renames leaves the earlier pair as it was.
void publish_result(QuantizeOutcome& out, const std::string& artifact_partial,
                    StagedExports& staged) {
  const std::string report_partial = partial_path(out.report_path);
  try {
    out.report["artifact"].update(
        artifact_fingerprint(artifact_partial, fs::path(out.artifact_path).filename().string()));
    write_file_atomic(report_partial, out.report.dump(2) + "\n");
    staged.publish();
    rename_file(report_partial, out.report_path);
  } catch (...) {
    std::error_code ec;
    fs::remove(artifact_partial, ec);
    fs::remove(report_partial, ec);
    throw;
  }
  rename_durably(artifact_partial, out.artifact_path);
  spdlog::debug("wrote {} and {}", out.report_path, out.artifact_path);
}

// The exports (staged, not yet published) and the report of a saved
// artifact, with the report stages' entries; their time is part of the
// run's.
void write_exports_and_report(const Spec& spec, const CheckedBackend& checked, QuantizeContext& ctx,
                              const std::vector<ReportStage>& stages, QuantizeOutcome& out,
                              StagedExports& staged, nlohmann::json timings) {
  const auto t_export = Clock::now();
  fill_record_inputs(spec, ctx.record(), !checked.exporters.empty());
  const ExportJob job{
      ctx.record(), spec.quantize.export_spec, out.requested_backend, spec.quantize.algorithm, {}};
  staged.write(checked.exporters, job, spec.effective_results_dir(),
               /*write_record=*/true);
  const double export_s = since(t_export);
  QuantizeReportInput in{spec, out, ctx.backend_meta, checked.backend.info->origin,
                         std::move(timings)};
  out.report = make_quantize_report(in);
  out.report["timing_cache"] = out.timing_cache;
  out.report["quantization"] = ctx.record().to_json();
  out.report["timings"]["export_s"] = export_s;
  staged.add_to_report(out.report, spec.quantize.export_spec);
  double total = out.total_seconds + export_s;
  const InspectOutcome run{out.plan, checked.backend, spec.quantize.model_path};
  for (const auto& st : stages) {
    const auto t0 = Clock::now();
    out.report[st.key] = st.run(run, out, ctx.record());
    const double s = since(t0);
    out.report["timings"][st.key + "_s"] = s;
    total += s;
  }
  out.report["timings"]["total_s"] = total;
}

// The saved artifact's output on the held-out batch against the float
// model's, where the backend left that (QuantizeContext::holdout_reference).
void report_holdout_fidelity(QuantizeContext& ctx, const at::Tensor& output) {
  if (!ctx.holdout_reference || !output.defined()) return;
  ctx.backend_meta["holdout_output_sqnr_db"] =
      json_number(tensor_sqnr_db(*ctx.holdout_reference, output));
}

// Saves the artifact under its temporary name and checks it as users will
// run it: it loads, its outputs are finite, and it survives a batch-size
// change. Returns the temporary name; on a failure the file is gone.
std::string save_checked_artifact(QuantizerBase& quantizer, QuantizeContext& ctx,
                                  QuantizeOutcome& out, const std::string& return_type,
                                  const std::vector<at::Tensor>& holdout, bool verbose,
                                  StageTimes& times) {
  const auto t0 = Clock::now();
  const std::string partial = partial_path(out.artifact_path);
  save_artifact(quantizer, ctx, partial, verbose);
  // One fresh load: it loads, returns the float model's type, survives a
  // batch-size change and is finite; else it is removed.
  report_holdout_fidelity(
      ctx, check_saved_artifact(partial, return_type, holdout, out.requested_backend));
  times.save_s = since(t0);
  out.artifact_file_bytes = file_size_or_zero(partial);
  return partial;
}

// The exports, the report stages and the report of a saved artifact, then
// the whole result published. On a failure before publishing, nothing is
// published and the saved artifact goes too.
void report_and_publish(const Spec& spec, const CheckedBackend& checked,
                        const std::vector<ReportStage>& stages, QuantizeContext& ctx,
                        QuantizeOutcome& out, const std::string& partial, nlohmann::json timings) {
  StagedExports staged;  // removed unless published
  try {
    write_exports_and_report(spec, checked, ctx, stages, out, staged, std::move(timings));
    out.total_seconds = out.report["timings"]["total_s"].get<double>();
    throw_if_interrupted();  // the last safe point: nothing is published yet
  } catch (...) {
    std::error_code ec;
    fs::remove(partial, ec);
    throw;
  }
  publish_result(out, partial, staged);
}

}  // namespace

QuantizeOutcome run_quantize_stages(const Spec& spec, const QuantizeOptions& opts,
                                    const std::vector<ReportStage>& report_stages) {
  const auto t_start = Clock::now();
  const long contended_before = contended_measurements();
  const auto checked = check_before_model(spec, report_stages);
  TimingCache cache = open_timing_cache(spec);
  QuantizeOutcome out;
  out.requested_backend = checked.backend.requested;
  out.resolved_backend = checked.backend.info->name;

  auto t0 = Clock::now();
  auto model = load_model(spec.quantize.model_path, spec.loc("quantize.model_path"), opts.verbose);
  const double load_s = since(t0);
  const std::string return_type = forward_return_type(model);
  out.model_file_bytes = file_size_or_zero(spec.quantize.model_path);
  t0 = Clock::now();
  out.plan = plan_for(spec, checked, model);
  const double plan_s = since(t0);
  if (opts.on_plan) opts.on_plan(out.plan);

  auto quantizer = checked.backend.info->factory();
  QuantizeContext ctx(out.plan, model);
  cache.profile_all = opts.profile;
  ctx.timing_cache = &cache;
  ctx.on_layer = [&](const LayerResult& r, size_t i) {
    if (opts.on_layer) opts.on_layer(r, i, out.plan.layers.size());
  };
  warn_at_start(spec, out, opts, ctx);
  StageTimes times;
  const auto holdout = run_backend(spec, *quantizer, ctx, opts, times);

  const fs::path results_dir = spec.effective_results_dir();
  out.artifact_path = (results_dir / artifact_name(out.requested_backend)).string();
  out.report_path = (results_dir / "quantize_report.json").string();
  out.layers = ctx.layer_results();
  out.calibration = ctx.calibration;
  out.timing_cache =
      close_timing_cache(cache, results_dir, ctx, out.timing_cache_path, opts.extend_timing_cache,
                         contended_measurements() - contended_before);
  out.warnings = ctx.warnings();
  if (opts.profile) return out;
  embed_metadata(spec, out, ctx);
  const std::string partial =
      save_checked_artifact(*quantizer, ctx, out, return_type, holdout, opts.verbose, times);
  out.total_seconds = since(t_start);
  report_and_publish(spec, checked, report_stages, ctx, out, partial,
                     {{"load_s", load_s},
                      {"plan_s", plan_s},
                      {"algorithms_s", times.algorithms_s},
                      {"calibrate_s", times.calibrate_s},
                      {"quantize_s", times.quantize_s},
                      {"save_s", times.save_s},
                      {"total_s", out.total_seconds}});
  return out;
}

}  // namespace tq
