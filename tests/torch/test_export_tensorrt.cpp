// The TensorRT handoff: the `tensorrt` Q/DQ model checked against rules
// written from TensorRT's documentation (a reader of the ONNX file, not the
// exporter's bookkeeping), run in ONNX Runtime; the calibration cache and
// ranges.json read by parsers written from their formats, and the cache
// compared byte for byte with a Python reference computed from the report.
#include <torch/script.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "onnx_test_util.h"
#include "taoquant/pipeline.h"
#include "tensorrt_rules.h"
#include "test_data_util.h"

namespace {

namespace fs = std::filesystem;
const std::string kModels = TQ_MODELS_DIR;

std::string trt_spec(const std::string& model, const std::string& dir, const std::string& target,
                     const std::string& data, const std::string& extra = "") {
  return "results_dir: " + dir + "\nquantize:\n  backend: libtorch\n  mode: static_ptq\n" +
         "  algorithm: minmax\n  default_layer_dtype: int8\n  default_activation_dtype: int8\n" +
         "  model_path: " + model + "\n  sensitivity: false\n" +
         "  backend_kwargs: {latency_check: false}\n" +
         "  export: {formats: [onnx, onnx_qdq, tensorrt_cache, ranges_json], target: " + target +
         "}\n" + extra + "dataset:\n  quant_calibration_dataset:\n    data_file: " + data +
         "\n    batch_size: 32\n    max_batches: 4\n";
}

// The calibration cache, read as TensorRT's format says: a header
// TRT-<version>-<calibrator>, then `tensor: 8 hex digits` per line, the
// big-endian float32 bits of the scale (amax / 127).
std::map<std::string, float> read_cache(const std::string& path, std::string& header) {
  std::ifstream in(path);
  REQUIRE(std::getline(in, header));
  std::map<std::string, float> out;
  const std::regex line("^(.+): ([0-9a-f]{8})$");
  for (std::string s; std::getline(in, s);) {
    std::smatch m;
    INFO(s);
    REQUIRE(std::regex_match(s, m, line));
    const uint32_t bits = static_cast<uint32_t>(std::stoul(m[2], nullptr, 16));
    float v;
    std::memcpy(&v, &bits, 4);
    REQUIRE(out.emplace(m[1], v).second);
  }
  return out;
}

// The TensorRT form of one trained net: TensorRT's Q/DQ rules, ONNX
// Runtime's top-1 against float and the ort form, the calibration cache
// (names, amax, an independent writer's bytes) and ranges.json.
void check_tensorrt_net(const std::string& net) {
  if (!tq::test::ort_available()) FAIL("ONNX Runtime is not installed: run scripts/ort/install.sh");
  const auto [x, labels] = tq::test::fmnist_test_set();
  const std::string model = kModels + "/fmnist/" + net + ".pt";
  const std::string calib = kModels + "/fmnist/calib.npz";
  const std::string trt = tqtest_data::temp_dir(std::string("trt-") + net);
  const std::string ort = tqtest_data::temp_dir(std::string("trt-ort-") + net);
  const auto out =
      tq::run_quantize(tq::parse_spec_text(trt_spec(model, trt, "tensorrt", calib), "<t>"));
  (void)tq::run_quantize(tq::parse_spec_text(trt_spec(model, ort, "ort", calib), "<t>"));
  const std::string qdq = trt + "/quantized_model_libtorch.onnx";
  CHECK(tq::test::python_onnx_check(qdq).empty());
  const auto bad = tq::test::tensorrt_rule_violations(qdq);
  for (const auto& b : bad) UNSCOPED_INFO(b);
  CHECK(bad.empty());

  // ONNX Runtime runs it: within 0.3 pt of float and of the ort form.
  auto top1 = [&](const std::string& m) {
    const at::Tensor p = tq::test::ort_run(m, {x}, 1000).at(0).argmax(1);
    return 100.0 * (p == labels).sum().item<double>() / labels.size(0);
  };
  const double fl = top1(trt + "/model_float.onnx"), t = top1(qdq);
  const double o = top1(ort + "/quantized_model_libtorch.onnx");
  INFO(net << ": float " << fl << ", tensorrt form " << t << ", ort form " << o);
  CHECK(std::abs(fl - t) <= 0.3);
  CHECK(std::abs(o - t) <= 0.3);

  // The cache: every name a tensor of model_float.onnx, amax to float precision.
  std::string header;
  const auto cache = read_cache(trt + "/calibration.cache", header);
  CHECK(std::regex_match(header, std::regex("TRT-[0-9]+-MinMaxCalibration")));
  const auto names = tq::test::onnx_value_names(trt + "/model_float.onnx");
  const std::set<std::string> known(names.begin(), names.end());
  const auto& mapped = out.report.at("exports").at("files").at(0).at("facts").at("tensor_names");
  size_t activations = 0;
  for (const auto& t : out.report.at("quantization").at("tensors")) {
    if (t.at("role") != "activation" || !t.contains("scale")) continue;
    ++activations;
    const std::string name = mapped.at(t.at("name").get<std::string>());
    INFO(name);
    REQUIRE(cache.count(name));
    CHECK(known.count(name));
    CHECK(cache.at(name) * 127.0 == Approx(t.at("amax").get<double>()).epsilon(1e-6));
  }
  CHECK(activations > 0);
  CHECK(cache.size() <= activations);

  // ranges.json: the same numbers, and MQBench's TensorRT form.
  std::ifstream rin(trt + "/ranges.json");
  const auto ranges = nlohmann::json::parse(rin);
  for (const auto& [name, scale] : cache) {
    CHECK(ranges.at("tensorrt").at("blob_range").at(name).get<double>() / 127.0 ==
          Approx(scale).epsilon(1e-6));
    CHECK(ranges.at("activations").at(name).at("amax").get<double>() ==
          ranges.at("tensorrt").at("blob_range").at(name).get<double>());
  }

  // An independent reference of the cache's bytes, from the report.
  const auto r = tqtest_data::run_cmd(std::string(tqtest_data::kPython) + " " + TQ_SOURCE_DIR +
                                      "/tests/data/trt_cache_ref.py " + trt +
                                      "/quantize_report.json " + trt + "/cache_ref.txt");
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::ifstream a(trt + "/calibration.cache"), b(trt + "/cache_ref.txt");
  const std::string sa((std::istreambuf_iterator<char>(a)), {}),
      sb((std::istreambuf_iterator<char>(b)), {});
  CHECK(sa == sb);
}

}  // namespace

