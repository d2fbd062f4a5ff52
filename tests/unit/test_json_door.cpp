// taoquant/json.h: nlohmann::json's preconditions hold in release builds
// too. Reading a key a const json lacks through [] throws, naming the broken
// condition, instead of reading the map's end (docs/reliability.md, "JSON
// under its contract"). Built with NDEBUG like everything else here, so the
// library's default assert() would be compiled out.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "taoquant/json.h"

using nlohmann::json;

TEST_CASE("json door: a key a const json lacks, read through [], throws", "[unit][json]") {
  const json layer = {{"class", "Conv2d"}, {"kept_float", true}};
  CHECK(layer["class"] == "Conv2d");  // present: read as usual
  try {
    (void)(layer["kind"] == "Conv2d");
    FAIL("read a missing key through a const json without an error");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("used outside its contract") != std::string::npos);
  }
}
