// HTML reports from JSON: the view-models, the rendered markup, and the page
// as headless Chromium renders it (skipped with a message without chromium).
#include <catch2/catch.hpp>

#include <filesystem>

#include "html_browser.h"
#include "taoquant/html_report.h"

using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

json layer(const std::string& name, json sqnr, bool kept, const std::string& reason) {
  json l{{"name", name},
         {"class", "Conv2d"},
         {"shape", {8, 1, 3, 3}},
         {"weight_format", kept ? "" : "int8/per_channel"},
         {"activation_format", kept ? "float" : "uint8/per_tensor"},
         {"weight_sqnr_db", sqnr},
         {"bytes_before", 288},
         {"bytes_after", kept ? 288 : 104},
         {"kept_float", kept},
         {"reason", reason},
         {"decided_by", "default_layer_dtype"}};
  if (!kept)
    l["activation"] = {
        {"observer", "minmax"},
        {"min", -1.5},
        {"max", 3.0},
        {"clip_min", -1.0},
        {"clip_max", 2.5},
        {"scale", 0.0137},
        {"zero_point", 73},
        {"histogram", {{"min", -1.5}, {"max", 3.0}, {"counts", {1, 0, 5, 40, 9, 2, 1, 1}}}}};
  return l;
}

json quantize_report() {
  return {{"schema_version", 1},
          {"command", "quantize"},
          {"tool", {{"name", "tao-quant"}, {"version", "0.1.0"}, {"libtorch", "1.13.0"}}},
          {"spec_file", "specs/demo/x.yaml"},
          {"backend",
           {{"requested", "torchao"},
            {"resolved", "libtorch"},
            {"meta", {{"steps", {{{"step", "fold BN"}, {"seconds", 0.25}}}}}}}},
          {"mode", "static_ptq"},
          {"model", {{"path", "models/fmnist/cnn.pt"}, {"bytes", 3355443}}},
          {"artifact", {{"path", "runs/x/quantized_model_torchao.pth"}, {"bytes", 868352}}},
          {"layers",
           {layer("features.conv1", 41.234, false, ""), layer("features.conv2", nullptr, false, ""),
            layer("classifier.fc", 12.0, true, "slower than float at batch 1")}},
          {"totals",
           {{"layers", 3},
            {"quantized_layers", 2},
            {"weight_bytes_before", 864},
            {"weight_bytes_after", 496},
            {"weight_ratio", 0.574},
            {"file_bytes_before", 3355443},
            {"file_bytes_after", 868352},
            {"file_ratio", 0.2588}}},
          {"timings", {{"load_s", 0.1}, {"calibrate_s", 1.25}, {"total_s", 2.5}}},
          {"notes", {"activations: int8 requested, the engine runs uint8"}},
          {"warnings", {"layer <b>fc</b> & co kept float"}}};
}

json evaluate_report() {
  auto model = [](double top1, double ms1, double ms32, int64_t size) {
    return json{{"path", "m.pt"},
                {"size_bytes", size},
                {"qengine", "onednn"},
                {"top1", top1},
                {"top5", 99.5},
                {"latency_ms", {{"1", {{"median", ms1}}}, {"32", {{"median", ms32}}}}}};
  };
  return {{"schema_version", 1},
          {"tool", {{"version", "0.1.0"}}},
          {"spec", "specs/demo/x.yaml"},
          {"data", {{"source", "models/fmnist/test.npz"}, {"num_samples", 10000}}},
          {"metrics",
           {{"top1_drop", 0.31},
            {"size_ratio", 0.26},
            {"cosine", 0.9991},
            {"speedup", {{"1", 1.52}, {"32", 2.1}}}}},
          {"threads", 2},
          {"gates",
           {{"passed", false},
            {"results",
             {{{"name", "max_top1_drop"},
               {"op", "<="},
               {"limit", 1.0},
               {"value", 0.31},
               {"passed", true}},
              {{"name", "min_speedup (batch 1)"},
               {"op", ">="},
               {"limit", 2.0},
               {"value", 1.52},
               {"passed", false}}}}}},
          {"notes", json::array()},
          {"float", model(91.62, 0.52, 9.8, 3355443)},
          {"quantized", model(91.31, 0.34, 4.6, 868352)}};
}

