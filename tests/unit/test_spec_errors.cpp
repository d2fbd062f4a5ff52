// Spec parser: invalid specs. Each case checks the exit code, the position
// and the parts of the message a user needs (key, value, expected, hint).
#include <catch2/catch.hpp>

#include <filesystem>

#include "taoquant/spec.h"

using Catch::Matchers::Contains;
using tq::ExitCode;

namespace {

struct Failure {
  ExitCode code = ExitCode::kOk;
  tq::SourceLoc loc;
  std::string msg = "<no error>";
};

Failure fail_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    tq::parse_spec_text(text, "spec.yaml", overrides);
  } catch (const tq::SpecError& e) {
    return {e.code(), e.loc(), e.what()};
  }
  return {};
}

Failure fail_of_file(const std::string& path) {
  try {
    tq::load_spec(path);
  } catch (const tq::SpecError& e) {
    return {e.code(), e.loc(), e.what()};
  }
  return {};
}

// An error in a command-line override: located there, with no line.
#define CHECK_OVERRIDE(f, arg)                                                 \
  do {                                                                         \
    INFO((f).msg);                                                             \
    CHECK((f).code == ExitCode::kUsage);                                       \
    CHECK((f).loc.file == "command-line override '" + std::string(arg) + "'"); \
    CHECK((f).loc.line == 0);                                                  \
  } while (0)

#define CHECK_AT(f, l, c)                \
  do {                                   \
    INFO((f).msg);                       \
    CHECK((f).code == ExitCode::kUsage); \
    CHECK((f).loc.file == "spec.yaml");  \
    CHECK((f).loc.line == (l));          \
    CHECK((f).loc.column == (c));        \
  } while (0)

}  // namespace

// ---- YAML and files ------------------------------------------------------

TEST_CASE("spec error: YAML syntax", "[spec]") {
  auto f = fail_of("quantize:\n  mode: static_ptq\n  skip_names: [a, b\n");
  CHECK_AT(f, 4, 1);
  CHECK_THAT(f.msg, Contains("spec.yaml:4:") && Contains("invalid YAML") &&
                        Contains("did not find expected ',' or ']'") &&
                        Contains("while parsing a flow sequence that starts at line 3"));
  f = fail_of("quantize:\n  mode: a\n bad: 1\n");
  CHECK_AT(f, 3, 2);
  CHECK_THAT(f.msg, Contains("invalid YAML: did not find expected key"));
}

TEST_CASE("spec error: missing or unreadable file", "[spec]") {
  auto f = fail_of_file("/nonexistent/dir/spec.yaml");
  CHECK(f.code == ExitCode::kUsage);
  CHECK(f.loc.file == "/nonexistent/dir/spec.yaml");
  CHECK(f.loc.line == 0);
  CHECK(f.msg ==
        "/nonexistent/dir/spec.yaml: cannot read the spec file: No such file or directory");
  f = fail_of_file(std::filesystem::temp_directory_path().string());
  CHECK(f.code == ExitCode::kUsage);
  CHECK_THAT(f.msg, Contains("cannot read the spec file: it is a directory"));
}

TEST_CASE("spec error: the root is not a map", "[spec]") {
  auto f = fail_of("- quantize\n- dataset\n");
  CHECK_AT(f, 1, 1);
  CHECK_THAT(f.msg, Contains("the spec must be a map of sections") && Contains("found a list"));
  f = fail_of("just text\n");
  CHECK_AT(f, 1, 1);
  CHECK_THAT(f.msg, Contains("found 'just text'"));
}

TEST_CASE("spec error: duplicate key", "[spec]") {
  auto f = fail_of("quantize:\n  mode: static_ptq\n  backend: x\n  mode: dynamic_ptq\n");
  CHECK_AT(f, 4, 3);
  CHECK(f.msg == "spec.yaml:4:3: quantize: duplicate key 'mode' (first set at line 2)");
  f = fail_of("quantize: {layers: [{module_name: a, module_name: b}]}\n");
  CHECK_AT(f, 1, 38);
  CHECK_THAT(f.msg, Contains("quantize.layers.0: duplicate key 'module_name'"));
}

