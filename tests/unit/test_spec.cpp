// Spec parser: valid specs, defaults, locations, `???`, files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "taoquant/spec.h"

using Catch::Matchers::Contains;
using tq::DType;
using tq::parse_spec_text;

namespace {

tq::Spec parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_spec_text(text, "spec.yaml", overrides);
}

}  // namespace

TEST_CASE("spec: the TAO custom-backend example", "[spec]") {
  auto s = parse(R"(quantize:
  backend: torchao
  mode: weight_only_ptq
  layers:
    - module_name: Linear
      weights: {dtype: int8}
  skip_names: [classifier.fc]
)");
  CHECK(s.quantize.backend == "torchao");
  CHECK(s.quantize.mode == tq::Mode::kWeightOnly);
  REQUIRE(s.quantize.layers.size() == 1);
  const auto& rule = s.quantize.layers[0];
  CHECK(rule.module_name == "Linear");
  REQUIRE(rule.weights);
  CHECK(rule.weights->dtype == DType::kInt8);
  CHECK_FALSE(rule.weights->granularity);
  CHECK_FALSE(rule.activations);
  CHECK(rule.loc.line == 5);
  CHECK(rule.loc.column == 7);
  CHECK(rule.weights->loc.line == 6);
  CHECK(rule.weights->loc.column == 16);
  REQUIRE(s.quantize.skip_names.size() == 1);
  CHECK(s.quantize.skip_names[0].pattern == "classifier.fc");
  CHECK(s.quantize.skip_names[0].loc.line == 7);
  CHECK(s.quantize.skip_names[0].loc.column == 16);
  CHECK(s.path == "spec.yaml");
  CHECK(s.missing.empty());
}

