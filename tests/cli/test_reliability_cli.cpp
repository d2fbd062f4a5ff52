// Hostile input through the tao-quant binary on the trained Fashion-MNIST
// CNN (issue 30): what the artifact's bytes depend on, files that are not
// regular files, a results_dir that is a file, TQ_NUM_THREADS, a 10 MB spec
// value, damaged and replaced results, data that does not fit with GPTQ,
// a float constant the code printer spells as an int, and a time budget too
// small to search.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <functional>
#include <tuple>
#include <vector>

#include "../torch/plugin_test_util.h"

using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModels = TQ_MODELS_DIR;

// A spec for the CNN: `quantize` lines (indented by two) after the model,
// calibration and test data.
std::string cnn_spec(const tqtest::TempDir& dir, const std::string& quantize_lines,
                     const std::string& calib = kModels + "/fmnist/calib.npz") {
  return dir.write("spec.yaml",
                   "results_dir: " + (dir.path() / "out").string() +
                       "\nquantize:\n  backend: libtorch\n  sensitivity: false\n  model_path: " +
                       kModels + "/fmnist/cnn.pt\n" + quantize_lines +
                       "dataset:\n  quant_calibration_dataset:\n    data_file: " + calib +
                       "\n    batch_size: 32\n    max_batches: 2\n"
                       "  test_dataset:\n    data_file: " +
                       kModels + "/fmnist/test.npz\n    batch_size: 200\n");
}

const std::string kWeightOnly = "  mode: weight_only_ptq\n  default_layer_dtype: int8\n";

// The command's output and exit code; `timeout` turns a hang into a failure
// (a guard far above what the command needs, not a time assertion).
tqtest::CmdResult tao(const std::string& args, const std::string& env = "") {
  return tqtest::run_cmd("env " + env + " timeout 600 " + tqtest::cli() + " -q --no-html " + args);
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Writes an .npz with python3/numpy: `x` is the expression of the array.
std::string npz(const tqtest::TempDir& dir, const std::string& name, const std::string& x) {
  const std::string path = (dir.path() / name).string();
  const auto r =
      tqtest::run_cmd("/usr/bin/python3 -c " + tqtest::quote("import numpy as np; x = " + x +
                                                             "; np.savez('" + path + "', x=x)"));
  REQUIRE(r.rc == 0);
  return path;
}

}  // namespace

TEST_CASE("reliability: the same spec into two folders gives the same artifact bytes",
          "[cli][bytes]") {
  tqtest::TempDir dir("bytes");
  // evaluate.checkpoint names a file in results_dir, as TAO specs often do.
  const std::string spec = cnn_spec(dir, kWeightOnly);
  std::ofstream(spec, std::ios::app)
      << "evaluate:\n  checkpoint: ${results_dir}/quantized_model_libtorch.pth\n";
  for (const std::string mode : {"weight_only_ptq", "dynamic_ptq"}) {
    INFO(mode);
    const fs::path a = dir.path() / (mode + "_a"), b = dir.path() / ("other_" + mode);
    for (const auto& out : {a, b}) {
      const auto r = tao("quantize -e " + tqtest::quote(spec) + " quantize.mode=" + mode +
                         " results_dir=" + tqtest::quote(out.string()));
      INFO(r.out);
      REQUIRE(r.rc == 0);
    }
    CHECK(bytes_of(a / "quantized_model_libtorch.pth") ==
          bytes_of(b / "quantized_model_libtorch.pth"));
    // The path is in the report.
    const json rep = tqtest::read_json((b / "quantize_report.json").string());
    CHECK(rep["spec"]["results_dir"] == b.string());
  }
}

TEST_CASE("reliability: TQ_NUM_THREADS that is not a thread count exits 2", "[cli][threads]") {
  for (const std::string v : {"abc", "0", "-4", "4x", "99999", "99999999999999999999"}) {
    INFO(v);
    const auto r = tao("backends", "TQ_NUM_THREADS=" + tqtest::quote(v));
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Contains("TQ_NUM_THREADS='" + v +
                               "' is not a thread count: expected an integer from 1 to 4096"));
  }
  CHECK(tao("backends", "TQ_NUM_THREADS=2").rc == 0);
  CHECK(tao("backends", "TQ_NUM_THREADS=").rc == 0);  // empty: unset
}