TEST_CASE("spec error: non-string key and bad merge", "[spec]") {
  auto f = fail_of("quantize:\n  ? [a, b]\n  : 1\n");
  CHECK_AT(f, 2, 5);
  CHECK_THAT(f.msg, Contains("quantize: keys must be plain strings"));
  f = fail_of("quantize:\n  <<: 5\n");
  CHECK_AT(f, 2, 7);
  CHECK_THAT(f.msg, Contains("quantize.<<: expected a map") && Contains("found '5'"));
}

// ---- top level and sections ----------------------------------------------

TEST_CASE("spec error: misspelt top-level sections", "[spec]") {
  for (const char* word : {"quantise", "qunatize"}) {
    auto f = fail_of(std::string("results_dir: r\n") + word + ":\n  mode: static_ptq\n");
    CHECK_AT(f, 2, 1);
    CHECK_THAT(f.msg, Contains(std::string("unknown top-level key '") + word + "'") &&
                          Contains("(did you mean 'quantize'?)"));
  }
  auto f = fail_of("evalute:\n  batch_size: 3\n");
  CHECK_AT(f, 1, 1);
  CHECK_THAT(f.msg, Contains("'evalute' (did you mean 'evaluate'?)"));
  f = fail_of("resluts_dir: /x\n");
  CHECK_AT(f, 1, 1);
  CHECK_THAT(f.msg, Contains("did you mean 'results_dir'?"));
}

TEST_CASE("spec error: sections of the wrong type", "[spec]") {
  auto f = fail_of("quantize:\n  - mode: static_ptq\n");
  CHECK_AT(f, 2, 3);
  CHECK(f.msg == "spec.yaml:2:3: quantize: expected a map, found a list");
  f = fail_of("dataset: calib/\n");
  CHECK_AT(f, 1, 10);
  CHECK_THAT(f.msg, Contains("dataset: expected a map, found 'calib/'"));
  f = fail_of("results_dir: [a]\n");
  CHECK_AT(f, 1, 14);
  CHECK_THAT(f.msg, Contains("results_dir: expected a string, found a list"));
}

// ---- quantize ------------------------------------------------------------

TEST_CASE("spec error: unknown quantize key", "[spec]") {
  auto f = fail_of(R"(quantize:
  backend: torchao
  mode: weight_only_ptq
  layers:
    - module_name: Linear
      weights: {dtype: int8}
  algoritm: max
)");
  CHECK_AT(f, 7, 3);
  CHECK(f.msg ==
        "spec.yaml:7:3: quantize: unknown key 'algoritm' (did you mean 'algorithm'?); allowed "
        "keys: backend, mode, algorithm, default_layer_dtype, default_activation_dtype, layers, "
        "skip_names, model_path, results_dir, backend_kwargs, device, timing_cache, tune, "
        "sensitivity, export, equalization, "
        "smoothquant, "
        "awq, weight_rounding, bias_correction");
}

TEST_CASE("spec error: bad mode", "[spec]") {
  auto f = fail_of(R"(quantize:
  backend: torchao

  mode: static_pqt
)");
  CHECK_AT(f, 4, 9);
  CHECK(f.msg ==
        "spec.yaml:4:9: quantize.mode: 'static_pqt' is not a valid mode (expected one of: "
        "weight_only_ptq, static_ptq, dynamic_ptq) (did you mean 'static_ptq'?)");
}

TEST_CASE("spec: quantize.algorithm is an observer name, checked with the backend", "[spec]") {
  // The observer registry (plugins add to it) decides; see capabilities_test.cpp.
  auto spec = tq::parse_spec_text("quantize:\n  algorithm: my_plugin_observer\n", "spec.yaml");
  CHECK(spec.quantize.algorithm == "my_plugin_observer");
}