json batch_summary() {
  auto job = [](int i, const std::string& id, const std::string& status, json drop, json speed) {
    return json{{"id", id},
                {"index", i},
                {"spec", "s.yaml"},
                {"model", "models/" + id + ".pt"},
                {"backend", "libtorch"},
                {"mode", "static_ptq"},
                {"status", status},
                {"stage", "evaluate"},
                {"duration_s", 12.5},
                {"size_ratio", 0.26},
                {"fp32_top1", 91.6},
                {"quant_top1", 91.3},
                {"top1_drop", drop},
                {"speedup", speed},
                {"message", ""}};
  };
  return {{"schema_version", 1},
          {"command", "batch"},
          {"manifest", {{"path", "specs/zoo/manifest.yaml"}, {"name", "zoo"}, {"jobs", 3}}},
          {"shard", {{"index", 1}, {"count", 1}}},
          {"totals",
           {{"jobs", 3},
            {"passed", 2},
            {"failed", 1},
            {"gate_failures", 0},
            {"skipped", 0},
            {"resumed", 0}}},
          {"wall_s", 40.2},
          {"jobs",
           {job(1, "cnn_int8", "passed", 0.3, 2.1), job(2, "resnet18_int8", "passed", 0.8, 1.7),
            job(3, "vit_int8", "failed", nullptr, nullptr)}}};
}

}  // namespace

TEST_CASE("html quantize view-model: summary, rows, SQNR chart and histograms", "[html]") {
  const json v = tq::html_view_model(tq::HtmlReport::kQuantize, quantize_report());
  REQUIRE(v["layers"].size() == 3);
  CHECK(v["layers"][0]["sqnr"] == "41.2 dB");
  CHECK(v["layers"][1]["sqnr"] == "exact");
  CHECK(v["layers"][2]["weight_format"] == "float");
  CHECK(v["layers"][2]["reason"] == "slower than float at batch 1");
  CHECK(v["summary"][3]["v"] == "2 / 3");
  CHECK(v["summary"][5]["v"] == "3.2 MiB \u2192 848.0 KiB (0.259x)");
  const json& rows = v["sqnr_chart"]["rows"];
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["css"] == "q");
  CHECK(rows[2]["css"] == "float");
  CHECK(rows[2]["note"] == "kept float: slower than float at batch 1");
  CHECK(rows[0]["w"].get<double>() > 100.0);  // 41 dB of a 0..50 axis over 420 px
  REQUIRE(v["histograms"].size() == 2);
  const json& h = v["histograms"][0]["chart"];
  CHECK(h["bars"].size() == 7);  // 8 bins, one empty
  // clip [-1, 2.5] on [-1.5, 3] over x 6..254
  CHECK(h["clip_lo"].get<double>() == Approx(6 + 248 * 0.5 / 4.5).margin(0.1));
  CHECK(h["clip_hi"].get<double>() == Approx(6 + 248 * 4.0 / 4.5).margin(0.1));
  CHECK(v["histograms"][0]["clip"] == "[-1, 2.5]");
}

TEST_CASE("html quantize report: self-contained, escaped, every layer and chart", "[html]") {
  const std::string html = tq::render_html_report(tq::HtmlReport::kQuantize, quantize_report());
  CHECK_THAT(html, Contains("<!DOCTYPE html>"));
  for (const char* name : {"features.conv1", "features.conv2", "classifier.fc"})
    CHECK(tqtest::count(html, std::string(">") + name + "<") >= 2);  // table + chart label
  CHECK_THAT(html, Contains("layer &lt;b&gt;fc&lt;/b&gt; &amp; co kept float"));
  CHECK_THAT(html, Contains("int8 requested, the engine runs uint8"));
  CHECK(tqtest::count(html, "<svg") == 3);  // SQNR bars + 2 histograms
  CHECK(tqtest::count(html, "class=\"clip\"") == 4);
  CHECK(tqtest::count(html, "{{") == 0);
  CHECK(tqtest::external_references(html) == 0);
  CHECK(tqtest::count(html, "http") == 0);
}

