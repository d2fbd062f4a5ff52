// run_evaluate: which model(s), the test data, one pass for accuracy and
// fidelity, latency, gates, report.
#include <chrono>
#include <filesystem>

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/script.h>

#include "eval_impl.h"
#include "taoquant/data.h"
#include "taoquant/model.h"
#include "taoquant/pipeline.h"
#include "taoquant/report.h"
#include "taoquant/result_files.h"
#include "taoquant/steps.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
const auto since = seconds_since;

const std::string kTestKey = "dataset.test_dataset";

// Where the model(s) come from.
struct ModelPlan {
  std::string float_path, quant_path;
  SourceLoc float_from, quant_from;
};

// A quantize result is one pair (result_files.h): the artifact in its
// results_dir must have the report that describes it; a checkpoint named
// elsewhere is checked when a report beside it names it.
void check_result_pair(const std::string& artifact, bool named) {
  const fs::path report = fs::path(artifact).parent_path() / "quantize_report.json";
  if (named && reported_artifact_file(report.string()) != fs::path(artifact).filename().string())
    return;  // not a report of this artifact
  const std::string problem = result_pair_problem(artifact, report.string());
  if (!problem.empty()) throw RuntimeError(problem);
}

ModelPlan plan_models(const Spec& spec, const EvaluateOptions& opts, bool compare,
                      bool& is_quantized) {
  ModelPlan p;
  is_quantized = opts.is_quantized || spec.evaluate.is_quantized;
  std::string ckpt = opts.checkpoint.empty() ? spec.evaluate.checkpoint : opts.checkpoint;
  SourceLoc ckpt_from =
      opts.checkpoint.empty() ? spec.loc("evaluate.checkpoint") : SourceLoc{"--checkpoint"};
  if (compare || is_quantized) {
    if (!ckpt.empty()) {
      p.quant_path = ckpt;
      p.quant_from = ckpt_from;
    } else {
      require_results_dir(spec);
      p.quant_path =
          (fs::path(spec.effective_results_dir()) / artifact_name(spec.quantize.backend)).string();
      p.quant_from =
          spec.loc(spec.quantize.results_dir.empty() ? "results_dir" : "quantize.results_dir");
      std::error_code ec;
      if (!fs::exists(p.quant_path, ec))
        throw RuntimeError("quantized model '" + p.quant_path + "' does not exist (results_dir + " +
                           artifact_name(spec.quantize.backend) + " for quantize.backend '" +
                           spec.quantize.backend +
                           "'); run `tao-quant quantize` first, or pass --checkpoint PATH");
    }
    check_result_pair(p.quant_path, !ckpt.empty());
  }
  if (compare) {
    require_model_path(spec);
    p.float_path = spec.quantize.model_path;
    p.float_from = spec.loc("quantize.model_path");
  } else if (!is_quantized) {
    if (!ckpt.empty()) {
      p.float_path = ckpt;
      p.float_from = ckpt_from;
    } else {
      require_model_path(spec);
      p.float_path = spec.quantize.model_path;
      p.float_from = spec.loc("quantize.model_path");
    }
  }
  return p;
}

void require_test_data(const Spec& spec) {
  const auto& t = spec.dataset.test_dataset;
  if (t && !t->empty()) return;
  const std::string how = "set " + kTestKey + ".data_file (.npz/.npy/.pt) or " + kTestKey +
                          ".images_dir (an image folder) in the spec, or pass " + kTestKey +
                          ".data_file=PATH";
  for (const std::string& k : {kTestKey, kTestKey + ".images_dir", kTestKey + ".data_file"})
    if (spec.missing.count(k))
      throw SpecError(spec.loc(k), k + " is '?\?\?' (a value you must fill in); " + how);
  SourceLoc loc = spec.locs.count(kTestKey) ? spec.loc(kTestKey) : spec.loc("evaluate");
  throw SpecError(loc, "evaluate needs test data and " + kTestKey + " " +
                           (t ? "has neither images_dir nor data_file" : "is not set") + "; " +
                           how);
}