TEST_CASE("spec: a full TAO classification spec", "[spec]") {
  auto s = parse(R"(results_dir: /results/cls
encryption_key: tlt_encode
model:
  backbone:
    type: fan_tiny_8_p4_hybrid
    pretrained_backbone_path: ???
  head: {type: TAOLinearClsHead}
train:
  num_gpus: 1
  results_dir: ${results_dir}/train
  optim: {lr: 0.001, type: AdamW}
dataset:
  root_dir: /data
  num_classes: 10
  img_size: 224
  augmentation: {mean: [0.5, 0.5, 0.5]}
  train_dataset: {images_dir: /data/train}
  val_dataset: {images_dir: /data/val}
  quant_calibration_dataset:
    images_dir: /data/calib
    classes: [cat, dog]
    batch_size: 16
    max_batches: 8
    shuffle: true
    seed: 7
    num_workers: 4
    preprocess:
      input_size: [224, 224]
      resize: 256
      center_crop: true
      mean: [0.485, 0.456, 0.406]
      std: [0.229, 0.224, 0.225]
      color: bgr
      scale: 1.0
  test_dataset:
    data_file: [/data/x.npz, /data/x2.npz]
    input_key: [x, x2]
    label_key: labels
evaluate:
  checkpoint: ${results_dir}/quantize/quantized_model_torchao.pth
  is_quantized: true
  num_gpus: 1
  gpu_ids: [0]
  trt_engine: /x.engine
  batch_size: 8
  num_batches: 4
  latency: {batch_sizes: [1, 8], warmup: 2, iters: 10}
  gates:
    max_top1_drop: 1.5
    min_top1: 70
    min_cosine: 0.99
    min_sqnr_db: 20
    min_top1_agreement: 0.95
    min_speedup: 1.1
    max_size_ratio: 0.5
export:
  checkpoint: ???
  onnx_file: ${results_dir}/model.onnx
inference: {checkpoint: x}
gen_trt_engine: {tensorrt: {data_type: int8}}
quantize:
  backend: modelopt
  mode: static_ptq
  algorithm: entropy
  default_layer_dtype: int8
  default_activation_dtype: uint8
  model_path: /models/fan.pt
  results_dir: ${results_dir}/quantize
  device: cuda:1
  backend_kwargs: {calib_size: 512, fold: true, name: x}
  layers:
    - module_name: "*"
      weights:
        dtype: int4
        granularity: per_group
        quant_axis: -1
        group_size: 128
        symmetric: false
        observer_or_fake_quant: MinMaxObserver
        observer_or_fake_quant_kwargs: {averaging_constant: 0.01, qscheme: per_tensor}
      activations: {dtype: fp8_e5m2, granularity: per_tensor}
    - module_name: Conv2d
      activations: {}
  skip_names: ["head.*", "*.bn[0-9]"]
)");
  const auto& q = s.quantize;
  CHECK(s.results_dir == "/results/cls");
  CHECK(q.backend == "modelopt");
  CHECK(q.mode == tq::Mode::kStatic);
  CHECK(q.algorithm == "entropy");
  CHECK(q.default_layer_dtype == DType::kInt8);
  CHECK(q.default_activation_dtype == DType::kUInt8);
  CHECK(q.model_path == "/models/fan.pt");
  CHECK(q.results_dir == "/results/cls/quantize");
  CHECK(s.effective_results_dir() == "/results/cls/quantize");
  CHECK(q.device == "cuda:1");
  CHECK(q.backend_kwargs == nlohmann::json{{"calib_size", 512}, {"fold", true}, {"name", "x"}});
  REQUIRE(q.layers.size() == 2);
  const auto& w = *q.layers[0].weights;
  CHECK(q.layers[0].module_name == "*");
  CHECK(w.dtype == DType::kInt4);
  CHECK(w.granularity == tq::Granularity::kPerGroup);
  CHECK(w.quant_axis == -1);
  CHECK(w.group_size == 128);
  CHECK(w.symmetric == false);
  CHECK(w.observer == "MinMaxObserver");
  CHECK(w.observer_kwargs["averaging_constant"] == 0.01);
  CHECK(w.observer_kwargs["qscheme"] == "per_tensor");
  CHECK(q.layers[0].activations->dtype == DType::kFp8E5M2);
  CHECK(q.layers[1].module_name == "Conv2d");
  CHECK_FALSE(q.layers[1].weights);
  REQUIRE(q.layers[1].activations);
  CHECK_FALSE(q.layers[1].activations->dtype);
  REQUIRE(q.skip_names.size() == 2);
  CHECK(q.skip_names[1].pattern == "*.bn[0-9]");

  REQUIRE(s.dataset.quant_calibration_dataset);
  const auto& cal = *s.dataset.quant_calibration_dataset;
  CHECK(cal.images_dir == "/data/calib");
  CHECK(cal.classes == std::vector<std::string>{"cat", "dog"});
  CHECK(cal.batch_size == 16);
  CHECK(cal.max_batches == 8);
  CHECK(cal.shuffle);
  CHECK(cal.seed == 7);
  CHECK(cal.num_workers == 4);
  CHECK(cal.loc.line == 20);
  CHECK(cal.preprocess.input_size == std::vector<int>{224, 224});
  CHECK(cal.preprocess.resize == 256);
  CHECK(cal.preprocess.center_crop);
  CHECK(cal.preprocess.mean == std::vector<double>{0.485, 0.456, 0.406});
  CHECK(cal.preprocess.std == std::vector<double>{0.229, 0.224, 0.225});
  CHECK(cal.preprocess.color == "bgr");
  CHECK(cal.preprocess.scale == 1.0);
  REQUIRE(s.dataset.test_dataset);
  const auto& test = *s.dataset.test_dataset;
  CHECK(test.data_files == std::vector<std::string>{"/data/x.npz", "/data/x2.npz"});
  CHECK(test.input_keys == std::vector<std::string>{"x", "x2"});
  CHECK(test.label_key == "labels");
  CHECK(test.images_dir.empty());

  const auto& ev = s.evaluate;
  CHECK(ev.checkpoint == "/results/cls/quantize/quantized_model_torchao.pth");
  CHECK(ev.is_quantized);
  CHECK(ev.batch_size == 8);
  CHECK(ev.num_batches == 4);
  REQUIRE(ev.latency);
  CHECK(ev.latency->batch_sizes == std::vector<int>{1, 8});
  CHECK(ev.latency->warmup == 2);
  CHECK(ev.latency->iters == 10);
  CHECK_FALSE(ev.gates.empty());
  CHECK(ev.gates.get(tq::Gate::kMaxTop1Drop) == 1.5);
  CHECK(ev.gates.get(tq::Gate::kMinTop1) == 70.0);
  CHECK(ev.gates.get(tq::Gate::kMinCosine) == 0.99);
  CHECK(ev.gates.get(tq::Gate::kMinSqnrDb) == 20.0);
  CHECK(ev.gates.get(tq::Gate::kMinTop1Agreement) == 0.95);
  CHECK(ev.gates.get(tq::Gate::kMinSpeedup) == 1.1);
  CHECK(ev.gates.get(tq::Gate::kMaxSizeRatio) == 0.5);

  // Unread sections are kept, resolved, in `resolved`; `???` anywhere is recorded.
  CHECK(s.resolved["train"]["results_dir"] == "/results/cls/train");
  CHECK(s.resolved["export"]["onnx_file"] == "/results/cls/model.onnx");
  CHECK(s.resolved["dataset"]["num_classes"] == 10);
  CHECK(s.missing ==
        std::set<std::string>{"model.backbone.pretrained_backbone_path", "export.checkpoint"});
  CHECK(s.resolved["export"]["checkpoint"] == "???");
  CHECK(s.loc("quantize.layers.1").line == 82);
  CHECK(s.loc("quantize.layers.1").column == 7);
  CHECK(s.loc("quantize.layers.0.weights.dtype").line == 74);
  CHECK(s.loc("quantize.layers.0.weights.dtype").column == 16);
  CHECK(s.loc("quantize.skip_names.1").line == 84);
  CHECK(s.loc("evaluate.gates.min_cosine").line == 51);
}