TEST_CASE("TensorRT handoff: rules, cache, ranges and ONNX Runtime on the trained CNN",
          "[export][tensorrt]") {
  check_tensorrt_net("cnn");
}

TEST_CASE("TensorRT handoff on the ResNet: residual inputs quantized, BatchNorm untouched",
          "[export][tensorrt][resnet]") {
  check_tensorrt_net("resnet");
}

TEST_CASE("TensorRT handoff on the MobileNetV2-style net: depthwise convs and ReLU6",
          "[export][tensorrt][mbv2]") {
  check_tensorrt_net("mbv2");
}

TEST_CASE(
    "TensorRT target: what TensorRT cannot take is refused at its key, before the model loads",
    "[export][tensorrt][spec]") {
  const std::string data = kModels + "/fmnist/calib.npz";
  const std::string dir = tqtest_data::temp_dir("trt-refuse");
  const std::pair<const char*, const char*> cases[] = {
      {"  layers:\n    - module_name: fc*\n      weights: {dtype: uint8}\n",
       "layers.0.weights.dtype"},
      {"  layers:\n    - module_name: '*'\n      weights: {dtype: int4}\n",
       "layers.0.weights.dtype"},
      {"  layers:\n    - module_name: '*'\n      weights: {granularity: per_group}\n",
       "layers.0.weights.granularity"},
      {"  layers:\n    - module_name: '*'\n      activations: {dtype: fp8_e4m3fn}\n",
       "layers.0.activations.dtype"},
  };
  for (const auto& [extra, key] : cases) {
    INFO(extra);
    const std::string text = trt_spec("/nonexistent/model.pt", dir, "tensorrt", data, extra);
    try {
      (void)tq::run_quantize(tq::parse_spec_text(text, "spec.yaml"));
      FAIL("accepted");
    } catch (const tq::SpecError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(key) != std::string::npos);
      CHECK(msg.find("spec.yaml:") != std::string::npos);
      CHECK(msg.find("TensorRT") != std::string::npos);
      CHECK(msg.find("model.pt") == std::string::npos);  // before the model loads
    }
  }
}
