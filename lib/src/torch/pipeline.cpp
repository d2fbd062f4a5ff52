#include "taoquant/pipeline.h"

#include <chrono>
#include <filesystem>
#include <memory>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/report.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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
        "quantize.device: '" + dev +
            "' requested, but this LibTorch build has no CUDA support (or no GPU is visible); "
            "use device: cpu, or build tao-quant against a CUDA-enabled LibTorch");
}

BackendRegistry::Resolved resolve_backend(const Spec& spec) {
  auto b = BackendRegistry::instance().resolve(spec.quantize.backend, spec.loc("quantize.backend"));
  check_capabilities(spec, b);
  return b;
}

}  // namespace

std::string artifact_name(const std::string& requested_backend) {
  return "quantized_model_" + requested_backend + ".pth";
}

nlohmann::json tool_info() {
  return {{"name", "tao-quant"}, {"version", TQ_VERSION}, {"libtorch", TORCH_VERSION}};
}

nlohmann::json InspectOutcome::to_json() const {
  auto j = plan_to_json(plan);
  j["backend"] = {{"requested", backend.requested}, {"resolved", backend.info->name}};
  j["model_path"] = model_path;
  j["tool"] = tool_info();
  return j;
}

InspectOutcome run_inspect(const Spec& spec, const QuantizeOptions& opts) {
  InspectOutcome out;
  out.backend = resolve_backend(spec);
  require_model_path(spec);
  out.model_path = spec.quantize.model_path;
  auto model = load_model(out.model_path, spec.loc("quantize.model_path"), opts.verbose);
  out.plan = build_plan(spec, discover_layers(model));
  check_plan_capabilities(spec, out.plan, out.backend);
  return out;
}

QuantizeOutcome run_quantize(const Spec& spec, const QuantizeOptions& opts) {
  auto t_start = Clock::now();
  QuantizeOutcome out;
  // Everything that can be checked without the model is checked first.
  auto backend = resolve_backend(spec);
  require_model_path(spec);
  require_results_dir(spec);
  check_device(spec);
  if (spec.quantize.mode == Mode::kStatic) require_calibration(spec);
  out.requested_backend = backend.requested;
  out.resolved_backend = backend.info->name;

  auto t0 = Clock::now();
  const std::string& model_path = spec.quantize.model_path;
  auto model = load_model(model_path, spec.loc("quantize.model_path"), opts.verbose);
  double load_s = since(t0);
  out.model_file_bytes = file_size_or_zero(model_path);

  t0 = Clock::now();
  out.plan = build_plan(spec, discover_layers(model));
  check_plan_capabilities(spec, out.plan, backend);
  double plan_s = since(t0);
  if (opts.on_plan) opts.on_plan(out.plan);

  auto quantizer = backend.info->factory();
  QuantizeContext ctx(spec, out.plan, model, backend.requested, backend.info->name);
  size_t total = out.plan.layers.size();
  ctx.on_layer = [&](const LayerResult& r, size_t i) {
    if (opts.on_layer) opts.on_layer(r, i, total);
  };
  for (const auto& w : out.plan.warnings) ctx.warn(w);

  auto stage = [&](const char* what, auto&& fn) {
    try {
      fn();
    } catch (const SpecError&) {
      throw;
    } catch (const Error& e) {
      throw Error(e.code(),
                  "backend '" + backend.requested + "' failed in " + what + ": " + e.what());
    } catch (const c10::Error& e) {
      std::string msg = opts.verbose ? e.what() : e.what_without_backtrace();
      throw RuntimeError("backend '" + backend.requested + "' failed in " + what + ": " + msg);
    } catch (const std::exception& e) {
      throw RuntimeError("backend '" + backend.requested + "' failed in " + what + ": " + e.what());
    }
  };

  t0 = Clock::now();
  stage("prepare", [&] { quantizer->prepare(ctx); });
  double calib_s = 0;
  std::unique_ptr<DataLoader> loader;  // alive until the backend has finished
  ctx.on_progress = opts.on_progress;
  if (auto* cal = dynamic_cast<Calibratable*>(quantizer.get());
      cal && spec.quantize.mode == Mode::kStatic) {
    const auto& src = *spec.dataset.quant_calibration_dataset;
    loader =
        make_data_loader(spec, src, "dataset.quant_calibration_dataset", /*want_labels=*/false);
    auto tc = Clock::now();
    stage("calibrate", [&] { cal->calibrate(ctx, *loader); });
    calib_s = since(tc);
  }
  stage("quantize", [&] { quantizer->quantize(ctx); });
  double quantize_s = since(t0) - calib_s;

  // Artifact and report.
  std::string results_dir = spec.effective_results_dir();
  out.artifact_path = (fs::path(results_dir) / artifact_name(backend.requested)).string();
  out.report_path = (fs::path(results_dir) / "quantize_report.json").string();
  out.layers = ctx.layer_results();
  out.warnings = ctx.warnings();
  out.calibration = ctx.calibration;

  nlohmann::json layers_json = layers_to_json(out.plan, out.layers);
  ctx.extra_files["tao_quant_spec.json"] = spec.resolved.dump(2);
  ctx.extra_files["tao_quant_layers.json"] = layers_json.dump(2);
  nlohmann::json meta{
      {"tool", tool_info()},
      {"backend", {{"requested", backend.requested}, {"resolved", backend.info->name}}},
      {"mode", std::string(to_string(spec.quantize.mode))},
      {"backend_meta", ctx.backend_meta},
      {"calibration", ctx.calibration}};
  ctx.extra_files["tao_quant_meta.json"] = meta.dump(2);

  t0 = Clock::now();
  {
    // A backend that fails while writing leaves no partial artifact: a file it
    // created or changed at the artifact path is removed (an older artifact
    // it never touched stays).
    std::error_code ec;
    fs::create_directories(fs::path(out.artifact_path).parent_path(),
                           ec);  // the backend writes into it
    const bool existed = fs::exists(out.artifact_path, ec);
    const auto mtime =
        existed ? fs::last_write_time(out.artifact_path, ec) : fs::file_time_type::min();
    try {
      stage("save_model", [&] { quantizer->save_model(ctx, out.artifact_path); });
    } catch (...) {
      if (fs::exists(out.artifact_path, ec) &&
          (!existed || fs::last_write_time(out.artifact_path, ec) != mtime))
        fs::remove(out.artifact_path, ec);
      throw;
    }
  }
  double save_s = since(t0);
  if (!fs::exists(out.artifact_path))
    throw RuntimeError("backend '" + backend.requested + "' did not write the artifact '" +
                       out.artifact_path + "'");
  out.artifact_file_bytes = file_size_or_zero(out.artifact_path);
  out.total_seconds = since(t_start);

  QuantizeReportInput in{spec,
                         out,
                         ctx.backend_meta,
                         backend.info->origin,
                         {{"load_s", load_s},
                          {"plan_s", plan_s},
                          {"calibrate_s", calib_s},
                          {"quantize_s", quantize_s},
                          {"save_s", save_s},
                          {"total_s", out.total_seconds}}};
  out.report = make_quantize_report(in);
  write_file_atomic(out.report_path, out.report.dump(2) + "\n");
  spdlog::debug("wrote {} and {}", out.artifact_path, out.report_path);
  return out;
}

}  // namespace tq