TEST_CASE("spec error: bad weight_rounding", "[spec][algorithms]") {
  auto f = fail_of("quantize:\n  weight_rounding: gtpq\n");
  CHECK_AT(f, 2, 20);
  CHECK_THAT(f.msg, Contains("quantize.weight_rounding: 'gtpq' is not a valid rounding") &&
                        Contains("nearest, gptq") && Contains("(did you mean 'gptq'?)"));
  f = fail_of("quantize:\n  weight_rounding: {method: gptq, dmap: 0.1}\n");
  CHECK_THAT(f.msg, Contains("unknown key 'dmap' (did you mean 'damp'?)"));
  f = fail_of("quantize:\n  weight_rounding: {damp: 0.1}\n");
  CHECK_THAT(f.msg, Contains("quantize.weight_rounding: needs method: nearest, gptq"));
  f = fail_of("quantize:\n  weight_rounding: {method: gptq, damp: -1}\n");
  CHECK_THAT(f.msg, Contains("quantize.weight_rounding.damp: expected a number > 0"));
}

TEST_CASE("spec error: an algorithm in a mode it does not apply to", "[spec][algorithms]") {
  auto f = fail_of("quantize:\n  mode: dynamic_ptq\n  bias_correction: true\n");
  CHECK_AT(f, 3, 20);
  CHECK_THAT(f.msg, Contains("quantize.bias_correction applies to mode weight_only_ptq, "
                             "static_ptq in this version, not dynamic_ptq"));
  f = fail_of(R"(quantize:
  mode: dynamic_ptq
  layers:
    - module_name: fc
      weights: {dtype: int8, rounding: gptq}
)");
  CHECK_AT(f, 5, 16);
  CHECK_THAT(f.msg, Contains("quantize.weight_rounding applies to mode weight_only_ptq"));
  f = fail_of(R"(quantize:
  layers:
    - module_name: fc
      activations: {dtype: int8, rounding: gptq}
)");
  CHECK_THAT(f.msg, Contains("quantize.layers.0.activations.rounding: applies to weights only"));
}

TEST_CASE("spec: algorithm settings", "[spec][algorithms]") {
  auto spec = tq::parse_spec_text(R"(quantize:
  weight_rounding: {method: gptq, damp: 0.05, block_size: 64, act_order: true}
  bias_correction: true
  layers:
    - module_name: head
      weights: {dtype: int4, rounding: nearest}
)",
                                  "spec.yaml");
  const auto& a = spec.quantize.algorithms;
  CHECK(a.weight_rounding == tq::Rounding::kGptq);
  CHECK(a.gptq.damp == 0.05);
  CHECK(a.gptq.block_size == 64);
  CHECK(a.gptq.act_order);
  CHECK(a.bias_correction);
  CHECK(a.weight_rounding_loc.line == 2);
  CHECK(spec.quantize.layers.at(0).weights->rounding == tq::Rounding::kNearest);
  CHECK(a.needs_data());
  CHECK_FALSE(a.equalization.enabled);
  // act_order is on unless a spec turns it off.
  auto plain = tq::parse_spec_text("quantize:\n  weight_rounding: gptq\n", "spec.yaml");
  CHECK(plain.quantize.algorithms.gptq.act_order);
  auto off = tq::parse_spec_text("quantize:\n  weight_rounding: {method: gptq, act_order: false}\n",
                                 "spec.yaml");
  CHECK_FALSE(off.quantize.algorithms.gptq.act_order);
  // sequential likewise; a misspelled key is named with the keys there are.
  CHECK(plain.quantize.algorithms.gptq.sequential);
  auto one = tq::parse_spec_text(
      "quantize:\n  weight_rounding: {method: gptq, sequential: false}\n", "spec.yaml");
  CHECK_FALSE(one.quantize.algorithms.gptq.sequential);
  auto fs = fail_of("quantize:\n  weight_rounding: {method: gptq, sequentail: false}\n");
  CHECK_THAT(fs.msg, Contains("sequentail") && Contains("sequential"));
  auto eq = tq::parse_spec_text("quantize:\n  mode: static_ptq\n  equalization: {iterations: 5}\n",
                                "spec.yaml");
  CHECK(eq.quantize.algorithms.equalization.enabled);
  CHECK(eq.quantize.algorithms.equalization.iterations == 5);
  CHECK_FALSE(eq.quantize.algorithms.needs_data());  // data-free
  auto f = fail_of("quantize:\n  equalization: {iterations: 0}\n");
  CHECK_THAT(f.msg, Contains("quantize.equalization.iterations: expected a positive integer"));
  f = fail_of("quantize:\n  equalization: yes please\n");
  CHECK_THAT(f.msg, Contains("quantize.equalization: expected true or false"));
}