// The test data with evaluate's batch size and batch limit.
DataSourceSpec test_source(const Spec& spec) {
  DataSourceSpec src = *spec.dataset.test_dataset;
  if (spec.locs.count("evaluate.batch_size") || !spec.locs.count(kTestKey + ".batch_size"))
    src.batch_size = spec.evaluate.batch_size;
  if (spec.evaluate.num_batches > 0) src.max_batches = spec.evaluate.num_batches;
  return src;
}

size_t file_size_or_zero(const std::string& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<size_t>(n);
}

std::string shape_s(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

std::string range_str(size_t first, size_t n) {
  return "samples " + std::to_string(first) + ".." + std::to_string(first + n - 1);
}

// The test data, opened before any model loads (a bad path fails first);
// gates that need labels are refused when it has none.
std::unique_ptr<DataLoader> open_test_data(const Spec& spec, const DataSourceSpec& src,
                                           EvaluateOutcome& out) {
  auto loader = make_data_loader(spec, src, kTestKey, /*want_labels=*/true);
  out.data_description = loader->describe();
  out.num_samples = loader->num_samples();
  out.has_labels = loader->has_labels();
  if (out.has_labels) return loader;
  out.notes.push_back("the test data has no labels (" + kTestKey + ".label_key '" + src.label_key +
                      "' not found, or a flat image folder): accuracy is not measured");
  for (const auto& [gate, limit] : spec.evaluate.gates.limits) {
    const GateDef& d = gate_def(gate);
    if (!d.needs_labels) continue;
    const std::string key = std::string("evaluate.gates.") + d.name;
    throw SpecError(spec.loc(key), key + " needs labels, but the test data (" +
                                       out.data_description + ") has none; set " + kTestKey +
                                       ".label_key or use class sub-folders");
  }
  return loader;
}

// The models (the quantized engine is set before its artifact loads: packed
// weights are created at load time).
std::vector<eval::LoadedModel> load_models(const ModelPlan& mp, bool verbose,
                                           EvaluateOutcome& out) {
  std::vector<eval::LoadedModel> models;
  out.models.reserve(2);
  auto add_model = [&](const std::string& role, const std::string& path, const SourceLoc& from) {
    ModelResult r;
    r.role = role;
    r.path = path;
    r.file_bytes = file_size_or_zero(path);
    if (role == "quantized") {
      r.qengine = eval::read_artifact_qengine(path);
      if (!r.qengine.empty()) eval::set_qengine(r.qengine, path);
    }
    out.models.push_back(r);
    models.push_back({nullptr, load_model(path, from, verbose)});
  };
  if (!mp.float_path.empty()) add_model("float", mp.float_path, mp.float_from);
  if (!mp.quant_path.empty()) add_model("quantized", mp.quant_path, mp.quant_from);
  for (size_t i = 0; i < models.size(); ++i) models[i].result = &out.models[i];
  return models;
}

// One model's forward on a batch; failures name the model and the samples.
at::Tensor forward_batch(eval::LoadedModel& m, const Batch& b, bool verbose) {
  const int64_t n = b.inputs[0].size(0);
  std::vector<c10::IValue> args(b.inputs.begin(), b.inputs.end());
  const auto tf = Clock::now();
  c10::IValue o;
  try {
    o = m.module.forward(args);
  } catch (const c10::Error& e) {
    std::string msg = verbose ? e.what() : first_line(e.what_without_backtrace());
    throw RuntimeError("model '" + m.result->path + "' failed on test " +
                       range_str(b.first_index, n) + ": " + msg);
  } catch (const std::exception& e) {
    throw RuntimeError("model '" + m.result->path + "' failed on test " +
                       range_str(b.first_index, n) + ": " + first_line(e.what()));
  }
  m.result->forward_s += since(tf);
  return eval::output_tensor(o, m.result->path);
}

// Checks one model's output against the batch and its labels.
void check_output(const at::Tensor& y, const Batch& b, const std::string& path,
                  const DataLoader& loader, const DataSourceSpec& src, EvaluateOutcome& out) {
  const int64_t n = b.inputs[0].size(0);
  if (y.dim() == 0 || y.size(0) != n)
    throw RuntimeError(
        "model '" + path + "' returned " +
        (y.dim() == 0 ? std::string("a scalar") : "an output of shape " + shape_s(y)) + " for " +
        std::to_string(n) + " inputs; evaluate needs one output row per sample");
  if (y.dim() >= 2 && out.num_classes == 0) out.num_classes = static_cast<int>(y.size(1));
  if (!out.has_labels) return;
  if (y.dim() != 2)
    throw RuntimeError("model '" + path + "' returned an output of shape " + shape_s(y) +
                       "; top-1/top-5 need logits [N, classes]");
  const int64_t classes = y.size(1);
  const auto names = loader.class_names();
  if (!names.empty() && static_cast<int64_t>(names.size()) > classes)
    throw RuntimeError("the test data has " + std::to_string(names.size()) + " classes (" +
                       src.images_dir + ") but model '" + path + "' outputs " +
                       std::to_string(classes) +
                       " classes; the model and the test data do not match");
  check_labels(b.labels, b.first_index, loader, classes,
               "the test data " + kTestKey + " of model '" + path + "'");
}

// The accuracy and fidelity pass: every model sees the same batch.
struct PassResult {
  std::vector<at::Tensor> first_inputs;
  std::vector<eval::AccuracyMeter> acc;
  eval::FidelityMeter fid;
  double data_s = 0, metrics_s = 0, pass_s = 0;
};

PassResult run_pass(std::vector<eval::LoadedModel>& models, DataLoader& loader,
                    const DataSourceSpec& src, const EvaluateOptions& opts, EvaluateOutcome& out) {
  PassResult p;
  p.acc.resize(models.size());
  const auto t_pass = Clock::now();
  Batch b;
  size_t done = 0;
  for (auto td = Clock::now(); loader.next(b); td = Clock::now()) {
    p.data_s += since(td);
    const int64_t n = b.inputs[0].size(0);
    if (p.first_inputs.empty()) {
      p.first_inputs = b.inputs;
      for (auto& m : models) check_input_fits(m.module, b, "test data");
    }
    std::vector<at::Tensor> outs;
    for (auto& m : models) outs.push_back(forward_batch(m, b, opts.verbose));
    const auto tm = Clock::now();
    for (size_t k = 0; k < models.size(); ++k) {
      check_output(outs[k], b, models[k].result->path, loader, src, out);
      if (!out.has_labels) continue;
      p.acc[k].top5 = outs[k].size(1) >= 5;
      p.acc[k].add(outs[k], b.labels);
    }
    if (models.size() == 2) {
      if (outs[0].sizes() != outs[1].sizes())
        throw RuntimeError("float and quantized outputs differ in shape: " + shape_s(outs[0]) +
                           " vs " + shape_s(outs[1]) + " on test " + range_str(b.first_index, n));
      p.fid.add(outs[0], outs[1]);
    }
    p.metrics_s += since(tm);
    done += static_cast<size_t>(n);
    if (opts.on_progress) opts.on_progress("evaluate", done, out.num_samples);
  }
  p.pass_s = since(t_pass);
  if (p.first_inputs.empty())
    throw RuntimeError("the test data (" + out.data_description + ") yielded no batches");
  return p;
}

// Top-1/top-5 per model; fidelity, top-1 drop and size ratio of a pair.
void summarize_pass(const PassResult& p, EvaluateOutcome& out) {
  for (size_t k = 0; k < out.models.size(); ++k) {
    ModelResult& r = out.models[k];
    const auto& acc = p.acc[k];
    if (!out.has_labels || acc.count == 0) continue;
    const double count = static_cast<double>(acc.count);
    r.correct1 = acc.correct1;
    r.top1 = 100.0 * static_cast<double>(acc.correct1) / count;
    if (acc.top5) {
      r.correct5 = acc.correct5;
      r.top5 = 100.0 * static_cast<double>(acc.correct5) / count;
    }
  }
  if (out.has_labels && out.num_classes > 0 && out.num_classes < 5)
    out.notes.push_back("top-5 needs >= 5 classes");
  if (out.models.size() != 2) return;
  out.fidelity = p.fid.result();
  const ModelResult &f = out.models[0], &q = out.models[1];
  if (f.top1 && q.top1) out.top1_drop = *f.top1 - *q.top1;
  if (f.file_bytes > 0)
    out.size_ratio = static_cast<double>(q.file_bytes) / static_cast<double>(f.file_bytes);
}

// Latency of each model at each batch size (interleaved), and the speed-ups.
double measure(std::vector<eval::LoadedModel>& models, const std::vector<at::Tensor>& inputs,
               const LatencySpec& latency, const EvaluateOptions& opts, EvaluateOutcome& out) {
  const auto tl = Clock::now();
  std::vector<eval::LoadedModel*> ptrs;
  for (auto& m : models) ptrs.push_back(&m);
  eval::measure_latency(ptrs, inputs, latency, opts.on_progress);
  out.latency_batch_sizes = latency.batch_sizes;
  if (models.size() == 2)
    for (int bs : latency.batch_sizes) {
      const LatencyStats* a = out.models[0].latency_at(bs);
      const LatencyStats* q = out.models[1].latency_at(bs);
      out.speedup.push_back(a && q && q->median_ms > 0 ? a->median_ms / q->median_ms : 0.0);
    }
  std::string contended;
  for (const LatencyStats& l : out.models[0].latency)
    if (l.contended) contended += (contended.empty() ? "" : ", ") + std::to_string(l.batch_size);
  if (!contended.empty())
    out.notes.push_back(
        "latency at batch " + contended +
        " was measured while other processes took this machine's CPUs: too few rounds ran "
        "undisturbed (each round's CPU time against its wall time, and how long its threads "
        "waited for a CPU), so those figures are not clean; measure on an idle machine");
  return since(tl);
}

}  // namespace

