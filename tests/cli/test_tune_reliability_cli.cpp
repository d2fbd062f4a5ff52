// Issue 30, items 2, 3, 4 and 13, through the tao-quant binary: a gate the
// mode cannot measure is refused at its key; layer names with wildcard
// characters get rules that name exactly their layer; labels out of range
// stop with the file, the sample and the range; tune selects on the
// validation data and reports the test set beside it.
#include <catch2/catch.hpp>

#include "reliability_util.h"

using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("tune: a gate the mode cannot measure exits 2 at its key", "[cli][tune][reliability]") {
  tqtest::TempDir dir("tune_unmeasurable");
  const std::string cnn = tqtest::fmnist() + "/cnn.pt";
  // (mode and backend, what the spec sets)
  const std::pair<std::string, std::string> cases[] = {
      {"  mode: weight_only_ptq\n", ""},
      {"  mode: dynamic_ptq\n", ""},
      {"  mode: static_ptq\n", "quantize.backend=fakequant"}};
  for (const auto& [mode, overrides] : cases) {
    INFO(mode << overrides);
    const std::string spec = tqtest::fmnist_spec(
        dir, cnn, mode + "  tune: {formats: [int8, native], min_sqnr_db: 20, min_speedup: 100}\n");
    const auto r = tqtest::tao("tune -e " + tqtest::quote(spec) + " " + overrides);
    INFO(r.out);
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Contains("spec.yaml:"));
    CHECK_THAT(r.out, Contains("quantize.tune.min_speedup"));
    CHECK_FALSE(fs::exists(dir.path() / "out" / "quantize_report.json"));
  }
}

TEST_CASE("tune: layer names with wildcard characters get rules that select exactly their layer",
          "[cli][tune][reliability]") {
  tqtest::TempDir dir("tune_odd_names");
  const fs::path out = dir.path() / "out";
  const std::string spec = tqtest::fmnist_spec(
      dir, tqtest::crafted("odd_names.pt"),
      "  mode: weight_only_ptq\n  tune: {formats: [int4, int8], min_sqnr_db: 18}\n");
  auto r = tqtest::tao("tune -e " + tqtest::quote(spec));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const json rep = tqtest::read_json((out / "quantize_report.json").string());
  const json& formats = rep["tune"]["result"]["formats"];
  REQUIRE(formats.size() == 3);
  // The search keeps seq.l* (whose int4 rounding loses most of its weights)
  // at int8 and the others at int4: names that, as patterns, select more
  // than their layer must not spread seq.l*'s format.
  CHECK(formats["seq.l*"] == "int8");
  CHECK(formats["seq.l1"] == "int4");
  CHECK(formats["seq.l[1]"] == "int4");
  for (const auto& l : rep["layers"]) {
    const std::string name = l["name"];
    INFO(name);
    CHECK(l["weight_format"].get<std::string>().rfind(formats[name].get<std::string>() + "/", 0) ==
          0);
  }
  const std::string tuned = tqtest::file_bytes(out / "tuned_spec.yaml");
  CHECK_THAT(tuned, Contains("module_name: \"=seq.l*\""));
  CHECK_THAT(tuned, Contains("module_name: \"=seq.l[1]\""));
  const fs::path art = out / "quantized_model_libtorch.pth";
  const std::string bytes = tqtest::file_bytes(art);
  r = tqtest::tao("quantize -e " + tqtest::quote((out / "tuned_spec.yaml").string()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(tqtest::file_bytes(art) == bytes);
}

TEST_CASE("labels out of range: exit 1 naming the file, the sample and the range",
          "[cli][tune][reliability]") {
  tqtest::TempDir dir("labels");
  const std::string cnn = tqtest::fmnist() + "/cnn.pt";
  const std::string wo = "  mode: weight_only_ptq\n  sensitivity: false\n";
  const std::string spec =
      tqtest::fmnist_spec(dir, cnn, wo + "  tune: {formats: [int8, native], max_top1_drop: 0.5}\n");
  REQUIRE(tqtest::tao("quantize -e " + tqtest::quote(spec) + " --no-html").rc == 0);
  // (command, the bad file, its bad label and where)
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {"tune", "test_label10.npz", "label 10 at sample 7"},
      {"tune", "test_label_neg.npz", "label -1 at sample 123"},
      {"inspect --sensitivity", "test_label10.npz", "label 10 at sample 7"},
      {"evaluate --is-quantized --no-html", "test_label_neg.npz", "label -1 at sample 123"}};
  for (const auto& [cmd, file, says] : cases) {
    INFO(cmd << " " << file);
    const std::string data = tqtest::crafted(file);
    const auto r = tqtest::tao(cmd + " -e " + tqtest::quote(spec) +
                               " dataset.test_dataset.data_file=" + tqtest::quote(data));
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Contains(data));
    CHECK_THAT(r.out, Contains(says));
    CHECK_THAT(r.out, Contains("0..9"));
  }
}

