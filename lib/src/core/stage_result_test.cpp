// StageResult: the typed result of an algorithm stage, and what the report
// and the warnings are made from.
#include <catch2/catch.hpp>

#include "taoquant/report.h"
#include "taoquant/stage_result.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("StageResult: refusals warn per pass key, in declared order, naming the layers",
          "[stage_result]") {
  tq::StageResult r;
  r.declare({"gptq", "bias_correction"});
  CHECK(r.rejection_warnings().empty());  // declared keys with no layer warn nothing
  r.reject("bias_correction", "fc2");
  r.reject("gptq", "conv1");
  r.reject("bias_correction", "conv1");
  REQUIRE(r.rejection_warnings().size() == 2);
  CHECK_THAT(r.rejection_warnings()[0], StartsWith("gptq: the held-out batch says it made 1 "));
  CHECK_THAT(r.rejection_warnings()[1],
             Contains("made 2 layer(s) worse; not applied to fc2, conv1 (the report's "
                      "algorithms.bias_correction.rejected says why)"));
  CHECK(r.rejected_layers("gptq") == std::vector<std::string>{"conv1"});
  CHECK(r.rejected_layers("awq").empty());
  // An undeclared key goes after the declared ones.
  r.reject("awq", "proj");
  CHECK_THAT(r.rejection_warnings()[2], StartsWith("awq: "));
}

TEST_CASE("StageResult: more than 8 refused layers are counted, not listed", "[stage_result]") {
  tq::StageResult r;
  for (int i = 0; i < 11; ++i) r.reject("smoothquant", "l" + std::to_string(i));
  const auto w = r.rejection_warnings();
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Contains("l7, ... (11 in all)"));
  CHECK_THAT(w[0], !Contains("l8"));
}

TEST_CASE("StageResult: the report's entry is its counts and its seconds", "[stage_result]") {
  tq::StageResult r;
  r.counts = {{"pairs", 3}, {"sweeps", 7}};
  r.seconds = 0.25;
  r.layers["conv1"]["equalization"] = {{"next", "conv2"}};  // layer facts stay out of it
  CHECK(r.to_json() == nlohmann::json{{"pairs", 3}, {"sweeps", 7}, {"seconds", 0.25}});
}

TEST_CASE("tool_info names the tool and the LibTorch it was built with, without LibTorch",
          "[report]") {
  const auto t = tq::tool_info();
  CHECK(t["name"] == "tao-quant");
  CHECK(t["version"] == TQ_VERSION);
  // The build's LibTorch version (CMake's Torch_VERSION): a dotted number.
  const std::string v = t["libtorch"];
  CHECK_THAT(v, Catch::Matchers::Matches("[0-9]+\\.[0-9]+(\\.[0-9]+)?.*"));
}