EvaluateOutcome run_evaluate(const Spec& spec, const EvaluateOptions& opts) {
  const auto t_start = Clock::now();
  EvaluateOutcome out;
  const GatesSpec& gates = spec.evaluate.gates;
  const bool need_ref = eval::gates_need_reference(gates);
  const bool compare = opts.compare || need_ref;
  if (need_ref && !opts.compare)
    out.notes.push_back(
        "gates that compare with the float model are set: evaluating float (quantize.model_path) "
        "and quantized side by side");
  bool is_quantized = false;
  require_test_data(spec);
  require_results_dir(spec);
  ModelPlan mp = plan_models(spec, opts, compare, is_quantized);
  std::optional<LatencySpec> latency = spec.evaluate.latency;
  if (gates.has(Gate::kMinSpeedup) && !latency) {
    latency = LatencySpec{};
    out.notes.push_back("min_speedup is set: measuring latency with the default settings");
  }

  const auto t0 = Clock::now();
  const DataSourceSpec src = test_source(spec);
  auto loader = open_test_data(spec, src, out);
  auto models = load_models(mp, opts.verbose, out);
  const double load_s = since(t0);
  out.threads = at::get_num_threads();

  c10::InferenceMode inference;
  const PassResult pass = run_pass(models, *loader, src, opts, out);
  summarize_pass(pass, out);
  const double latency_s = latency ? measure(models, pass.first_inputs, *latency, opts, out) : 0;

  out.gates = eval::check_gates(gates, out);
  nlohmann::json fwd = nlohmann::json::object();
  for (const auto& m : out.models) fwd[m.role] = m.forward_s;
  out.timings = {{"load_s", load_s},           {"data_s", pass.data_s},
                 {"forward_s", fwd},           {"metrics_s", pass.metrics_s},
                 {"eval_pass_s", pass.pass_s}, {"latency_s", latency_s},
                 {"total_s", since(t_start)}};
  if (opts.write_report)
    out.report_path = (fs::path(spec.effective_results_dir()) / "evaluate_report.json").string();
  out.report = eval::make_evaluate_report(spec, out);
  if (opts.write_report) write_file_atomic(out.report_path, out.report.dump(2) + "\n");
  spdlog::debug("evaluate: {} samples in {:.3f}s (data {:.3f}s, metrics {:.3f}s)", out.num_samples,
                pass.pass_s, pass.data_s, pass.metrics_s);
  return out;
}

}  // namespace tq
