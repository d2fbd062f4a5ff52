// The plugin loader and the CLI with plugins: listing, every refusal (ABI,
// duplicate, unresolved symbol, missing file, no stamp), throwing stages (exit
// 1, no partial artifact), specs that break declared constraints (exit 2).
#include <catch2/catch.hpp>

#include <torch/script.h>

#include <cmath>
#include <filesystem>

#include "plugin_test_util.h"
#include "taoquant/algorithms.h"
#include "taoquant/backend.h"
#include "taoquant/error.h"
#include "taoquant/gates.h"
#include "taoquant/observer.h"
#include "taoquant/plugin.h"
#include "taoquant/qparams.h"

using namespace tqtest;
namespace fs = std::filesystem;

namespace {

std::string canonical(const std::string& p) {
  return fs::canonical(p).string();
}

std::string models(const std::string& rel) {
  return std::string(TQ_MODELS_DIR) + "/" + rel;
}

// A spec for the Fashion-MNIST CNN; `quantize_extra` is YAML under quantize:.
std::string fmnist_spec(const TempDir& dir, const std::string& backend,
                        const std::string& quantize_extra, const std::string& top_extra = "") {
  return dir.write("spec.yaml", "results_dir: " + dir.str() + "/results\n" +
                                    "quantize:\n  backend: " + backend +
                                    "\n  model_path: " + models("fmnist/cnn.pt") +
                                    "\n  default_layer_dtype: int8\n" + quantize_extra + top_extra);
}

const nlohmann::json* find_backend(const nlohmann::json& j, const std::string& name) {
  for (const auto& b : j["backends"])
    if (b["name"] == name) return &b;
  return nullptr;
}

}  // namespace

TEST_CASE("backends --json lists a plugin with its capabilities, constraints and origin",
          "[plugins]") {
  const std::string good = test_plugin("good", "plugin_good");
  auto r = run_cmd(cli() + " --plugin " + quote(good) + " backends --json");
  REQUIRE(r.rc == 0);
  auto j = nlohmann::json::parse(r.out);
  const auto* b = find_backend(j, "plugin_good");
  REQUIRE(b != nullptr);
  CHECK((*b)["origin"] == canonical(good));
  CHECK((*b)["registered_at"].get<std::string>().find("plugin_good.cpp:") != std::string::npos);
  CHECK((*b)["modes"] == nlohmann::json::array({"weight_only_ptq"}));
  CHECK((*b)["weight_dtypes"] == nlohmann::json::array({"int8"}));
  CHECK((*b)["granularities"] == nlohmann::json::array({"per_tensor", "per_channel"}));
  CHECK((*b)["layer_kinds"] == nlohmann::json::array({"Linear", "Conv2d"}));
  const auto& c = (*b)["constraints"];
  CHECK(c["symmetric_only"] == true);
  CHECK(c["power_of_two_scale"] == true);
  CHECK(c["min_scale"].get<double>() == std::ldexp(1.0, -10));
  CHECK(c["quant_min"] == -127);
  CHECK(c["quant_max"] == 127);
  CHECK((*b)["aliases"][0]["name"] == "plugin_good_alias");
  const auto* fq = find_backend(j, "fakequant");
  REQUIRE(fq != nullptr);
  CHECK((*fq)["origin"] == "built-in");

  // The spec's vocabulary from its tables: the plugin's observer with its
  // help and origin, every algorithm, gate and enum value.
  bool observer = false;
  for (const auto& o : j["observers"])
    if (o["name"] == "plugin_good_absmax") {
      observer = true;
      CHECK(o["help"] == "test plugin: symmetric amax");
      CHECK(o["origin"] == canonical(good));
    }
  CHECK(observer);
  CHECK(j["algorithms"].size() == tq::algorithm_passes().size());
  CHECK(j["gates"].size() == tq::gate_table().size());
  CHECK(j["values"]["dtype"].size() == tq::dtype_table().entries.size());
  CHECK(j["values"]["rounding"][1]["name"] == "gptq");

  // The table shows the origin too, and the tables' help texts.
  auto t = run_cmd(cli() + " --plugin " + quote(good) + " backends");
  REQUIRE(t.rc == 0);
  CHECK(t.out.find(canonical(good)) != std::string::npos);
  CHECK(t.out.find("built-in") != std::string::npos);
  using Catch::Matchers::Contains;
  CHECK_THAT(t.out, Contains("test plugin: symmetric amax [" + canonical(good) + "]") &&
                        Contains("running min/max") && Contains("bias_correction") &&
                        Contains("effective_bits") && Contains("OCP FP8 E4M3FN") &&
                        Contains("one scale per group of group_size weights"));
}

