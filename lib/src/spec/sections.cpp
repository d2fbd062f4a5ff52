// Validation: the resolved node tree into the typed sections of tq::Spec.
// Every message names the dotted key, what was found and what is expected.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <functional>

#include <spdlog/spdlog.h>

#include "spec/passes.h"
#include "spec/values.h"
#include "taoquant/strings.h"

namespace tq::spec_detail {
namespace {

// The sections and subsections tao-quant reads.
const std::vector<std::string> kTopKeys = {"results_dir", "quantize", "dataset", "evaluate"};
const std::vector<std::string> kDataSources = {"quant_calibration_dataset", "validation_dataset",
                                               "test_dataset"};
// What tune and sensitivity select and measure on (quantize.tune.data,
// quantize.sensitivity.data; evaluation_source).
const std::vector<std::string> kEvaluationData = {"validation", "test", "calibration"};
// TAO keys that are close to ours by spelling but are not typos.
const std::vector<std::string> kTaoTopKeys = {
    "model",    "train",   "export",         "inference",    "gen_trt_engine", "prune",
    "distill",  "wandb",   "encryption_key", "augmentation", "infer",          "data",
    "num_gpus", "gpu_ids", "seed",           "hydra",        "defaults",       "dataset_convert"};
const std::vector<std::string> kTaoDatasetKeys = {
    "train_dataset",   "val_dataset", "infer_dataset", "inference_dataset",
    "predict_dataset", "num_classes", "img_size",      "augmentation",
    "root_dir",        "batch_size",  "workers",       "num_workers",
    "dataset",         "type",        "pin_memory"};
TensorQuantSpec read_tensor(const Node& n, const std::string& path) {
  Section s(n, path);
  s.only({"dtype", "granularity", "quant_axis", "group_size", "symmetric", "rounding",
          "observer_or_fake_quant", "observer_or_fake_quant_kwargs"});
  TensorQuantSpec t;
  t.loc = n.loc;
  s.read("dtype", t.dtype, to_enum(dtype_table()));
  s.read("granularity", t.granularity, to_enum(granularity_table()));
  s.read("quant_axis", t.quant_axis, int_at_least(INT_MIN));
  s.read("group_size", t.group_size, int_at_least(1));
  s.read("symmetric", t.symmetric, to_bool);
  s.read("rounding", t.rounding, to_enum(rounding_table()));
  s.read("observer_or_fake_quant", t.observer, to_nonempty);
  s.read("observer_or_fake_quant_kwargs", t.observer_kwargs, to_json_map);
  return t;
}

std::vector<LayerRule> read_layers(const Node& n, const std::string& path) {
  if (!n.is_list()) type_error(n, path, "a list of {module_name, weights, activations} maps");
  std::vector<LayerRule> out;
  for (size_t i = 0; i < n.items.size(); ++i) {
    const Node& item = *n.items[i];
    Section s(item, join_path(path, std::to_string(i)));
    s.only({"module_name", "weights", "activations"});
    LayerRule rule;
    rule.loc = item.loc;
    const Node* name = s.get("module_name");
    if (!name) {
      const Entry* e = item.find("module_name");
      fail(e ? *e->value : item, s.at("module_name"),
           e && e->value->is_missing()
               ? "is '" + std::string(kMissingText) +
                     "' (a value you must fill in): a module name or class pattern"
               : "is required: a module name or class pattern such as 'Linear' or "
                 "'encoder.*'");
    }
    rule.module_name = to_nonempty(*name, s.at("module_name"));
    if (const Node* w = s.get("weights")) rule.weights = read_tensor(*w, s.at("weights"));
    if (const Node* a = s.get("activations")) {
      rule.activations = read_tensor(*a, s.at("activations"));
      if (const Entry* r = rule.activations->rounding ? a->find("rounding") : nullptr)
        fail(*r->value, s.at("activations") + ".rounding",
             "applies to weights only (activations are rounded to nearest)");
    }
    out.push_back(std::move(rule));
  }
  return out;
}

// The algorithm keys, each read by its row of the pass table
// (algorithms.h), and the modes they apply to.
void read_algorithms(const Section& s, QuantizeSpec& q) {
  auto& a = q.algorithms;
  for (const auto& p : algorithm_passes())
    if (const Node* n = s.get(std::string(p.key))) p.read(*n, s.at(std::string(p.key)), a);
  check_algorithm_modes(a, q.mode);
  for (const auto& rule : q.layers) {
    if (!rule.weights || !rule.weights->rounding) continue;
    AlgorithmSettings per_layer;
    per_layer.weight_rounding = *rule.weights->rounding;
    per_layer.weight_rounding_loc = rule.weights->loc;
    check_algorithm_modes(per_layer, q.mode);
  }
}

// A reader of one word out of `allowed` (with a "did you mean").
std::function<std::string(const Node&, const std::string&)> one_of(
    std::vector<std::string> allowed) {
  return [allowed](const Node& n, const std::string& path) {
    std::string w = to_nonempty(n, path);
    if (!contains(allowed, w))
      throw SpecError(n.loc, path + ": " + quote_value(w) + " is not allowed" +
                                 suggest(w, allowed) + "; expected one of " + join_names(allowed));
    return w;
  };
}

// The candidate formats of quantize.tune and quantize.sensitivity.
void check_formats(const Section& s) {
  std::vector<DType> formats;
  s.read("formats", formats, list_of<DType>(to_enum(dtype_table()), "a list of dtypes"));
  if (s.get("formats") && formats.empty())
    type_error(*s.get("formats"), s.at("formats"), "at least one dtype");
}

// quantize.sensitivity: true, or {formats, samples, data}; checked here,
// read by the pipeline from the resolved tree (sensitivity_request).
void check_sensitivity(const Section& s) {
  const Node* n = s.get("sensitivity");
  if (!n) return;
  if (n->is_scalar()) {
    to_bool(*n, s.at("sensitivity"));
    return;
  }
  Section sub(*n, s.at("sensitivity"));
  sub.only({"formats", "samples", "data"});
  check_formats(sub);
  int samples = 0;
  sub.read("samples", samples, int_at_least(1));
  std::string word;
  sub.read("data", word, one_of(kEvaluationData));
}

// quantize.tune: checked here (keys, types, ranges), read by `tao-quant
// tune` from the resolved tree (lib/src/torch/tune/tune.cpp); `quantize`
// ignores it.
// The gates of the gate table usable in `use` that section `s` sets.
GatesSpec read_gates(const Section& s, unsigned use) {
  GatesSpec g;
  for (const auto& d : gate_table()) {
    std::optional<double> v;
    if (d.uses & use) s.read(d.name, v, gate_limit(d));
    if (v) g.limits[d.gate] = *v;
  }
  return g;
}

void check_tune(const Section& s) {
  std::vector<std::string> keys = gate_names(kTuneGate);
  for (const char* k : {"formats", "time_budget_s", "data", "samples", "search"}) keys.push_back(k);
  s.only(keys);
  check_formats(s);
  const GatesSpec gates = read_gates(s, kTuneGate);
  double v = 0;
  s.read("time_budget_s", v, positive_number());
  int samples = 0;
  s.read("samples", samples, int_at_least(1));
  std::string word;
  s.read("data", word, one_of(kEvaluationData));
  s.read("search", word, one_of({"greedy", "revert_worst"}));
  if (gates.empty() || (gates.limits.size() == 1 && gates.has(Gate::kMinSpeedup)))
    throw SpecError(s.node().loc, "quantize.tune: no gate to tune for; set one of " +
                                      join_names(gate_names(kTuneGate)) +
                                      " (min_speedup alone does not steer the search)");
}

// quantize.export: {formats, opset, target, tensorrt_version, input_shape};
// the format names are checked against the exporter registry with the
// backend, before the model loads (check_export_spec).
void read_export(const Section& s, ExportSpec& e) {
  s.only({"formats", "opset", "target", "tensorrt_version", "input_shape"});
  if (const Node* n = s.get("formats")) {
    e.formats =
        list_of<std::string>(to_nonempty, "a list of export formats", true)(*n, s.at("formats"));
    if (e.formats.empty()) type_error(*n, s.at("formats"), "at least one export format");
    for (size_t i = 0; i < e.formats.size(); ++i)
      e.format_locs.push_back(n->is_scalar() ? n->loc : n->items[i]->loc);
  }
  s.read("opset", e.opset, [](const Node& n, const std::string& path) {
    const int v = int_at_least(1)(n, path);
    if (v < 13 || v > 17)
      fail(n, path,
           quote_value(n.text) +
               " is not a supported opset (expected 13 to 17: per-channel Q/DQ needs 13, "
               "ONNX 1.12 knows up to 17)");
    return v;
  });
  s.read("target", e.target, one_of({"ort", "tensorrt"}));
  s.read("tensorrt_version", e.tensorrt_version, [](const Node& n, const std::string& path) {
    const std::string v = to_nonempty(n, path);
    if (!std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(c); }))
      fail(n, path,
           quote_value(v) +
               " is not a TensorRT version number (expected digits as TensorRT "
               "writes them in a cache header, e.g. 8601 for 8.6.1)");
    return v;
  });
  if (const Node* n = s.get("input_shape")) {
    const auto dims = list_of<int>(int_at_least(1),
                                   "a list of positive integers (one sample's "
                                   "shape, without the batch dimension)")(*n, s.at("input_shape"));
    e.input_shape.assign(dims.begin(), dims.end());
  }
}