TEST_CASE("spec error: bad default dtype", "[spec]") {
  auto f = fail_of("quantize:\n  default_layer_dtype: int9\n");
  CHECK_AT(f, 2, 24);
  CHECK_THAT(f.msg, Contains("quantize.default_layer_dtype: 'int9' is not a valid dtype") &&
                        Contains("(expected one of: int8, uint8, int4, fp8_e4m3fn, fp8_e5m2, "
                                 "native)") &&
                        Contains("did you mean 'int8'?"));
  f = fail_of("quantize:\n  default_activation_dtype: float8_e4m3\n");
  CHECK_AT(f, 2, 29);
  CHECK_THAT(f.msg, Contains("'float8_e4m3'") && Contains("(did you mean 'float8_e4m3fn'?)"));
}

TEST_CASE("spec error: bad layer dtype, with a case hint", "[spec]") {
  auto f = fail_of(R"(quantize:
  layers:
    - module_name: Linear
      weights:
        dtype: INT8
)");
  CHECK_AT(f, 5, 16);
  CHECK_THAT(f.msg, Contains("quantize.layers.0.weights.dtype: 'INT8' is not a valid dtype") &&
                        Contains("(did you mean 'int8'?)"));
}

TEST_CASE("spec error: bad granularity", "[spec]") {
  auto f = fail_of(R"(quantize:
  layers:
    - module_name: Linear
    - module_name: Conv2d
      activations: {dtype: int8, granularity: per_chanel}
)");
  CHECK_AT(f, 5, 47);
  CHECK_THAT(f.msg,
             Contains("quantize.layers.1.activations.granularity: 'per_chanel' is not a valid "
                      "granularity (expected one of: per_tensor, per_channel, per_group)") &&
                 Contains("did you mean 'per_channel'?"));
}

TEST_CASE("spec error: group_size zero, negative or text", "[spec]") {
  const char* head =
      "quantize:\n  layers:\n    - module_name: Linear\n      weights: {group_size: ";
  auto f = fail_of(std::string(head) + "0}\n");
  CHECK_AT(f, 4, 29);
  CHECK(f.msg ==
        "spec.yaml:4:29: quantize.layers.0.weights.group_size: expected a positive "
        "integer, found '0'");
  f = fail_of(std::string(head) + "-32}\n");
  CHECK_AT(f, 4, 29);
  CHECK_THAT(f.msg, Contains("expected a positive integer, found '-32'"));
  f = fail_of(std::string(head) + "abc}\n");
  CHECK_AT(f, 4, 29);
  CHECK_THAT(f.msg, Contains("group_size: expected a positive integer, found 'abc'"));
  f = fail_of(std::string(head) + "[1]}\n");
  CHECK_AT(f, 4, 29);
  CHECK_THAT(f.msg, Contains("group_size: expected a positive integer, found a list"));
}

TEST_CASE("spec error: bad bool and int", "[spec]") {
  auto f = fail_of(R"(quantize:
  layers:
    - module_name: Linear
      weights:
        symmetric: maybe
)");
  CHECK_AT(f, 5, 20);
  CHECK_THAT(f.msg, Contains("quantize.layers.0.weights.symmetric: expected true or false, found "
                             "'maybe'"));
  f = fail_of("quantize:\n  layers:\n    - module_name: x\n      weights: {quant_axis: 1.5}\n");
  CHECK_AT(f, 4, 29);
  CHECK_THAT(f.msg, Contains("quant_axis: expected an integer, found '1.5'"));
}

TEST_CASE("spec error: layers is not a list", "[spec]") {
  auto f = fail_of("quantize:\n  layers:\n    module_name: Linear\n");
  CHECK_AT(f, 3, 5);
  CHECK_THAT(f.msg, Contains("quantize.layers: expected a list of {module_name, weights, "
                             "activations} maps, found a map"));
}