TEST_CASE("TAO_QUANT_PLUGIN_PATH loads every plugin of the listed directories", "[plugins]") {
  const std::string dir = std::string(TQ_TEST_PLUGIN_DIR) + "/good";
  auto r = run_cmd("TAO_QUANT_PLUGIN_PATH=" + quote("/nonexistent-tq-dir:" + dir) + " " + cli() +
                   " backends --json");
  REQUIRE(r.rc == 0);
  // The warning about the missing directory goes to stderr, before the JSON.
  auto pos = r.out.find('{');
  REQUIRE(pos != std::string::npos);
  CHECK(r.out.substr(0, pos).find("/nonexistent-tq-dir") != std::string::npos);
  auto j = nlohmann::json::parse(r.out.substr(pos));
  const auto* b = find_backend(j, "plugin_good");
  REQUIRE(b != nullptr);
  CHECK((*b)["origin"] == canonical(test_plugin("good", "plugin_good")));

  // The same file through --plugin and the path is loaded once.
  auto twice = run_cmd("TAO_QUANT_PLUGIN_PATH=" + quote(dir) + " " + cli() + " --plugin " +
                       quote(test_plugin("good", "plugin_good")) + " backends");
  CHECK(twice.rc == 0);
}

TEST_CASE("plugin refusals: exit code 1 and a message naming the cause", "[plugins]") {
  struct Case {
    std::string plugin;
    std::vector<std::string> expect;
  };
  const std::string abi = std::to_string(TAOQUANT_PLUGIN_ABI_VERSION);
  TempDir tmp("plugins_refusals");
  const std::string text_file = tmp.write("libnot_elf.so", "this is not a shared library\n");
  std::vector<Case> cases = {
      {test_plugin("bad", "plugin_badabi"),
       {"libplugin_badabi.so' was built for tao-quant plugin ABI 99", "has plugin ABI " + abi,
        "rebuild"}},
      {test_plugin("bad", "plugin_dup"),
       {"backend name 'fakequant' is registered twice", "first by built-in",
        "again by plugin " + canonical(test_plugin("bad", "plugin_dup"))}},
      {test_plugin("bad", "plugin_unresolved"),
       {"cannot load plugin", "libplugin_unresolved.so",
        "undefined symbol: tq_test_symbol_nobody_defines"}},
      {test_plugin("bad", "plugin_nostamp"),
       {"has no tao-quant plugin stamp", "TAOQUANT_PLUGIN()"}},
      {tmp.str() + "/libmissing.so", {"plugin '" + tmp.str() + "/libmissing.so' does not exist"}},
      {text_file, {"is not a shared library"}},
      {tmp.str(), {"is a directory"}},
  };
  for (const auto& c : cases) {
    INFO(c.plugin);
    auto r = run_cmd(cli() + " --plugin " + quote(c.plugin) + " backends");
    INFO(r.out);
    CHECK(r.rc == 1);
    for (const auto& e : c.expect) CHECK(r.out.find(e) != std::string::npos);
  }
}