void read_quantize(const Section& s, QuantizeSpec& q) {
  std::vector<std::string> keys{
      "backend", "mode",         "algorithm",  "default_layer_dtype", "default_activation_dtype",
      "layers",  "skip_names",   "model_path", "results_dir",         "backend_kwargs",
      "device",  "timing_cache", "tune",       "sensitivity",         "export"};
  for (const auto& p : algorithm_passes()) keys.emplace_back(p.key);
  s.only(keys);
  s.read("backend", q.backend, to_nonempty);
  s.read("mode", q.mode, to_enum(mode_table()));
  s.read("algorithm", q.algorithm, to_nonempty);
  s.read("default_layer_dtype", q.default_layer_dtype, to_enum(dtype_table()));
  s.read("default_activation_dtype", q.default_activation_dtype, to_enum(dtype_table()));
  if (const Node* n = s.get("layers")) q.layers = read_layers(*n, s.at("layers"));
  if (const Node* n = s.get("skip_names")) {
    auto patterns =
        list_of<std::string>(to_nonempty, "a list of name patterns")(*n, s.at("skip_names"));
    for (size_t i = 0; i < patterns.size(); ++i)
      q.skip_names.push_back({patterns[i], n->items[i]->loc});
  }
  s.read("model_path", q.model_path, to_str);
  s.read("results_dir", q.results_dir, to_str);
  s.read("backend_kwargs", q.backend_kwargs, to_json_map);
  s.read("device", q.device, to_device);
  s.read("timing_cache", q.timing_cache, to_nonempty);
  read_algorithms(s, q);
  if (const Node* n = s.get("tune")) check_tune(Section(*n, s.at("tune")));
  check_sensitivity(s);
  if (const Node* n = s.get("export")) read_export(Section(*n, s.at("export")), q.export_spec);
}