TEST_CASE("spec: defaults", "[spec]") {
  for (const char* text : {"", "quantize:\n", "quantize: {}\ndataset: {}\nevaluate: {}\n"}) {
    auto s = parse(text);
    const auto& q = s.quantize;
    CHECK(q.backend == "torchao");
    CHECK(q.mode == tq::Mode::kWeightOnly);
    CHECK(q.algorithm == "minmax");
    CHECK(q.default_layer_dtype == DType::kNative);
    CHECK(q.default_activation_dtype == DType::kNative);
    CHECK(q.layers.empty());
    CHECK(q.skip_names.empty());
    CHECK(q.model_path.empty());
    CHECK(q.results_dir.empty());
    CHECK(q.backend_kwargs == nlohmann::json::object());
    CHECK(q.device == "cpu");
    CHECK_FALSE(s.dataset.quant_calibration_dataset);
    CHECK_FALSE(s.dataset.test_dataset);
    CHECK(s.evaluate.checkpoint.empty());
    CHECK_FALSE(s.evaluate.is_quantized);
    CHECK(s.evaluate.batch_size == 64);
    CHECK(s.evaluate.num_batches == 0);
    CHECK_FALSE(s.evaluate.latency);
    CHECK(s.evaluate.gates.empty());
    CHECK(s.effective_results_dir().empty());
  }
  auto s = parse(R"(dataset:
  quant_calibration_dataset: {images_dir: /c}
evaluate:
  latency: {}
  gates: {min_top1: 0}
quantize:
  model_path:
  layers:
    - module_name: fc
      weights: {}
)");
  const auto& cal = *s.dataset.quant_calibration_dataset;
  CHECK(cal.batch_size == 32);
  CHECK(cal.max_batches == 0);
  CHECK_FALSE(cal.shuffle);
  CHECK(cal.num_workers == 2);
  CHECK(cal.label_key == "y");
  CHECK(cal.input_keys.empty());
  CHECK(cal.preprocess.input_size.empty());
  CHECK(cal.preprocess.color == "rgb");
  CHECK(cal.preprocess.scale == Approx(1.0 / 255.0));
  CHECK(s.evaluate.latency->batch_sizes == std::vector<int>{1, 32});
  CHECK(s.evaluate.latency->warmup == 5);
  CHECK(s.evaluate.latency->iters == 50);
  CHECK_FALSE(s.evaluate.gates.empty());
  CHECK(s.quantize.model_path.empty());  // null = unset
  CHECK(s.loc("quantize.model_path").line == 7);
  const auto& w = *s.quantize.layers[0].weights;
  CHECK_FALSE(w.dtype);
  CHECK_FALSE(w.group_size);
  CHECK(w.observer_kwargs == nlohmann::json::object());
}