TEST_CASE("reliability: TQ_NUM_THREADS decides the thread count over an inherited OMP_NUM_THREADS",
          "[cli][threads]") {
  // The launcher passes TQ_NUM_THREADS on as OMP_NUM_THREADS (so that the
  // tool need not call at::set_num_threads); a different OMP_NUM_THREADS
  // left in the environment must not win. evaluate reports LibTorch's count.
  tqtest::TempDir dir("threads-env");
  const std::string spec = cnn_spec(dir, "");
  const std::string report = (dir.path() / "out" / "evaluate_report.json").string();
  for (const auto& [env, threads] :
       std::vector<std::pair<std::string, int>>{{"OMP_NUM_THREADS=2 TQ_NUM_THREADS=1", 1},
                                                {"OMP_NUM_THREADS=1 TQ_NUM_THREADS=3", 3},
                                                {"OMP_NUM_THREADS=3 TQ_NUM_THREADS=", 3}}) {
    INFO(env);
    const auto r = tao("evaluate -e " + tqtest::quote(spec), env);
    REQUIRE(r.rc == 0);
    CHECK(tqtest::read_json(report).at("threads") == threads);
  }
}

TEST_CASE("reliability: a results_dir that is a file exits 2 before the model loads",
          "[cli][results_dir]") {
  tqtest::TempDir dir("resdir");
  const std::string spec = cnn_spec(dir, kWeightOnly);
  const std::string file = dir.write("a_file", "x");
  for (const std::string& out : {file, file + "/sub/dir"}) {
    INFO(out);
    // A model that does not exist: the results_dir check comes first.
    const auto r = tao("quantize -e " + tqtest::quote(spec) + " results_dir=" + tqtest::quote(out) +
                       " quantize.model_path=/nonexistent/model.pt");
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Contains("results_dir: '" + out + "' cannot be a folder: ") &&
                          Contains(out == file ? "it is a file" : "'" + file + "' is a file") &&
                          !Contains("nonexistent"));
  }
}

TEST_CASE("reliability: a FIFO or a device as model, data or cache is refused, not read",
          "[cli][files]") {
  tqtest::TempDir dir("fifo");
  const std::string spec = cnn_spec(dir, "  mode: static_ptq\n  default_layer_dtype: int8\n");
  const std::string fifo = (dir.path() / "pipe.pt").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // nobody writes it: a read would wait forever
  fs::create_directories(dir.path() / "imgs" / "0_a");
  REQUIRE(::mkfifo((dir.path() / "imgs" / "0_a" / "x.png").c_str(), 0600) == 0);
  const std::string images = "dataset.quant_calibration_dataset=" +
                             tqtest::quote("{images_dir: " + (dir.path() / "imgs").string() +
                                           ", batch_size: 8, preprocess: {color: gray}}");
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"quantize.model_path=" + fifo, 1,
       "model file '" + fifo + "' is a FIFO (named pipe), not a regular file"},
      {"quantize.model_path=/dev/zero", 1, "'/dev/zero' is a character device"},
      {"dataset.quant_calibration_dataset.data_file=" + fifo, 1,
       "data file '" + fifo + "' is a FIFO (named pipe), not a regular file"},
      {images, 1, "x.png' is a FIFO (named pipe), not a regular file"},
      {"quantize.timing_cache=" + fifo, 2,
       "timing cache '" + fifo + "' is a FIFO (named pipe), not a regular file"},
      {"quantize.timing_cache=/dev/zero", 2,
       "timing cache '/dev/zero' is a character device, not a regular file"},
  };
  for (const auto& [override, rc, expected] : cases) {
    INFO(override);
    const auto r = tao("quantize -e " + tqtest::quote(spec) + " " + override);
    INFO(r.out);
    CHECK(r.rc == rc);
    CHECK_THAT(r.out, Contains(expected));
  }
}

TEST_CASE("reliability: a 10 MB spec value is echoed cut to 80 characters, with its length",
          "[cli][messages]") {
  tqtest::TempDir dir("huge");
  const std::string spec = cnn_spec(dir, kWeightOnly);
  const std::string huge = dir.write(
      "huge.yaml", "quantize:\n  backend: " + std::string(10000000, 'b') + "\n  model_path: x\n");
  auto r = tao("inspect -e " + tqtest::quote(huge));
  CHECK(r.rc == 2);
  CHECK(r.out.size() < 2000);
  CHECK_THAT(r.out, Contains("quantize.backend: unknown backend '" + std::string(80, 'b') +
                             "\u2026' (10,000,000 characters)"));
  // A long override (a command line holds at most 128 KiB per argument).
  r = tao("inspect -e " + tqtest::quote(spec) + " quantize.backend=" + std::string(100000, 'c'));
  CHECK(r.rc == 2);
  CHECK(r.out.size() < 2000);
  CHECK_THAT(r.out, Contains("(100,017 characters)") && Contains("(100,000 characters)"));
}