TEST_CASE("spec error: layer without module_name", "[spec]") {
  auto f = fail_of("quantize:\n  layers:\n    - module_name: a\n    - weights: {dtype: int8}\n");
  CHECK_AT(f, 4, 7);
  CHECK_THAT(f.msg, Contains("quantize.layers.1.module_name: is required"));
  f = fail_of("quantize:\n  layers:\n    - module_name: ???\n");
  CHECK_AT(f, 3, 20);
  CHECK_THAT(f.msg, Contains(R"(quantize.layers.0.module_name: is '???')"));
}

TEST_CASE("spec error: empty patterns", "[spec]") {
  auto f = fail_of("quantize:\n  layers:\n    - module_name: ''\n");
  CHECK_AT(f, 3, 20);
  CHECK_THAT(f.msg, Contains("quantize.layers.0.module_name: expected a non-empty string, "
                             "found ''"));
  f = fail_of("quantize:\n  skip_names: [head, \"\"]\n");
  CHECK_AT(f, 2, 22);
  CHECK_THAT(f.msg, Contains("quantize.skip_names.1: expected a non-empty string, found ''"));
}

TEST_CASE("spec error: skip_names is not a list", "[spec]") {
  auto f = fail_of("quantize:\n  skip_names: classifier.fc\n");
  CHECK_AT(f, 2, 15);
  CHECK_THAT(f.msg, Contains("quantize.skip_names: expected a list of name patterns, found "
                             "'classifier.fc'"));
}

TEST_CASE("spec error: weights is not a map", "[spec]") {
  auto f = fail_of("quantize:\n  layers:\n    - module_name: Linear\n      weights: int8\n");
  CHECK_AT(f, 4, 16);
  CHECK_THAT(f.msg, Contains("quantize.layers.0.weights: expected a map, found 'int8'"));
}

TEST_CASE("spec error: unknown keys in layers and weights", "[spec]") {
  auto f =
      fail_of("quantize:\n  layers:\n    - module_name: Linear\n      weight: {dtype: int8}\n");
  CHECK_AT(f, 4, 7);
  CHECK_THAT(f.msg, Contains("quantize.layers.0: unknown key 'weight' (did you mean 'weights'?)") &&
                        Contains("allowed keys: module_name, weights, activations"));
  f = fail_of("quantize:\n  layers:\n    - module_name: Linear\n      weights: {dtpye: int8}\n");
  CHECK_AT(f, 4, 17);
  CHECK_THAT(f.msg, Contains("quantize.layers.0.weights: unknown key 'dtpye' (did you mean "
                             "'dtype'?)") &&
                        Contains("observer_or_fake_quant_kwargs"));
}

TEST_CASE("spec error: kwargs that are not maps", "[spec]") {
  auto f = fail_of(R"(quantize:
  layers:
    - module_name: Linear
      weights:
        observer_or_fake_quant_kwargs: [1, 2]
)");
  CHECK_AT(f, 5, 40);
  CHECK_THAT(f.msg, Contains("observer_or_fake_quant_kwargs: expected a map, found a list"));
  f = fail_of("quantize:\n  backend_kwargs: fast\n");
  CHECK_AT(f, 2, 19);
  CHECK_THAT(f.msg, Contains("quantize.backend_kwargs: expected a map, found 'fast'"));
}

TEST_CASE("spec error: bad device", "[spec]") {
  auto f = fail_of("quantize:\n  device: gpu\n");
  CHECK_AT(f, 2, 11);
  CHECK(f.msg ==
        "spec.yaml:2:11: quantize.device: 'gpu' is not a valid device (expected cpu, "
        "cuda or cuda:N, e.g. cuda:0) (did you mean 'cpu'?)");
  f = fail_of("quantize:\n  device: cuda:x\n");
  CHECK_AT(f, 2, 11);
  CHECK_THAT(f.msg, Contains("'cuda:x' is not a valid device"));
  f = fail_of("quantize:\n  device: CUDA\n");
  CHECK_AT(f, 2, 11);
  CHECK_THAT(f.msg, Contains("(did you mean 'cuda'?)"));
}

// ---- dataset -------------------------------------------------------------

