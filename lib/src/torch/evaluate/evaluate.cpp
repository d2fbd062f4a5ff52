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

namespace tq {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string first_line(const std::string& s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

const std::string kTestKey = "dataset.test_dataset";

// Where the model(s) come from.
struct ModelPlan {
  std::string float_path, quant_path;
  SourceLoc float_from, quant_from;
};

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
  if (gates.min_speedup && !latency) {
    latency = LatencySpec{};
    out.notes.push_back("min_speedup is set: measuring latency with the default settings");
  }

  // Data first: a bad path fails before any model loads.
  auto t0 = Clock::now();
  DataSourceSpec src = test_source(spec);
  auto loader = make_data_loader(spec, src, kTestKey, /*want_labels=*/true);
  out.data_description = loader->describe();
  out.num_samples = loader->num_samples();
  out.has_labels = loader->has_labels();
  if (!out.has_labels) {
    out.notes.push_back("the test data has no labels (" + kTestKey + ".label_key '" +
                        src.label_key +
                        "' not found, or a flat image folder): accuracy is not measured");
    for (const auto& [name, set] :
         {std::pair<const char*, bool>{"max_top1_drop", gates.max_top1_drop.has_value()},
          {"min_top1", gates.min_top1.has_value()}})
      if (set)
        throw SpecError(spec.loc(std::string("evaluate.gates.") + name),
                        std::string("evaluate.gates.") + name +
                            " needs labels, but the test data (" + out.data_description +
                            ") has none; set " + kTestKey + ".label_key or use class sub-folders");
  }

  // Models (the quantized engine is set before its artifact loads: packed
  // weights are created at load time).
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
    models.push_back({nullptr, load_model(path, from, opts.verbose)});
  };
  if (!mp.float_path.empty()) add_model("float", mp.float_path, mp.float_from);
  if (!mp.quant_path.empty()) add_model("quantized", mp.quant_path, mp.quant_from);
  for (size_t i = 0; i < models.size(); ++i) models[i].result = &out.models[i];
  const double load_s = since(t0);
  out.threads = at::get_num_threads();

  // One pass: every model sees the same batch; accuracy and fidelity.
  c10::InferenceMode inference;
  std::vector<eval::AccuracyMeter> acc(models.size());
  eval::FidelityMeter fid;
  const bool fidelity = models.size() == 2;
  std::vector<at::Tensor> first_inputs;
  double data_s = 0, metrics_s = 0;
  const auto t_pass = Clock::now();
  Batch b;
  size_t done = 0;
  for (;;) {
    auto td = Clock::now();
    if (!loader->next(b)) break;
    data_s += since(td);
    const int64_t n = b.inputs[0].size(0);
    if (first_inputs.empty()) {
      first_inputs = b.inputs;
      for (auto& m : models) check_input_fits(m.module, b, "test data");
    }
    std::vector<c10::IValue> args(b.inputs.begin(), b.inputs.end());
    std::vector<at::Tensor> outs;
    for (auto& m : models) {
      auto tf = Clock::now();
      c10::IValue o;
      try {
        o = m.module.forward(args);
      } catch (const c10::Error& e) {
        std::string msg = opts.verbose ? e.what() : first_line(e.what_without_backtrace());
        throw RuntimeError("model '" + m.result->path + "' failed on test " +
                           range_str(b.first_index, n) + ": " + msg);
      } catch (const std::exception& e) {
        throw RuntimeError("model '" + m.result->path + "' failed on test " +
                           range_str(b.first_index, n) + ": " + first_line(e.what()));
      }
      m.result->forward_s += since(tf);
      outs.push_back(eval::output_tensor(o, m.result->path));
    }
    auto tm = Clock::now();
    for (size_t k = 0; k < models.size(); ++k) {
      const at::Tensor& y = outs[k];
      const std::string& path = models[k].result->path;
      if (y.dim() == 0 || y.size(0) != n)
        throw RuntimeError(
            "model '" + path + "' returned " +
            (y.dim() == 0 ? std::string("a scalar") : "an output of shape " + shape_s(y)) +
            " for " + std::to_string(n) + " inputs; evaluate needs one output row per sample");
      if (y.dim() >= 2 && out.num_classes == 0) out.num_classes = static_cast<int>(y.size(1));
      if (!out.has_labels) continue;
      if (y.dim() != 2)
        throw RuntimeError("model '" + path + "' returned an output of shape " + shape_s(y) +
                           "; top-1/top-5 need logits [N, classes]");
      const int64_t classes = y.size(1);
      const auto names = loader->class_names();
      if (!names.empty() && static_cast<int64_t>(names.size()) > classes)
        throw RuntimeError("the test data has " + std::to_string(names.size()) + " classes (" +
                           src.images_dir + ") but model '" + path + "' outputs " +
                           std::to_string(classes) +
                           " classes; the model and the test data do not match");
      const int64_t lo = b.labels.min().item<int64_t>(), hi = b.labels.max().item<int64_t>();
      if (lo < 0 || hi >= classes) {
        const int64_t bad = lo < 0 ? lo : hi;
        const int64_t at = b.labels.eq(bad).nonzero()[0][0].item<int64_t>();
        throw RuntimeError("model '" + path + "' outputs " + std::to_string(classes) +
                           " classes but the test data (" + out.data_description + ") has label " +
                           std::to_string(bad) + " at sample " +
                           std::to_string(b.first_index + static_cast<size_t>(at)) +
                           "; the model and the test data do not match (check " + kTestKey +
                           ".label_key/classes)");
      }
      acc[k].top5 = classes >= 5;
      acc[k].add(y, b.labels);
    }
    if (fidelity) {
      if (outs[0].sizes() != outs[1].sizes())
        throw RuntimeError("float and quantized outputs differ in shape: " + shape_s(outs[0]) +
                           " vs " + shape_s(outs[1]) + " on test " + range_str(b.first_index, n));
      fid.add(outs[0], outs[1]);
    }
    metrics_s += since(tm);
    done += static_cast<size_t>(n);
    if (opts.on_progress) opts.on_progress("evaluate", done, out.num_samples);
  }
  const double pass_s = since(t_pass);
  if (first_inputs.empty())
    throw RuntimeError("the test data (" + out.data_description + ") yielded no batches");

