// Helpers for the data-loader and evaluate tests: temp folders, the Python
// fixtures (real numpy/torch files), specs from text, caught errors.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include "taoquant/json.h"

#include "taoquant/data.h"
#include "taoquant/error.h"
#include "taoquant/pipeline.h"
#include "taoquant/spec.h"

namespace tqtest_data {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

// A fresh, empty folder under the build tree.
inline std::string temp_dir(const std::string& tag) {
  static int counter = 0;
  fs::path p = fs::path(TQ_BINARY_DIR) / "test-tmp" /
               (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Runs a command; returns its exit status and stdout (stderr merged when asked).
struct Run {
  int status = -1;
  std::string out;
};
inline Run run_cmd(const std::string& cmd, bool merge_stderr = true) {
  Run r;
  std::string full = cmd + (merge_stderr ? " 2>&1" : "");
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The .npz/.npy/.pt fixtures written by tests/torch/test_data_fixtures.py
// (once per test process).
inline const std::string& fixtures() {
  static const std::string dir = [] {
    std::string d = temp_dir("data-fixtures");
    Run r = run_cmd(std::string(kPython) + " " + TQ_SOURCE_DIR +
                    "/tests/torch/test_data_fixtures.py " + d);
    if (r.status != 0)
      FAIL("test_data_fixtures.py failed (needs /usr/bin/python3 with numpy and torch):\n" + r.out);
    return d;
  }();
  return dir;
}
inline std::string fixture(const std::string& name) {
  return fixtures() + "/" + name;
}

inline std::string models(const std::string& rel) {
  return std::string(TQ_MODELS_DIR) + "/" + rel;
}

inline tq::Spec spec_of(const std::string& yaml) {
  return tq::parse_spec_text(yaml, "spec.yaml");
}

// A test_dataset section with the given body lines (each "key: value").
inline tq::Spec test_data_spec(const std::string& body) {
  std::string text = "dataset:\n  test_dataset:\n";
  size_t pos = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    std::string line = body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!line.empty()) text += "    " + line + "\n";
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return spec_of(text);
}

inline std::unique_ptr<tq::DataLoader> loader_of(const std::string& body, bool want_labels = true) {
  tq::Spec s = test_data_spec(body);
  return tq::make_data_loader(s, *s.dataset.test_dataset, "dataset.test_dataset", want_labels);
}

// The first `n` images of the Fashion-MNIST test set.
inline at::Tensor fmnist_test_batch(int64_t n) {
  auto data =
      loader_of("data_file: " + models("fmnist/test.npz") + "\nbatch_size: " + std::to_string(n),
                /*want_labels=*/false);
  tq::Batch b;
  REQUIRE(data->next(b));
  return b.inputs.at(0);
}

// The SQNR of `got` against `ref` in dB, from its definition.
inline double sqnr_db(const at::Tensor& ref, const at::Tensor& got) {
  const at::Tensor r = ref.to(at::kDouble), g = got.to(at::kDouble);
  return 10.0 * std::log10(r.pow(2).sum().item<double>() / (r - g).pow(2).sum().item<double>());
}

struct Caught {
  bool thrown = false;
  tq::ExitCode code = tq::ExitCode::kOk;
  std::string msg;
};
template <class F>
Caught catch_error(F&& f) {
  Caught c;
  try {
    f();
  } catch (const tq::Error& e) {
    c = {true, e.code(), e.what()};
  }
  return c;
}

inline void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The Fashion-MNIST spec evaluate tests use: the CNN, the 10k test set, the
// libtorch backend with weight-only `dtype` (int8, fp8_e4m3fn, ...).
inline std::string fmnist_spec_text(const std::string& results_dir,
                                    const std::string& dtype = "int8",
                                    const std::string& data = models("fmnist/test.npz")) {
  return "results_dir: " + results_dir +
         "\nquantize:\n  backend: libtorch\n  mode: weight_only_ptq\n  default_layer_dtype: " +
         dtype + "\n  model_path: " + models("fmnist/cnn.pt") +
         "\ndataset:\n  test_dataset:\n    data_file: " + data + "\nevaluate:\n  batch_size: 500\n";
}

// A quantized CNN artifact per dtype, made once per test process with
// tq::run_quantize; returns its results_dir.
inline const std::string& quantized_results(const std::string& dtype) {
  static std::map<std::string, std::string> made;
  auto it = made.find(dtype);
  if (it != made.end()) return it->second;
  std::string dir = temp_dir("artifact-" + dtype);
  tq::Spec spec = tq::parse_spec_text(fmnist_spec_text(dir, dtype), "spec.yaml");
  tq::run_quantize(spec);
  return made.emplace(dtype, dir).first->second;
}

// Top-1 of a TorchScript file in plain PyTorch (scripts/eval_torch.py), same
// batch size and thread count as the tests use.
inline int64_t pytorch_correct(const std::string& model, const std::string& data) {
  Run r = run_cmd(std::string(kPython) + " " + TQ_SOURCE_DIR + "/scripts/eval_torch.py " + model +
                      " " + data + " --json --batch 500 --threads 2",
                  false);
  if (r.status != 0) FAIL("eval_torch.py failed: " + r.out);
  return nlohmann::json::parse(r.out).at("correct").get<int64_t>();
}

}  // namespace tqtest_data