TEST_CASE("spec error: misspelt dataset subsection", "[spec]") {
  auto f = fail_of("dataset:\n  train_dataset: {}\n  test_datset:\n    images_dir: /x\n");
  CHECK_AT(f, 3, 3);
  CHECK_THAT(f.msg, Contains("dataset: unknown key 'test_datset' (did you mean 'test_dataset'?)"));
  f = fail_of("dataset:\n  quant_calibraton_dataset: {images_dir: /x}\n");
  CHECK_AT(f, 2, 3);
  CHECK_THAT(f.msg, Contains("did you mean 'quant_calibration_dataset'?"));
}

TEST_CASE("spec error: images_dir and data_file together", "[spec]") {
  auto f = fail_of(R"(dataset:
  quant_calibration_dataset:
    images_dir: /data/calib
    data_file: calib.npz
)");
  CHECK_AT(f, 4, 16);
  CHECK_THAT(f.msg, Contains("dataset.quant_calibration_dataset: set images_dir or data_file, "
                             "not both"));
}

TEST_CASE("spec error: bad data source sizes", "[spec]") {
  auto f = fail_of("dataset:\n  test_dataset:\n    batch_size: 0\n");
  CHECK_AT(f, 3, 17);
  CHECK_THAT(f.msg, Contains("dataset.test_dataset.batch_size: expected a positive integer, "
                             "found '0'"));
  f = fail_of("dataset:\n  test_dataset:\n    max_batches: -1\n");
  CHECK_AT(f, 3, 18);
  CHECK_THAT(f.msg, Contains("max_batches: expected a non-negative integer, found '-1'"));
  f = fail_of("dataset:\n  quant_calibration_dataset:\n    num_workers: 0\n");
  CHECK_AT(f, 3, 18);
  CHECK_THAT(f.msg, Contains("num_workers: expected a positive integer, found '0'"));
  f = fail_of("dataset:\n  quant_calibration_dataset:\n    seed: -5\n");
  CHECK_AT(f, 3, 11);
  CHECK_THAT(f.msg, Contains("seed: expected a non-negative integer, found '-5'"));
}

TEST_CASE("spec error: unknown key in a data source", "[spec]") {
  auto f = fail_of("dataset:\n  quant_calibration_dataset:\n    image_dir: /x\n");
  CHECK_AT(f, 3, 5);
  CHECK_THAT(f.msg, Contains("dataset.quant_calibration_dataset: unknown key 'image_dir' (did "
                             "you mean 'images_dir'?)"));
}

TEST_CASE("spec error: bad preprocess", "[spec]") {
  const std::string head = "dataset:\n  quant_calibration_dataset:\n    preprocess:\n      ";
  auto f = fail_of(head + "color: grey\n");
  CHECK_AT(f, 4, 14);
  CHECK_THAT(f.msg, Contains("preprocess.color: 'grey' is not a valid color (expected one of: "
                             "rgb, bgr, gray) (did you mean 'gray'?)"));
  f = fail_of(head + "input_size: [224]\n");
  CHECK_AT(f, 4, 19);
  CHECK_THAT(f.msg, Contains("input_size: expected [H, W] (two positive integers)") &&
                        Contains("found a list"));
  f = fail_of(head + "std: [0.2, 0]\n");
  CHECK_AT(f, 4, 18);
  CHECK_THAT(f.msg, Contains("preprocess.std.1: expected a number > 0, found '0'"));
  f = fail_of(head + "mean: [0.5, 0.5, 0.5]\n      std: [0.5]\n");
  CHECK_AT(f, 5, 12);
  CHECK_THAT(f.msg, Contains("preprocess.std: has 1 values but mean has 3"));
  f = fail_of(head + "scale: -1\n");
  CHECK_AT(f, 4, 14);
  CHECK_THAT(f.msg, Contains("preprocess.scale: expected a number > 0, found '-1'"));
  f = fail_of(head + "size: 3\n");
  CHECK_AT(f, 4, 7);
  CHECK_THAT(f.msg, Contains("preprocess: unknown key 'size'") && Contains("allowed keys:"));
}

// ---- evaluate ------------------------------------------------------------