TEST_CASE("a refused plugin registers nothing, a good one registers backends and observers",
          "[plugins]") {
  auto& reg = tq::BackendRegistry::instance();
  // ABI mismatch: refused from the stamp, before any of its code runs.
  CHECK_THROWS_WITH(tq::load_plugin(test_plugin("bad", "plugin_badabi")),
                    Catch::Contains("plugin ABI 99"));
  CHECK(reg.find("plugin_badabi") == nullptr);
  // Duplicate: all or nothing, the plugin's first (valid) backend is dropped too.
  try {
    tq::load_plugin(test_plugin("bad", "plugin_dup"));
    FAIL("plugin_dup was accepted");
  } catch (const tq::Error& e) {
    CHECK(e.code() == tq::ExitCode::kRuntime);
    CHECK(std::string(e.what()).find("'fakequant' is registered twice") != std::string::npos);
  }
  CHECK(reg.find("plugin_dup_first") == nullptr);
  CHECK(reg.find("fakequant")->origin == "built-in");

  tq::load_plugin(test_plugin("good", "plugin_good"));
  const auto* b = reg.find("plugin_good_alias");
  REQUIRE(b != nullptr);
  CHECK(b->name == "plugin_good");
  CHECK(b->origin == canonical(test_plugin("good", "plugin_good")));
  CHECK(tq::ObserverRegistry::instance().find("plugin_good_absmax") != nullptr);
  const auto loaded = tq::loaded_plugins();
  CHECK(std::count(loaded.begin(), loaded.end(), canonical(test_plugin("good", "plugin_good"))) ==
        1);
  // Loading it again (also through a relative spelling) is a no-op, not a duplicate.
  CHECK_NOTHROW(tq::load_plugin(test_plugin("good", "plugin_good")));
  CHECK(tq::loaded_plugins().size() == loaded.size());

  // The plugin's observer works through the registry.
  tq::ObserverConfig cfg;
  cfg.dtype = tq::DType::kInt8;
  cfg.symmetric = true;
  auto obs = tq::ObserverRegistry::instance().create("plugin_good_absmax", cfg);
  obs->observe(torch::tensor({-3.0f, 1.0f, 2.5f}));
  auto q = obs->finalize();
  REQUIRE(q.scale.size() == 1);
  CHECK(q.scale[0] == Approx(3.0 / 127));
  auto c = tq::apply_constraints(q, b->caps.constraints);
  CHECK(c.scale[0] == 0.03125f);  // 2^-5 >= 3/127, and 2^-6 < 3/127
  CHECK(c.quant_min == -127);
}

TEST_CASE("a plugin quantizes with the core applying its declared constraints", "[plugins]") {
  TempDir tmp("plugins_good");
  auto spec =
      fmnist_spec(tmp, "plugin_good",
                  "  layers:\n    - module_name: '*'\n      weights: {granularity: per_channel}\n");
  auto r = run_cmd(cli() + " --plugin " + quote(test_plugin("good", "plugin_good")) +
                   " quantize -e " + quote(spec));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto rep = read_json(tmp.str() + "/results/quantize_report.json");
  CHECK(rep["backend"]["origin"] == canonical(test_plugin("good", "plugin_good")));
  size_t quantized = 0;
  for (const auto& l : rep["layers"]) {
    if (l["kept_float"].get<bool>()) continue;
    ++quantized;
    for (const char* k : {"scale_min", "scale_max"}) {
      const double s = l[k].get<double>();
      INFO(l["name"] << " " << k << " = " << s);
      CHECK(tq::is_power_of_two(s));
      CHECK(s >= std::ldexp(1.0, -10));
    }
  }
  CHECK(quantized == 4);
  CHECK(fs::exists(tmp.str() + "/results/quantized_model_plugin_good.pth"));
}