TEST_CASE("spec: float8 spellings and other scalar forms", "[spec]") {
  auto s = parse(R"(quantize:
  default_layer_dtype: float8_e4m3fn
  default_activation_dtype: "float8_e5m2"
  device: cuda
  layers:
    - module_name: 'features.*'
      weights: {dtype: fp8_e4m3fn, symmetric: yes, group_size: "64"}
dataset:
  quant_calibration_dataset:
    data_file: calib.npz
    input_key: images
    preprocess: {input_size: 32, mean: 0.5, std: 0.25, color: gray}
evaluate:
  latency: {batch_sizes: 4}
)");
  CHECK(s.quantize.default_layer_dtype == DType::kFp8E4M3);
  CHECK(s.quantize.default_activation_dtype == DType::kFp8E5M2);
  CHECK(s.quantize.device == "cuda");
  const auto& w = *s.quantize.layers[0].weights;
  CHECK(w.dtype == DType::kFp8E4M3);
  CHECK(w.symmetric == true);
  CHECK(w.group_size == 64);
  const auto& cal = *s.dataset.quant_calibration_dataset;
  CHECK(cal.data_files == std::vector<std::string>{"calib.npz"});
  CHECK(cal.input_keys == std::vector<std::string>{"images"});
  CHECK(cal.preprocess.input_size == std::vector<int>{32, 32});
  CHECK(cal.preprocess.mean == std::vector<double>{0.5});
  CHECK(cal.preprocess.std == std::vector<double>{0.25});
  CHECK(cal.preprocess.color == "gray");
  CHECK(s.evaluate.latency->batch_sizes == std::vector<int>{4});
}

TEST_CASE("spec: resolved JSON is typed like YAML", "[spec]") {
  auto s = parse(R"(model:
  a: 1
  b: -2.5
  c: true
  d: ~
  e: "12"
  f: hello
  g: ???
  h: [1, x, 0x10, 1e3]
  i: no
quantize: {mode: dynamic_ptq}
)");
  const auto& m = s.resolved["model"];
  CHECK(m["a"] == 1);
  CHECK(m["a"].is_number_integer());
  CHECK(m["b"] == -2.5);
  CHECK(m["c"] == true);
  CHECK(m["d"].is_null());
  CHECK(m["e"] == "12");
  CHECK(m["f"] == "hello");
  CHECK(m["g"] == "???");
  CHECK(m["h"] == nlohmann::json{1, "x", 16, 1000.0});
  CHECK(m["i"] == false);
  CHECK(s.resolved["quantize"]["mode"] == "dynamic_ptq");
  CHECK(s.quantize.mode == tq::Mode::kDynamic);
}

TEST_CASE("spec: locations of keys", "[spec]") {
  auto s = parse(R"(results_dir: out
quantize:
  layers:
    - module_name: a
    - module_name: b
    - {module_name: c, weights: {dtype: int8}}
)");
  CHECK(s.loc("results_dir").str() == "spec.yaml:1:14");
  CHECK(s.loc("quantize.layers.2").str() == "spec.yaml:6:7");
  CHECK(s.loc("quantize.layers.2.weights.dtype").str() == "spec.yaml:6:41");
  CHECK(s.loc("quantize.layers.1.module_name").str() == "spec.yaml:5:20");
  CHECK(s.loc("quantize.nothing").str() == "spec.yaml");
  CHECK(s.loc("quantize.nothing").line == 0);
  CHECK(s.effective_results_dir() == "out");
  CHECK(s.quantize.results_dir == "out");  // falls back to the top-level one
}