TEST_CASE("spec error: unknown evaluate key", "[spec]") {
  auto f = fail_of("evaluate:\n  num_gpus: 1\n  chekpoint: a.pth\n");
  CHECK_AT(f, 3, 3);
  CHECK_THAT(f.msg, Contains("evaluate: unknown key 'chekpoint' (did you mean 'checkpoint'?)"));
}

TEST_CASE("spec error: bad latency", "[spec]") {
  auto f = fail_of("evaluate:\n  latency:\n    batch_sizes: [1, -2]\n");
  CHECK_AT(f, 3, 22);
  CHECK_THAT(f.msg, Contains("evaluate.latency.batch_sizes.1: expected a positive integer, found "
                             "'-2'"));
  f = fail_of("evaluate:\n  latency:\n    batch_sizes: []\n");
  CHECK_AT(f, 3, 18);
  CHECK_THAT(f.msg, Contains("expected at least one batch size"));
  f = fail_of("evaluate:\n  latency: {iters: 0}\n");
  CHECK_AT(f, 2, 20);
  CHECK_THAT(f.msg, Contains("evaluate.latency.iters: expected a positive integer"));
}

TEST_CASE("spec error: bad gate and evaluate values", "[spec]") {
  auto f = fail_of("evaluate:\n  gates:\n    min_cosine: high\n");
  CHECK_AT(f, 3, 17);
  CHECK(f.msg == "spec.yaml:3:17: evaluate.gates.min_cosine: expected a number, found 'high'");
  f = fail_of("evaluate:\n  gates: {min_cosin: 0.9}\n");
  CHECK_AT(f, 2, 11);
  CHECK_THAT(f.msg, Contains("evaluate.gates: unknown key 'min_cosin' (did you mean "
                             "'min_cosine'?)"));
  f = fail_of("evaluate:\n  is_quantized: sure\n");
  CHECK_AT(f, 2, 17);
  CHECK_THAT(f.msg, Contains("evaluate.is_quantized: expected true or false, found 'sure'"));
}

// ---- interpolation -------------------------------------------------------

TEST_CASE("spec error: interpolation of a missing key", "[spec]") {
  auto f = fail_of("quantize:\n  results_dir: /r\n  model_path: ${quantize.resluts_dir}/m.pt\n");
  CHECK_AT(f, 3, 15);
  CHECK_THAT(f.msg, Contains("quantize.model_path: interpolation '${quantize.resluts_dir}': key "
                             "'quantize.resluts_dir' not found") &&
                        Contains("(did you mean 'quantize.results_dir'?)"));
  f = fail_of("quantize:\n  model_path: ${names.3}\nnames: [a]\n");
  CHECK_AT(f, 2, 15);
  CHECK_THAT(f.msg, Contains("'3' is not an index of 'names' (a list of 1)"));
}

TEST_CASE("spec error: interpolation cycle", "[spec]") {
  auto f = fail_of("a: ${b}\nb: ${quantize.model_path}\nquantize:\n  model_path: ${a}\n");
  CHECK_AT(f, 2, 4);
  CHECK_THAT(f.msg, Contains("interpolation cycle: quantize.model_path -> a -> b -> "
                             "quantize.model_path"));
}

TEST_CASE("spec error: unset environment variable", "[spec]") {
  ::unsetenv("TQ_TEST_SPEC_NOT_SET");
  auto f = fail_of("results_dir: /r\nquantize:\n  model_path: ${env:TQ_TEST_SPEC_NOT_SET}\n");
  CHECK_AT(f, 3, 15);
  CHECK_THAT(f.msg, Contains("quantize.model_path: environment variable 'TQ_TEST_SPEC_NOT_SET' "
                             "is not set"));
}

TEST_CASE("spec error: bad interpolation syntax", "[spec]") {
  auto f = fail_of("quantize:\n  model_path: ${envv:HOME}\n");
  CHECK_AT(f, 2, 15);
  CHECK_THAT(f.msg, Contains("unknown resolver 'envv'") && Contains("did you mean 'env'?"));
  f = fail_of("quantize:\n  model_path: ${results_dir\nresults_dir: x\n");
  CHECK_AT(f, 2, 15);
  CHECK_THAT(f.msg, Contains("unterminated interpolation"));
  f = fail_of("kw: {a: 1}\nquantize:\n  model_path: dir/${kw}\n");
  CHECK_AT(f, 3, 15);
  CHECK_THAT(f.msg, Contains("'${kw}' is a map and cannot be part of a string"));
}