TEST_CASE("tune: validation data selects, the test set reports, side by side",
          "[cli][tune][reliability]") {
  tqtest::TempDir dir("tune_validation");
  const fs::path out = dir.path() / "out";
  const std::string val = tqtest::crafted("val.npz"), head = tqtest::crafted("test_head.npz");
  const std::string spec = tqtest::fmnist_spec(
      dir, tqtest::fmnist() + "/cnn.pt",
      "  mode: weight_only_ptq\n  tune: {formats: [int4, int8, native], max_top1_drop: 0.5}\n",
      tqtest::fmnist() + "/calib.npz",
      "  validation_dataset:\n    data_file: " + val + "\n    batch_size: 500\n");
  const std::string test_override = " dataset.test_dataset.data_file=" + tqtest::quote(head);
  auto r = tqtest::tao("tune -e " + tqtest::quote(spec) + test_override);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, !Contains("test set"));
  json t = tqtest::read_json((out / "quantize_report.json").string())["tune"];
  CHECK_THAT(t["data"].get<std::string>(), Contains("dataset.validation_dataset"));
  CHECK_THAT(t["selection"]["data"].get<std::string>(), Contains(val));
  CHECK_THAT(t["test"]["data"].get<std::string>(), Contains(head));
  for (const char* side : {"selection", "test"})
    for (const char* k : {"float_top1", "top1", "top1_drop", "sqnr_db", "top1_agreement"}) {
      INFO(side << "." << k);
      CHECK(t[side][k].is_number());
    }
  CHECK(t["test"]["samples"] == 2000);
  CHECK(t["selection"]["top1"] == t["result"]["top1"]);

  // Without validation data, tune selects on the test set, and says so.
  r = tqtest::tao("tune -e " + tqtest::quote(spec) + test_override + " quantize.tune.data=test");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("selects on the test set"));
  t = tqtest::read_json((out / "quantize_report.json").string())["tune"];
  CHECK_FALSE(t.contains("test"));
  const json warnings = tqtest::read_json((out / "quantize_report.json").string())["warnings"];
  CHECK_THAT(warnings.dump(), Contains("selects on the test set"));
  // Validation data that is the test file is the test set.
  r = tqtest::tao("tune -e " + tqtest::quote(spec) + test_override +
                  " dataset.validation_dataset.data_file=" + tqtest::quote(head));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("selects on the test set"));
  // data: validation needs the section.
  tqtest::TempDir bare("tune_validation_none");
  const std::string none = tqtest::fmnist_spec(
      bare, tqtest::fmnist() + "/cnn.pt",
      "  mode: weight_only_ptq\n  tune: {formats: [int8, native], max_top1_drop: 0.5, "
      "data: validation}\n");
  r = tqtest::tao("tune -e " + tqtest::quote(none));
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, Contains("dataset.validation_dataset"));
}