TEST_CASE("spec: results_dir precedence", "[spec]") {
  auto s = parse("results_dir: a\nquantize: {results_dir: b}\n");
  CHECK(s.effective_results_dir() == "b");
  CHECK(s.results_dir == "a");
  s = parse("quantize: {results_dir: rel/dir}\n");
  CHECK(s.effective_results_dir() == "rel/dir");
  CHECK(s.results_dir.empty());
  tq::require_results_dir(s);
}

TEST_CASE("spec: ??? values are unset and recorded", "[spec]") {
  auto s = parse(R"(results_dir: ???
quantize:
  model_path: ???
  results_dir: ${results_dir}/quantize
  mode: static_ptq
dataset:
  quant_calibration_dataset:
    images_dir: ???
evaluate:
  checkpoint: ${quantize.results_dir}/model.pth
)");
  CHECK(s.missing == std::set<std::string>{
                         "results_dir", "quantize.model_path", "quantize.results_dir",
                         "dataset.quant_calibration_dataset.images_dir", "evaluate.checkpoint"});
  CHECK(s.quantize.model_path.empty());
  CHECK(s.evaluate.checkpoint.empty());
  CHECK(s.resolved["evaluate"]["checkpoint"] == "???");

  auto msg = [&](void (*check)(const tq::Spec&)) -> std::string {
    try {
      check(s);
    } catch (const tq::SpecError& e) {
      CHECK(e.code() == tq::ExitCode::kUsage);
      return e.what();
    }
    return "<no error>";
  };
  CHECK(msg(tq::require_model_path) ==
        R"(spec.yaml:3:15: quantize.model_path is '???' (a value you must fill in): the model to )"
        "quantize (a TorchScript .pt file); set it in the spec or pass quantize.model_path=PATH");
  CHECK_THAT(msg(tq::require_results_dir),
             Contains(R"(spec.yaml:1:14: results_dir is '???' (a value you must fill in))") &&
                 Contains("pass results_dir=DIR"));
  CHECK_THAT(msg(tq::require_calibration),
             Contains(R"(spec.yaml:8:17: dataset.quant_calibration_dataset.images_dir is '???')") &&
                 Contains("static_ptq needs calibration data"));

  // Filled in from the command line, everything is there.
  s = parse_spec_text(R"(results_dir: ???
quantize: {model_path: '???', mode: static_ptq}
dataset:
  quant_calibration_dataset:
    images_dir: ???
)",
                      "spec.yaml",
                      {"quantize.model_path=m.pt", "results_dir=runs/x",
                       "dataset.quant_calibration_dataset.images_dir=calib"});
  CHECK(s.missing.empty());
  tq::require_model_path(s);
  tq::require_results_dir(s);
  tq::require_calibration(s);
  CHECK(s.effective_results_dir() == "runs/x");
}

TEST_CASE("spec: require_* when keys are absent or empty", "[spec]") {
  auto what = [](void (*check)(const tq::Spec&), const tq::Spec& s) -> std::string {
    try {
      check(s);
    } catch (const tq::SpecError& e) {
      return e.what();
    }
    return "<no error>";
  };
  auto s = parse("quantize:\n  mode: static_ptq\n");
  CHECK(what(tq::require_model_path, s) ==
        "spec.yaml:2:3: quantize.model_path is not set: the model to quantize (a TorchScript .pt "
        "file); set it in the spec or pass quantize.model_path=PATH");
  CHECK_THAT(what(tq::require_results_dir, s),
             Contains("spec.yaml: results_dir is not set") && Contains("results_dir=DIR"));
  CHECK_THAT(what(tq::require_calibration, s),
             Contains("spec.yaml:2:9: quantize.mode static_ptq needs calibration data") &&
                 Contains("dataset.quant_calibration_dataset.images_dir"));
  s = parse("quantize:\n  model_path: ''\n  results_dir: \"\"\n");
  CHECK_THAT(what(tq::require_model_path, s),
             Contains("spec.yaml:2:15: quantize.model_path is empty"));
  CHECK_THAT(what(tq::require_results_dir, s),
             Contains("spec.yaml:3:16: quantize.results_dir is empty"));
  s = parse(
      "quantize: {mode: static_ptq}\ndataset:\n  quant_calibration_dataset: {batch_size: 4}\n");
  CHECK_THAT(what(tq::require_calibration, s),
             Contains("spec.yaml:3:30:") && Contains("neither images_dir nor data_file"));
  s = parse(
      "quantize: {mode: static_ptq}\ndataset:\n  quant_calibration_dataset: {data_file: a.npz}\n");
  tq::require_calibration(s);
  tq::require_calibration(parse("quantize: {mode: dynamic_ptq}\n"));
}