PreprocessSpec read_preprocess(const Section& s) {
  s.only({"input_size", "resize", "center_crop", "mean", "std", "color", "scale"});
  PreprocessSpec p;
  if (const Node* n = s.get("input_size")) {
    const std::string expected = "[H, W] (two positive integers) or one positive integer";
    if (n->is_scalar()) {
      int side = int_at_least(1)(*n, s.at("input_size"));
      p.input_size = {side, side};
    } else {
      p.input_size = list_of<int>(int_at_least(1), expected)(*n, s.at("input_size"));
      if (p.input_size.size() != 2) type_error(*n, s.at("input_size"), expected);
    }
  }
  s.read("resize", p.resize, int_at_least(0));
  s.read("center_crop", p.center_crop, to_bool);
  s.read("mean", p.mean, list_of<double>(to_number, "a list of numbers (one per channel)", true));
  s.read("std", p.std, list_of<double>(positive_number(), "a list of numbers > 0", true));
  if (!p.mean.empty() && !p.std.empty() && p.mean.size() != p.std.size())
    fail(*s.get("std"), s.at("std"),
         "has " + std::to_string(p.std.size()) + " values but mean has " +
             std::to_string(p.mean.size()) + " (one per channel each)");
  s.read("color", p.color, to_color);
  s.read("scale", p.scale, positive_number());
  return p;
}

DataSourceSpec read_source(const Node& n, const std::string& path) {
  Section s(n, path);
  s.only({"images_dir", "data_file", "input_key", "label_key", "classes", "batch_size",
          "max_batches", "shuffle", "seed", "num_workers", "preprocess"});
  DataSourceSpec d;
  d.loc = n.loc;
  const auto strings = list_of<std::string>(to_nonempty, "a string or a list of strings", true);
  s.read("images_dir", d.images_dir, to_str);
  s.read("data_file", d.data_files, strings);
  if (!d.images_dir.empty() && !d.data_files.empty())
    fail(*s.get("data_file"), path,
         "set images_dir or data_file, not both (images_dir is " + quote_value(d.images_dir) + ")");
  s.read("input_key", d.input_keys, strings);
  s.read("label_key", d.label_key, to_nonempty);
  s.read("classes", d.classes, list_of<std::string>(to_nonempty, "a list of class names"));
  s.read("batch_size", d.batch_size, int_at_least(1));
  s.read("max_batches", d.max_batches, int_at_least(0));
  s.read("shuffle", d.shuffle, to_bool);
  s.read("seed", d.seed, to_seed);
  s.read("num_workers", d.num_workers, int_at_least(1));
  if (const Node* p = s.get("preprocess"))
    d.preprocess = read_preprocess(Section(*p, s.at("preprocess")));
  return d;
}