  for (size_t k = 0; k < models.size(); ++k) {
    ModelResult& r = out.models[k];
    if (out.has_labels && acc[k].count > 0) {
      r.correct1 = acc[k].correct1;
      r.top1 = 100.0 * static_cast<double>(acc[k].correct1) / static_cast<double>(acc[k].count);
      if (acc[k].top5) {
        r.correct5 = acc[k].correct5;
        r.top5 = 100.0 * static_cast<double>(acc[k].correct5) / static_cast<double>(acc[k].count);
      }
    }
  }
  if (out.has_labels && out.num_classes > 0 && out.num_classes < 5)
    out.notes.push_back("top-5 needs >= 5 classes");
  if (fidelity) {
    out.fidelity = fid.result();
    const ModelResult &f = out.models[0], &q = out.models[1];
    if (f.top1 && q.top1) out.top1_drop = *f.top1 - *q.top1;
    if (f.file_bytes > 0)
      out.size_ratio = static_cast<double>(q.file_bytes) / static_cast<double>(f.file_bytes);
  }

  double latency_s = 0;
  if (latency) {
    auto tl = Clock::now();
    std::vector<eval::LoadedModel*> ptrs;
    for (auto& m : models) ptrs.push_back(&m);
    eval::measure_latency(ptrs, first_inputs, *latency, opts.on_progress);
    out.latency_batch_sizes = latency->batch_sizes;
    if (fidelity)
      for (int bs : latency->batch_sizes) {
        const LatencyStats* a = out.models[0].latency_at(bs);
        const LatencyStats* q = out.models[1].latency_at(bs);
        out.speedup.push_back(a && q && q->median_ms > 0 ? a->median_ms / q->median_ms : 0.0);
      }
    latency_s = since(tl);
  }

  out.gates = eval::check_gates(gates, out);
  nlohmann::json fwd = nlohmann::json::object();
  for (const auto& m : out.models) fwd[m.role] = m.forward_s;
  out.timings = {{"load_s", load_s},         {"data_s", data_s},      {"forward_s", fwd},
                 {"metrics_s", metrics_s},   {"eval_pass_s", pass_s}, {"latency_s", latency_s},
                 {"total_s", since(t_start)}};
  if (opts.write_report)
    out.report_path = (fs::path(spec.effective_results_dir()) / "evaluate_report.json").string();
  out.report = eval::make_evaluate_report(spec, out);
  if (opts.write_report) write_file_atomic(out.report_path, out.report.dump(2) + "\n");
  spdlog::debug("evaluate: {} samples in {:.3f}s (data {:.3f}s, metrics {:.3f}s)", out.num_samples,
                pass_s, data_s, metrics_s);
  return out;
}

}  // namespace tq