// ---- overrides -----------------------------------------------------------

TEST_CASE("spec error: malformed overrides", "[spec]") {
  auto f = fail_of("quantize: {}\n", {"quantize.mode"});
  CHECK_OVERRIDE(f, "quantize.mode");
  CHECK_THAT(f.msg, Contains("expected KEY=VALUE"));
  f = fail_of("quantize: {}\n", {"=static_ptq"});
  CHECK_OVERRIDE(f, "=static_ptq");
  CHECK_THAT(f.msg, Contains("command-line override '=static_ptq': empty key"));
  f = fail_of("quantize: {}\n", {"quantize..mode=x"});
  CHECK_OVERRIDE(f, "quantize..mode=x");
  CHECK_THAT(f.msg, Contains("has an empty part"));
}

TEST_CASE("spec error: a bad value from an override", "[spec]") {
  auto f = fail_of("quantize:\n  mode: weight_only_ptq\n", {"quantize.mode=foo"});
  CHECK_OVERRIDE(f, "quantize.mode=foo");
  CHECK(f.msg ==
        "command-line override 'quantize.mode=foo': quantize.mode: 'foo' is not a valid "
        "mode (expected one of: weight_only_ptq, static_ptq, dynamic_ptq)");
  f = fail_of("", {"quantize.skip_names=[a, b"});
  CHECK_OVERRIDE(f, "quantize.skip_names=[a, b");
  CHECK_THAT(f.msg, Contains("quantize.skip_names: cannot parse the value '[a, b'"));
  f = fail_of("", {"quantize.qunatize_mode=static_ptq"});
  CHECK_OVERRIDE(f, "quantize.qunatize_mode=static_ptq");
  CHECK_THAT(f.msg, Contains("unknown key 'qunatize_mode'"));
}

TEST_CASE("spec error: override paths that cannot be set", "[spec]") {
  auto f = fail_of("quantize:\n  mode: static_ptq\n", {"quantize.mode.x=1"});
  CHECK_OVERRIDE(f, "quantize.mode.x=1");
  CHECK_THAT(f.msg, Contains("cannot set 'x' inside 'quantize.mode', which is 'static_ptq', not "
                             "a map"));
  f = fail_of("quantize:\n  layers: [{module_name: a}]\n", {"quantize.layers.5.module_name=b"});
  CHECK_OVERRIDE(f, "quantize.layers.5.module_name=b");
  CHECK_THAT(f.msg, Contains("'quantize.layers' is a list of 1 and '5' is not an index"));
}

TEST_CASE("spec error: an algorithm setting out of range says the range it allows",
          "[spec][algorithms]") {
  auto f = fail_of("quantize:\n  awq: {grid: 1}\n");
  CHECK_AT(f, 2, 15);
  CHECK_THAT(f.msg, Contains("quantize.awq.grid: expected an integer >= 2, found '1'"));
  // .inf is a number to YAML, but no damping is infinite: exit 2 at the key,
  // not exit 1 when GPTQ runs.
  for (const char* inf : {".inf", "+.inf", ".Inf"}) {
    f = fail_of(std::string("quantize:\n  weight_rounding: {method: gptq, damp: ") + inf + "}\n");
    CHECK_AT(f, 2, 41);
    CHECK_THAT(f.msg, Contains("quantize.weight_rounding.damp: expected a finite number > 0, "
                               "found '" +
                               std::string(inf) + "'"));
  }
  f = fail_of("quantize:\n  weight_rounding: {method: gptq, damp: -.inf}\n");
  CHECK_THAT(f.msg, Contains("damp: expected a number > 0, found '-.inf'"));
  f = fail_of("quantize:\n  tune: {time_budget_s: .inf}\n");
  CHECK_AT(f, 2, 25);
  CHECK_THAT(f.msg, Contains("quantize.tune.time_budget_s: expected a finite number > 0"));
}