void read_dataset(const Section& s, DatasetSpec& d) {
  for (const auto& e : s.node().entries) {
    if (contains(kDataSources, e.key)) continue;
    std::string hint = did_you_mean(e.key, kDataSources);  // only real typos are errors
    if (!hint.empty() && !contains(kTaoDatasetKeys, e.key))
      throw SpecError(e.key_loc, "dataset: unknown key " + quote_value(e.key) + hint +
                                     "; tao-quant reads " + join_names(kDataSources));
    spdlog::debug("{}: dataset.{} ignored (tao-quant reads {})", e.key_loc.str(), e.key,
                  join_names(kDataSources));
  }
  if (const Node* n = s.get("quant_calibration_dataset"))
    d.quant_calibration_dataset = read_source(*n, s.at("quant_calibration_dataset"));
  if (const Node* n = s.get("validation_dataset"))
    d.validation_dataset = read_source(*n, s.at("validation_dataset"));
  if (const Node* n = s.get("test_dataset")) d.test_dataset = read_source(*n, s.at("test_dataset"));
}

void read_evaluate(const Section& s, EvaluateSpec& ev) {
  s.only({"checkpoint", "is_quantized", "batch_size", "num_batches", "latency", "gates"},
         {"num_gpus", "gpu_ids", "results_dir", "trt_engine", "gpu_id"});
  s.read("checkpoint", ev.checkpoint, to_str);
  s.read("is_quantized", ev.is_quantized, to_bool);
  s.read("batch_size", ev.batch_size, int_at_least(1));
  s.read("num_batches", ev.num_batches, int_at_least(0));
  if (const Node* n = s.get("latency")) {
    Section lat(*n, s.at("latency"));
    lat.only({"batch_sizes", "warmup", "iters"});
    LatencySpec l;
    lat.read("batch_sizes", l.batch_sizes,
             list_of<int>(int_at_least(1), "a list of positive integers", true));
    if (l.batch_sizes.empty())
      type_error(*lat.get("batch_sizes"), lat.at("batch_sizes"), "at least one batch size");
    lat.read("warmup", l.warmup, int_at_least(0));
    lat.read("iters", l.iters, int_at_least(1));
    ev.latency = l;
  }
  if (const Node* n = s.get("gates")) {
    Section g(*n, s.at("gates"));
    g.only(gate_names(kEvaluateGate));
    ev.gates = read_gates(g, kEvaluateGate);
  }
}

}  // namespace

bool is_read_path(const std::string& path) {
  const std::vector<std::string> parts = split_path(path);
  if (parts[0] == "dataset") return parts.size() == 1 || contains(kDataSources, parts[1]);
  return contains(kTopKeys, parts[0]);
}

void read_sections(const Node& root, const std::set<std::string>& referenced, Spec& spec) {
  Section top(root, "spec");
  for (const auto& e : root.entries) {
    if (contains(kTopKeys, e.key)) continue;
    if (contains(kTaoTopKeys, e.key) || referenced.count(e.key)) {
      spdlog::debug("{}: '{}' ignored (tao-quant reads {})", e.key_loc.str(), e.key,
                    join_names(kTopKeys));
      continue;
    }
    std::string hint = did_you_mean(e.key, kTopKeys);  // only real typos are errors
    if (!hint.empty())
      throw SpecError(e.key_loc, "unknown top-level key " + quote_value(e.key) + hint +
                                     "; tao-quant reads " + join_names(kTopKeys));
    spdlog::warn("{}: unknown top-level key '{}' ignored (tao-quant reads {})", e.key_loc.str(),
                 e.key, join_names(kTopKeys));
  }
  top.read("results_dir", spec.results_dir, to_str);
  if (const Node* n = top.get("quantize")) read_quantize(Section(*n, "quantize"), spec.quantize);
  if (const Node* n = top.get("dataset")) read_dataset(Section(*n, "dataset"), spec.dataset);
  if (const Node* n = top.get("evaluate")) read_evaluate(Section(*n, "evaluate"), spec.evaluate);
}

}  // namespace tq::spec_detail
