// ctest runs each Catch2 test case by name (catch_discover_tests), and cuts a
// name at ';': a case named "a; b" became two ctest entries that matched no
// test case and passed without running anything. No name may hold one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

TEST_CASE("no test case name holds a semicolon (ctest would run nothing under it)", "[meta]") {
  const std::regex name(R"(TEST_CASE\(\s*"((?:[^"\\]|\\.)*)\")");
  size_t cases = 0;
  for (const char* sub : {"tests", "lib/src"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(TQ_SOURCE_DIR) / sub)) {
      if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
      std::ifstream in(e.path());
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
        ++cases;
        INFO(e.path().string() + ": " + (*it)[1].str());
        CHECK((*it)[1].str().find(';') == std::string::npos);
      }
    }
  }
  CHECK(cases > 200);
}

// tests/CMakeLists.txt registers a test case that carries a model group's tag
// ([mbv2], [resnet], [effnet], [vit], [zoo]) with that group's fixture, the others
// with the base one ("models": the data and the CNN). A test case that reads
// a group's net without its tag could run before that net is trained; one
// with two tags would be registered twice.
TEST_CASE("a test case that reads a slower net carries its fixture's tag, and one only", "[meta]") {
  const std::vector<std::pair<std::string, std::regex>> groups = {
      {"mbv2", std::regex("mbv2")},
      {"resnet", std::regex(R"(resnet\.pt|"resnet")")},
      {"effnet", std::regex(R"(effnet\.pt|"effnet")")},
      {"vit", std::regex(R"(vit_qkv|"vit")")},
      {"zoo", std::regex("kZoo")}};
  const std::regex extra(R"((cnn_bn|mlp)\.pt)");
  const std::regex header(R"re(TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*"([^"]*)")re");
  size_t tagged = 0;
  for (const char* sub : {"tests", "lib/src"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(TQ_SOURCE_DIR) / sub)) {
      if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
      if (e.path().filename() == "test_test_names.cpp") continue;  // it names them all
      std::ifstream in(e.path());
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      std::vector<std::smatch> cases;
      for (std::sregex_iterator it(text.begin(), text.end(), header), end; it != end; ++it)
        cases.push_back(*it);
      for (size_t i = 0; i < cases.size(); ++i) {
        const auto from = cases[i][0].first;
        const auto to = i + 1 < cases.size() ? cases[i + 1][0].first : text.cend();
        const std::string body(from, to), tags = cases[i][2].str();
        INFO(e.path().string() + ": " + cases[i][1].str() + " " + tags);
        size_t model_tags = 0;
        for (const auto& [tag, reads] : groups) {
          const bool has = tags.find("[" + tag + "]") != std::string::npos;
          CHECK(std::regex_search(body, reads) == has);
          model_tags += has;
        }
        CHECK(model_tags <= 1);
        tagged += model_tags;
        // The "extra" nets (scripts/models/make_test_models.sh) have no
        // fixture: CI never builds them.
        CHECK_FALSE(std::regex_search(body, extra));
      }
    }
  }
  CHECK(tagged >= 15);
}
