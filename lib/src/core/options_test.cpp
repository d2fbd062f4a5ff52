// Typed backend options: the schema check before the model loads.
#include <catch2/catch.hpp>

#include "taoquant/options.h"
#include "taoquant/spec.h"

using Catch::Matchers::Contains;
using tq::Mode;
using tq::OptionType;

namespace {

std::vector<tq::OptionDef> schema() {
  return {
      {"engine", OptionType::kString, nullptr, {"onednn", "qnnpack"}, std::nullopt, "engine", {}},
      {"check", OptionType::kBool, true, {}, std::nullopt, "check", {Mode::kStatic}},
      {"sizes", OptionType::kIntList, nlohmann::json::array({1, 32}), {}, 1.0, "sizes", {}},
      {"ratio", OptionType::kNumber, 0.5, {}, 0.0, "ratio", {}},
      {"repeats", OptionType::kInt, 3, {}, 1.0, "repeats", {}}};
}

tq::BackendOptions resolve(const std::string& kwargs, Mode mode = Mode::kStatic) {
  auto spec = tq::parse_spec_text("quantize:\n  backend_kwargs: " + kwargs + "\n", "s.yaml");
  return tq::resolve_options(schema(), spec.quantize.backend_kwargs, mode, "backend 'x'", spec.locs,
                             spec.loc("quantize"));
}

void expect_error(const std::string& kwargs, const std::string& part, Mode mode = Mode::kStatic) {
  try {
    resolve(kwargs, mode);
    FAIL("no error for " << kwargs);
  } catch (const tq::SpecError& e) {
    CHECK_THAT(e.what(), Contains(part));
    CHECK(e.loc().file == "s.yaml");
    CHECK(e.loc().line == 2);
  }
}

}  // namespace

TEST_CASE("options: defaults fill what the spec leaves unset", "[options]") {
  auto o = resolve("{}");
  CHECK_FALSE(o.has("engine"));
  CHECK(o.get_bool("check"));
  CHECK(o.get_int_list("sizes") == std::vector<int64_t>{1, 32});
  CHECK(o.get_number("ratio") == 0.5);
  CHECK(o.get_int("repeats") == 3);
  CHECK_FALSE(o.given("check"));
  CHECK(o.loc("check").line == 2);  // not given: the backend_kwargs section
}

TEST_CASE("options: given values, with their locations", "[options]") {
  auto o = resolve("{engine: qnnpack, sizes: [4, 8], ratio: 2}");
  CHECK(o.get_string("engine") == "qnnpack");
  CHECK(o.given("engine"));
  CHECK(o.loc("engine").line == 2);
  CHECK(o.loc("engine").column > 1);
  CHECK(o.get_int_list("sizes") == std::vector<int64_t>{4, 8});
  CHECK(o.get_number("ratio") == 2.0);
  CHECK(tq::BackendOptions::key("engine") == "quantize.backend_kwargs.engine");
}

TEST_CASE("options: bad keys and values are spec errors at the key", "[options]") {
  expect_error("{engin: onednn}",
               "quantize.backend_kwargs.engin: unknown key for backend 'x' (accepted: engine, "
               "check, sizes, ratio, repeats) (did you mean 'engine'?)");
  expect_error("{engine: onedn}",
               "'onedn' is not one of: onednn, qnnpack (did you mean 'onednn'?)");
  expect_error("{engine: 3}", "expected a string (onednn, qnnpack)");
  expect_error("{check: 'yes'}", "quantize.backend_kwargs.check: expected true or false");
  expect_error("{sizes: [1, 0]}", "expected a non-empty list of positive integers, e.g. [1, 32]");
  expect_error("{sizes: []}", "expected a non-empty list of positive integers");
  expect_error("{sizes: 4}", "expected a non-empty list of positive integers");
  expect_error("{ratio: -1}", "expected a number >= 0");
  expect_error("{repeats: 1.5}", "expected a positive integer");
  expect_error("{check: false}", "reads this option in mode static_ptq only, not in dynamic_ptq",
               Mode::kDynamic);
}

TEST_CASE("options: a backend_kwargs that is not a mapping", "[options]") {
  CHECK_THROWS_WITH(tq::resolve_options(schema(), nlohmann::json::array({1}), Mode::kStatic, "b",
                                        {}, tq::SourceLoc{"s.yaml", 1, 1}),
                    Contains("expected a mapping of option: value"));
}

TEST_CASE("options: a schema that cannot work is refused", "[options]") {
  auto s = schema();
  CHECK(tq::validate_option_schema(s).empty());
  s.push_back(s[0]);
  CHECK_THAT(tq::validate_option_schema(s), Contains("option 'engine' is declared twice"));
  s = schema();
  s[1].default_value = "yes";
  CHECK_THAT(tq::validate_option_schema(s), Contains("option 'check': default \"yes\""));
  s = schema();
  s[0].default_value = "fbgemm";
  CHECK_THAT(tq::validate_option_schema(s), Contains("'fbgemm' is not one of"));
}

TEST_CASE("options: the schema as JSON", "[options]") {
  auto j = tq::options_to_json(schema());
  REQUIRE(j.size() == 5);
  CHECK(j[0]["name"] == "engine");
  CHECK(j[0]["type"] == "string");
  CHECK(j[0]["allowed"] == nlohmann::json::array({"onednn", "qnnpack"}));
  CHECK(j[1]["modes"] == nlohmann::json::array({"static_ptq"}));
  CHECK(j[2]["type"] == "int list");
  CHECK(j[2]["min"] == 1.0);
}