namespace {

// A tune report's sections, as tune writes them (two layers, int4 and int8).
json with_tune(json r) {
  auto entry = [](double db4, double db8) {
    return json{{"int4", {{"sqnr_db", db4}, {"top1_agreement", 97.5}}},
                {"int8", {{"sqnr_db", db8}, {"top1_agreement", 100.0}}}};
  };
  const json sens{{"formats", {"int4", "int8"}},
                  {"data", "dataset.test_dataset npz test.npz, first 2000 samples"},
                  {"samples", 256},
                  {"forward_passes", 5},
                  {"float_top1", 90.0},
                  {"all_quantized", {{"sqnr_db", 20.5}, {"top1_agreement", 96.0}, {"top1", 88.5}}},
                  {"layers",
                   {{{"name", "features.conv2"},
                     {"kind", "Conv2d"},
                     {"weight_params", 4608},
                     {"rank", 1},
                     {"worst_sqnr_db", 12.25},
                     {"alone", entry(12.25, 40.0)},
                     {"reverse_rank", nullptr}},
                    {{"name", "features.conv1"},
                     {"kind", "Conv2d"},
                     {"weight_params", 72},
                     {"rank", 2},
                     {"worst_sqnr_db", 30.0},
                     {"alone", entry(30.0, 55.5)},
                     {"reverse_rank", nullptr}}}}};
  r["tune"] = {{"status", "failed"},
               {"failed_gate", "max_top1_drop 0.50: measured 0.80 pt"},
               {"settings", {{"search", "greedy"}}},
               {"data", "test data"},
               {"tuned_spec", "runs/x/tuned_spec.yaml"},
               {"quantize_runs", 2},
               {"simulated_forward_passes", 9},
               {"seconds", 6.25},
               {"budget_cut", "the time budget ended the real runs before the gates held"},
               {"result",
                {{"float_layers", 1},
                 {"effective_bits", 5.5},
                 {"sqnr_db", 25.0},
                 {"top1_agreement", 98.0},
                 {"top1", 89.2},
                 {"float_top1", 90.0}}},
               {"trace",
                {{{"step", 1},
                  {"kind", "simulate"},
                  {"change", "path step 0"},
                  {"sqnr_db", 20.5},
                  {"top1_agreement", 96.0},
                  {"effective_bits", 4.0},
                  {"float_layers", 0},
                  {"gates", "max_top1_drop 0.50: measured 1.50 pt"},
                  {"seconds", 0.3}},
                 {{"step", 2},
                  {"kind", "quantize"},
                  {"sqnr_db", 25.0},
                  {"top1_agreement", 98.0},
                  {"effective_bits", 5.5},
                  {"float_layers", 1},
                  {"gates", "pass"},
                  {"seconds", 0.9}}}},
               {"sensitivity", sens}};
  return r;
}

}  // namespace

TEST_CASE("html quantize view: the sensitivity table and the tune trace", "[html]") {
  const json v = tq::html_view_model(tq::HtmlReport::kQuantize, with_tune(quantize_report()));
  const json& s = v["sensitivity"];
  REQUIRE(s["has"] == true);
  CHECK(s["has_reverse"] == false);
  REQUIRE(s["rows"].size() == 2);
  CHECK(s["rows"][0]["name"] == "features.conv2");
  CHECK(s["rows"][0]["cells"].size() == 4);  // SQNR and agreement per format
  CHECK(s["rows"][0]["cells"][0]["text"] == "12.25");
  CHECK(s["rows"][0]["cells"][2]["text"] == "40.00");
  CHECK(s["all_quantized"] == "20.50 dB, top-1 agreement 96.00 %, top-1 88.50 % (float 90.00 %)");
  REQUIRE(s["chart"]["rows"].size() == 2);
  CHECK(s["chart"]["rows"][0]["w"].get<double>() < s["chart"]["rows"][1]["w"].get<double>());
  // What "all quantized" leaves out follows its figure.
  json with_note = with_tune(quantize_report());
  with_note["tune"]["sensitivity"]["all_quantized"]["note"] = "1 layer call outside the plan";
  CHECK(tq::html_view_model(tq::HtmlReport::kQuantize, with_note)["sensitivity"]["all_quantized"] ==
        "20.50 dB, top-1 agreement 96.00 %, top-1 88.50 % (float 90.00 %) (1 layer call outside "
        "the plan)");
  const json& t = v["tune"];
  REQUIRE(t["has"] == true);
  CHECK(t["result"][0]["v"] == "failed: max_top1_drop 0.50: measured 0.80 pt");
  CHECK(t["result"][5]["v"] == "89.20 % (float 90.00 %)");
  CHECK(t["result"].back()["v"] == "the time budget ended the real runs before the gates held");
  REQUIRE(t["trace"].size() == 2);
  CHECK(t["trace"][0]["pass"] == false);
  CHECK(t["trace"][1]["top1"] == "-");

  const std::string html =
      tq::render_html_report(tq::HtmlReport::kQuantize, with_tune(quantize_report()));
  CHECK_THAT(html, Contains("<th class=\"n\">int4 alone: SQNR dB</th>"));
  CHECK_THAT(html,
             Contains("<td class=\"n\" data-k=\"1\">1</td><td class=\"name\">features.conv2</td>"));
  CHECK_THAT(html, Contains("id=\"trace-table\""));
  CHECK(tqtest::count(html, "<svg") == 4);  // + the sensitivity bars
  CHECK(tqtest::count(html, "{{") == 0);
  // A plain quantize report has neither section.
  const std::string plain = tq::render_html_report(tq::HtmlReport::kQuantize, quantize_report());
  CHECK(plain.find("sensitivity-table") == std::string::npos);
  CHECK(plain.find("trace-table") == std::string::npos);
}