TEST_CASE("reliability: damaged, missing and replaced reports are refused, naming what is wrong",
          "[cli][atomic]") {
  tqtest::TempDir dir("reports");
  const std::string spec = cnn_spec(dir, kWeightOnly);
  const fs::path out = dir.path() / "out", report = out / "quantize_report.json";
  const std::string evaluate = "evaluate -e " + tqtest::quote(spec) + " --is-quantized";
  auto r = tao("quantize -e " + tqtest::quote(spec));
  REQUIRE(r.rc == 0);
  REQUIRE(tao(evaluate).rc == 0);
  const std::string good = bytes_of(report);
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = json::parse(good);
    edit(j);
    std::ofstream(report) << j.dump();
  };
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { with([](json& j) { j["artifact"]["xxh64"] = 123; }); },
       "artifact.xxh64: expected 16 hex digits, found '123'"},
      {[&] { with([](json& j) { j.erase("artifact"); }); },
       "records no artifact (expected artifact: {file, bytes, xxh64})"},
      {[&] { with([](json& j) { j["artifact"]["bytes"] = "many"; }); },
       "artifact.bytes: expected a size in bytes, found '\"many\"'"},
      {[&] {
         fs::remove(report);
         fs::create_directory(report);
       },
       "the report '" + report.string() + "' is a folder, not a file"},
  };
  for (const auto& [damage, expected] : cases) {
    INFO(expected);
    damage();
    r = tao(evaluate);
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Contains(expected) && !Contains("json.exception"));
    fs::remove_all(report);
    std::ofstream(report) << good;
  }
  // Another backend into the same folder: quantize says what it replaces,
  // evaluate of the first result says which result is there instead.
  r = tao("quantize -e " + tqtest::quote(spec) + " quantize.backend=fakequant");
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("holds another backend's result ('quantized_model_libtorch.pth' and "
                             "its report); this run (backend 'fakequant') writes "
                             "'quantized_model_fakequant.pth' and replaces that report"));
  r = tao(evaluate);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, Contains("no result: '" + (out / "quantized_model_libtorch.pth").string() +
                             "' has no report; '" + report.string() +
                             "' is the report of 'quantized_model_fakequant.pth' (backend "
                             "'fakequant'), a later quantize into the same results_dir with "
                             "another backend") &&
                        !Contains("interrupted"));
  CHECK(tao(evaluate + " quantize.backend=fakequant").rc == 0);
}

TEST_CASE("reliability: data that does not fit the model with GPTQ names the model's error",
          "[cli][data]") {
  tqtest::TempDir dir("gptq_shape");
  const std::string calib = npz(dir, "rgb.npz", "np.zeros((8, 3, 32, 32), np.float32)");
  for (const std::string algorithm :
       {"  weight_rounding: gptq\n", "  bias_correction: true\n", "  awq: true\n"}) {
    INFO(algorithm);
    const std::string spec =
        cnn_spec(dir, "  mode: weight_only_ptq\n  default_layer_dtype: int4\n" + algorithm, calib);
    const auto r = tao("quantize -e " + tqtest::quote(spec));
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out,
               Contains("the model's forward failed on the calibration data (shape "
                        "[1,3,32,32]): RuntimeError: Given groups=1") &&
                   Contains("hint: the data's shape does not fit the model's input: its "
                            "first layer 'features.conv1' Conv2d expects 1 input channels") &&
                   !Contains("Traceback") && !Contains("failed in"));
  }
}

TEST_CASE("reliability: a float scale of 1e10 or more survives the saved TorchScript code",
          "[cli][jit]") {
  // One pixel of 1e13 in the calibration data: the input's int8 scale is
  // about 4e10, a whole number as every float32 above 2^24 is.
  tqtest::TempDir dir("big_scale");
  const std::string calib =
      npz(dir, "outlier.npz",
          "np.load('" + kModels + "/fmnist/calib.npz')['x'][:64].copy(); x[0, 0, 5, 5] = 1e13");
  const std::string spec =
      cnn_spec(dir,
               "  mode: static_ptq\n  default_layer_dtype: int8\n  default_activation_dtype: "
               "int8\n",
               calib);
  for (const std::string backend : {"libtorch", "fakequant"}) {
    INFO(backend);
    const auto r = tao("quantize -e " + tqtest::quote(spec) + " quantize.backend=" + backend);
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK_THAT(r.out, !Contains("Expected a value of type"));
    CHECK(fs::exists(dir.path() / "out" / ("quantized_model_" + backend + ".pth")));
  }
}

TEST_CASE("reliability: a time budget too small to search warns and says so in the report",
          "[cli][tune]") {
  tqtest::TempDir dir("budget");
  const std::string spec =
      cnn_spec(dir, kWeightOnly +
                        "  tune: {formats: [int4, int8, native], max_top1_drop: 5, "
                        "time_budget_s: 0.001}\n");
  const auto r =
      tqtest::run_cmd("timeout 600 " + tqtest::cli() + " --no-html tune -e " + tqtest::quote(spec));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("warning: tune: the time budget"));
  const json rep = tqtest::read_json((dir.path() / "out" / "quantize_report.json").string());
  REQUIRE(rep["tune"]["budget_cut"].is_string());
  CHECK_THAT(rep["tune"]["budget_cut"].get<std::string>(), Contains("time budget"));
}