TEST_CASE("spec: sections tao-quant does not read are ignored", "[spec]") {
  auto s = parse(R"(wandb: {enable: false}
prune: [1, 2]
distill: x
my_notes: anything
train:
  cwd: ${hydra:runtime.cwd}
  key: ${env:TQ_TEST_SURELY_UNSET_VAR}
  bad: ${nothing.here}
  loop_a: ${train.loop_b}
  loop_b: x/${train.loop_a}
dataset:
  train_dataset: {whatever: 1, images_dir: "${env:TQ_TEST_SURELY_UNSET_VAR}"}
  val_dataset: 3
evaluate: {num_gpus: 8, gpu_ids: [0, 1], gpu_id: 0, results_dir: /r}
)");
  CHECK(s.resolved["train"]["cwd"] == "${hydra:runtime.cwd}");
  CHECK(s.resolved["train"]["bad"] == "${nothing.here}");
  CHECK(s.resolved["train"]["loop_a"] == "${train.loop_b}");
  CHECK(s.resolved["train"]["loop_b"] == "x/${train.loop_a}");
  CHECK(s.resolved["my_notes"] == "anything");
  CHECK(s.evaluate.batch_size == 64);
}

TEST_CASE("spec: YAML merge keys and anchors", "[spec]") {
  auto s = parse(R"(common: &w {dtype: int8, granularity: per_channel}
quantize:
  layers:
    - module_name: Linear
      weights:
        <<: *w
        granularity: per_tensor
    - module_name: Conv2d
      weights: *w
)");
  CHECK(s.quantize.layers[0].weights->dtype == DType::kInt8);
  CHECK(s.quantize.layers[0].weights->granularity == tq::Granularity::kPerTensor);
  CHECK(s.quantize.layers[1].weights->granularity == tq::Granularity::kPerChannel);
}

TEST_CASE("spec: load_spec reads a file", "[spec]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "tq_test_spec";
  fs::create_directories(dir);
  fs::path file = dir / "spec.yaml";
  std::ofstream(file) << "quantize:\n  mode: dynamic_ptq\n  model_path: m.pt\n";
  auto s = tq::load_spec(file.string(), {"quantize.device=cuda:0"});
  CHECK(s.path == file.string());
  CHECK(s.quantize.mode == tq::Mode::kDynamic);
  CHECK(s.quantize.device == "cuda:0");
  CHECK(s.loc("quantize.model_path").str() == file.string() + ":3:15");

  std::ofstream(file) << "quantize:\n  mode: dynamic\n";
  try {
    tq::load_spec(file.string());
    FAIL("no error");
  } catch (const tq::SpecError& e) {
    CHECK(e.loc().file == file.string());
    CHECK(e.loc().line == 2);
    CHECK_THAT(e.what(), Contains("did you mean 'dynamic_ptq'?"));
  }
  fs::remove_all(dir);
}

TEST_CASE("spec: every spec in specs/ parses", "[spec]") {
  namespace fs = std::filesystem;
  fs::path root = fs::path(TQ_SOURCE_DIR) / "specs";
  std::vector<fs::path> files;
  if (fs::is_directory(root))
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() &&
          (e.path().extension() == ".yaml" || e.path().extension() == ".yml"))
        files.push_back(e.path());
  if (files.empty()) {
    WARN("no specs/**/*.yaml in the repository yet");
    return;
  }
  for (const auto& f : files) {
    INFO(f.string());
    CHECK_NOTHROW(tq::load_spec(f.string()));
  }
}