TEST_CASE("html evaluate and batch views", "[html]") {
  const json e = tq::html_view_model(tq::HtmlReport::kEvaluate, evaluate_report());
  CHECK(e["roles"] == json({"float", "quantized"}));
  CHECK(e["metrics"][0]["cells"] == json({"91.62", "91.31"}));
  CHECK(e["metrics"][0]["change"] == "drop 0.31 pp");
  CHECK(e["gates"][1]["status"] == "FAIL");
  CHECK_FALSE(e["gates_passed"].get<bool>());
  REQUIRE(e["latency_chart"]["groups"].size() == 2);
  CHECK(e["latency_chart"]["groups"][0]["label"] == "batch 1");
  CHECK(e["latency_chart"]["groups"][0]["sublabel"] == "1.52x faster");
  CHECK(e["latency_chart"]["groups"][1]["bars"].size() == 2);
  const json b = tq::html_view_model(tq::HtmlReport::kBatch, batch_summary());
  REQUIRE(b["jobs"].size() == 3);
  CHECK(b["jobs"][2]["status_css"] == "fail");
  REQUIRE(b["scatter_chart"]["points"].size() == 2);  // the failed job has no numbers
  CHECK(b["scatter_chart"]["points"][0]["label"] == "#1");
  const std::string html = tq::render_html_report(tq::HtmlReport::kEvaluate, evaluate_report());
  CHECK(tqtest::count(html, "badge fail") == 2);  // the gate and the header
  CHECK(tqtest::external_references(html) == 0);
}

TEST_CASE("html batch summary links the job reports that exist", "[html]") {
  const fs::path dir = fs::path(TQ_BINARY_DIR) / "test-html" / "unit-batch";
  fs::remove_all(dir);
  fs::create_directories(dir / "cnn_int8");
  std::ofstream(dir / "cnn_int8" / "quantize_report.html") << "<html></html>";
  const std::string path = tq::write_html_report(tq::HtmlReport::kBatch, batch_summary(),
                                                 (dir / "batch_summary.json").string());
  CHECK(path == (dir / "batch_summary.html").string());
  const std::string html = tqtest::read_text(path);
  CHECK(tqtest::count(html, "<a href=") == 1);
  CHECK(tqtest::count(html, "<g class=\"pt\">") == 2);  // the scatter's points
  CHECK_THAT(html, Contains("href=\"cnn_int8/quantize_report.html\""));
}

TEST_CASE("html reports in headless Chromium: DOM, no requests, a screenshot", "[html][browser]") {
  if (tqtest::chromium_path().empty()) {
    WARN("chromium not installed (scripts/setup.sh installs it): browser checks skipped");
    return;
  }
  const fs::path dir = fs::path(TQ_BINARY_DIR) / "test-html" / "browser";
  fs::remove_all(dir);
  const std::string q = tq::write_html_report(tq::HtmlReport::kQuantize, quantize_report(),
                                              (dir / "quantize_report.json").string());
  const auto run = tqtest::dump_dom(q, (dir / "chromium").string());
  CHECK_THAT(run.dom, Contains("<td class=\"name\">features.conv2</td>"));
  CHECK(tqtest::count(run.dom, "<svg") == 3);
  CHECK(tqtest::count(run.dom, "<rect class=\"hbar\"") == 14);
  CHECK(run.page_requests.empty());
  const std::string png = (dir / "quantize.png").string();
  tqtest::screenshot(q, png, 1200, 900, (dir / "chromium").string());
  REQUIRE(fs::exists(png));
  CHECK(fs::file_size(png) > 20000);  // a blank 1200x900 PNG is ~5 KB
}

TEST_CASE("html browser check: a page that fetches something is caught", "[html][browser]") {
  if (tqtest::chromium_path().empty()) {
    WARN("chromium not installed (scripts/setup.sh installs it): browser checks skipped");
    return;
  }
  const fs::path dir = fs::path(TQ_BINARY_DIR) / "test-html" / "fetching";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string page = (dir / "page.html").string();
  std::ofstream(page) << "<html><body><img src=\"https://example.invalid/x.png\"></body></html>";
  CHECK(tqtest::external_references(tqtest::read_text(page)) == 1);
  const auto run = tqtest::dump_dom(page, (dir / "chromium").string());
  CHECK_THAT(run.dom, Contains("example.invalid"));
  CHECK(run.page_requests.count("https://example.invalid/x.png") == 1);
}