TEST_CASE("a plugin whose stage throws: exit 1, 'failed in <stage>', no artifact", "[plugins]") {
  const std::string plugin = test_plugin("bad", "plugin_throw");
  for (std::string stage : {"prepare", "calibrate", "quantize", "save_model"}) {
    DYNAMIC_SECTION(stage) {
      TempDir tmp("plugins_throw");
      std::string q = "  backend_kwargs: {fail_in: " + stage + "}\n";
      std::string extra;
      if (stage == "calibrate") {
        q += "  mode: static_ptq\n  default_activation_dtype: int8\n";
        extra =
            "dataset:\n  quant_calibration_dataset:\n    data_file: " + models("fmnist/calib.npz") +
            "\n    batch_size: 64\n    max_batches: 1\n";
      }
      auto spec = fmnist_spec(tmp, "plugin_throw", q, extra);
      auto r = run_cmd(cli() + " --plugin " + quote(plugin) + " quantize -e " + quote(spec));
      INFO(r.out);
      CHECK(r.rc == 1);
      CHECK(r.out.find("backend 'plugin_throw' failed in " + stage +
                       ": plugin_throw: deliberate failure in " + stage) != std::string::npos);
      CHECK(count_files(tmp.path() / "results") == 0);  // no artifact, no report, no temporary file
    }
  }
}

TEST_CASE("a run that fails, even while its artifact is being written, keeps the earlier pair",
          "[plugins]") {
  const std::string plugin = test_plugin("bad", "plugin_throw");
  TempDir tmp("plugins_stale");
  const auto results = tmp.path() / "results";
  auto ok = fmnist_spec(tmp, "plugin_throw", "  backend_kwargs: {fail_in: none}\n", "");
  auto r = run_cmd(cli() + " --plugin " + quote(plugin) + " quantize -e " + quote(ok));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  REQUIRE(fs::exists(results / "quantize_report.json"));
  REQUIRE(fs::exists(results / "quantize_report.html"));
  const auto artifact = results / "quantized_model_plugin_throw.pth";
  REQUIRE(fs::exists(artifact));
  const auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string art0 = slurp(artifact), rep0 = slurp(results / "quantize_report.json");
  // A failure before the save, or in it (this plugin writes half a file to
  // the path it is given, the artifact's temporary name, then throws), keeps
  // the earlier pair as it was, and leaves no temporary file.
  for (const char* stage : {"quantize", "save_model"}) {
    INFO(stage);
    r = run_cmd(cli() + " --plugin " + quote(plugin) + " quantize -e " + quote(ok) +
                " quantize.backend_kwargs.fail_in=" + stage);
    CHECK(r.rc == 1);
    CHECK(slurp(artifact) == art0);
    CHECK(slurp(results / "quantize_report.json") == rep0);
    CHECK(fs::exists(results / "quantize_report.html"));
    CHECK(fs::exists(results / "quantization_record.pt"));
    CHECK(count_files(results) == 4);
  }
}

TEST_CASE("a spec that breaks a plugin's declared constraints is refused with exit 2",
          "[plugins]") {
  const std::string plugin = test_plugin("good", "plugin_good");
  struct Case {
    std::string layers;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"{symmetric: false}", "symmetric quantization only"},
      {"{observer_or_fake_quant_kwargs: {quant_min: -128}}",
       "is below the lower bound of backend 'plugin_good'"},
      {"{observer_or_fake_quant_kwargs: {quant_max: 255}}", "(allowed: quant_max <= 127)"},
      {"{observer_or_fake_quant_kwargs: {pot_scale: false}}", "power-of-two scales only"},
      {"{granularity: per_group}", "does not support granularity 'per_group'"},
      {"{dtype: int4}", "does not support weight dtype 'int4'"},
  };
  for (const auto& c : cases) {
    INFO(c.layers);
    TempDir tmp("plugins_constraints");
    auto spec = fmnist_spec(tmp, "plugin_good",
                            "  layers:\n    - module_name: fc\n      weights: " + c.layers + "\n");
    auto r = run_cmd(cli() + " --plugin " + quote(plugin) + " quantize -e " + quote(spec));
    INFO(r.out);
    CHECK(r.rc == 2);
    CHECK(r.out.find(c.expect) != std::string::npos);
    CHECK(r.out.find("spec.yaml:") != std::string::npos);  // with the spec location
    CHECK(count_files(tmp.path() / "results") == 0);
  }
}
