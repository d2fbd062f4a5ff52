#include "algorithm_test_util.h"

#include <torch/script.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "taoquant/data.h"
#include "taoquant/spec.h"

namespace fs = std::filesystem;

namespace tq::test {

std::string alg_tmpdir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("tq_alg_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

const std::string& algorithm_refs_dir() {
  static const std::string d = [] {
    const std::string dir = alg_tmpdir("refs");
    const std::string cmd = "/usr/bin/python3 " + std::string(TQ_SOURCE_DIR) +
                            "/tests/data/make_algorithm_refs.py " + dir + "/refs.json";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return dir;
  }();
  return d;
}

const nlohmann::json& algorithm_refs() {
  static const nlohmann::json j = [] {
    std::ifstream f(algorithm_refs_dir() + "/refs.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

at::Tensor tensor_of(const nlohmann::json& j) {
  std::vector<int64_t> shape;
  const nlohmann::json* p = &j;
  while (p->is_array()) {
    shape.push_back(static_cast<int64_t>(p->size()));
    if (p->empty()) break;
    p = &(*p)[0];
  }
  std::vector<double> flat;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& n) {
    if (n.is_array())
      for (const auto& e : n) walk(e);
    else
      flat.push_back(n.get<double>());
  };
  walk(j);
  return torch::tensor(flat, torch::kDouble).reshape(shape);
}

namespace {

// Each test batch's argmax from every model, batch by batch.
template <class Fn>
void over_test_set(const std::vector<std::string>& paths, Fn fn) {
  std::vector<torch::jit::Module> models;
  for (const auto& p : paths) models.push_back(torch::jit::load(p));
  auto spec =
      parse_spec_text("dataset:\n  test_dataset:\n    data_file: " + std::string(TQ_MODELS_DIR) +
                          "/fmnist/test.npz\n    batch_size: 500\n",
                      "<test>");
  auto loader = make_data_loader(spec, *spec.dataset.test_dataset, "dataset.test_dataset", true);
  torch::NoGradGuard ng;
  Batch b;
  while (loader->next(b)) {
    std::vector<at::Tensor> argmax;
    for (auto& m : models) argmax.push_back(m.forward({b.inputs[0]}).toTensor().argmax(1));
    fn(argmax, b.labels);
  }
}

}  // namespace

double fmnist_top1(const std::string& path) {
  int64_t correct = 0, n = 0;
  over_test_set({path}, [&](const std::vector<at::Tensor>& a, const at::Tensor& labels) {
    correct += (a[0] == labels).sum().item<int64_t>();
    n += labels.size(0);
  });
  return 100.0 * double(correct) / double(n);
}

double fmnist_agreement(const std::string& float_model, const std::string& artifact) {
  int64_t same = 0, n = 0;
  over_test_set({float_model, artifact},
                [&](const std::vector<at::Tensor>& a, const at::Tensor& labels) {
                  same += (a[0] == a[1]).sum().item<int64_t>();
                  n += labels.size(0);
                });
  return 100.0 * double(same) / double(n);
}

bool PairedFlips::b_worse() const {
  return double(only_a - only_b) > 2.0 * std::sqrt(double(only_a + only_b));
}

PairedFlips fmnist_paired_flips(const std::string& a, const std::string& b) {
  PairedFlips f;
  over_test_set({a, b}, [&](const std::vector<at::Tensor>& p, const at::Tensor& labels) {
    const at::Tensor ra = p[0] == labels, rb = p[1] == labels;
    f.only_a += (ra & ~rb).sum().item<int64_t>();
    f.only_b += (rb & ~ra).sum().item<int64_t>();
  });
  return f;
}

QuantizeOutcome fmnist_int4(const std::string& model, const std::string& dir,
                            const std::string& extra) {
  const std::string data = std::string(TQ_MODELS_DIR) + "/fmnist/calib.npz";
  const std::string yaml = "results_dir: " + dir +
                           "\nquantize:\n  backend: libtorch\n  mode: weight_only_ptq\n"
                           "  default_layer_dtype: int4\n  model_path: " +
                           model +
                           "\n  layers:\n    - module_name: '*'\n"
                           "      weights: {dtype: int4, granularity: per_channel}\n" +
                           extra +
                           "dataset:\n  quant_calibration_dataset:\n    data_file: " + data +
                           "\n    batch_size: 64\n";
  return run_quantize(parse_spec_text(yaml, "<test>"));
}

LayerGeometry conv2d_geometry_of(const nlohmann::json& r) {
  LayerGeometry g;
  g.conv = true;
  g.spatial_dims = 2;
  g.kernel = r["kernel"].get<std::vector<int64_t>>();
  g.stride = r["stride"].get<std::vector<int64_t>>();
  g.padding = r["padding"].get<std::vector<int64_t>>();
  g.dilation = r["dilation"].get<std::vector<int64_t>>();
  g.groups = r["groups"];
  return g;
}

}  // namespace tq::test
