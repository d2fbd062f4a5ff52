// ctest runs each Catch2 test case by name (catch_discover_tests), and cuts a
// name at ';': a case named "a; b" became two ctest entries that matched no
// test case and passed without running anything. No name may hold one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

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
