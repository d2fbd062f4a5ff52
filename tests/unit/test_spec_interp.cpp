// Spec parser: interpolation and command-line overrides (valid cases).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "taoquant/spec.h"

using Catch::Matchers::Contains;
using tq::parse_spec_text;

namespace {

tq::Spec parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_spec_text(text, "spec.yaml", overrides);
}

}  // namespace

TEST_CASE("spec interpolation: references keep the referenced node", "[spec]") {
  auto s = parse(R"(results_dir: /r
bs: 16
flag: true
sizes: [1, 4]
kw: {a: 1, b: [x]}
quantize:
  results_dir: ${results_dir}/q
  model_path: "${results_dir}"
  backend_kwargs: ${kw}
  layers:
    - module_name: ${names[1]}
      weights: {group_size: "${bs}", symmetric: "${flag}"}
evaluate:
  batch_size: ${bs}
  latency:
    batch_sizes: ${sizes}
    iters: ${quantize.layers.0.weights.group_size}
names: [a, "b.*"]
)");
  CHECK(s.quantize.results_dir == "/r/q");
  CHECK(s.quantize.model_path == "/r");
  CHECK(s.quantize.backend_kwargs == nlohmann::json{{"a", 1}, {"b", {"x"}}});
  CHECK(s.quantize.layers[0].module_name == "b.*");
  CHECK(s.quantize.layers[0].weights->group_size == 16);
  CHECK(s.quantize.layers[0].weights->symmetric == true);
  CHECK(s.evaluate.batch_size == 16);
  CHECK(s.evaluate.latency->batch_sizes == std::vector<int>{1, 4});
  CHECK(s.evaluate.latency->iters == 16);
  // Types are kept in the resolved tree; strings stay strings.
  CHECK(s.resolved["evaluate"]["batch_size"] == 16);
  CHECK(s.resolved["quantize"]["layers"][0]["weights"]["symmetric"] == true);
  CHECK(s.resolved["quantize"]["backend_kwargs"]["b"][0] == "x");
  // A copied value is located where it is used.
  CHECK(s.loc("evaluate.batch_size").line == 14);
  CHECK(s.loc("quantize.backend_kwargs").line == 9);
}

TEST_CASE("spec interpolation: nested, chained, relative and escaped", "[spec]") {
  auto s = parse(R"(a: ${b}
b: ${c.d}
c:
  d: ${e}_x
  which: d
e: 5
quantize:
  model_path: ${c.${c.which}}/m.pt
  results_dir: out/${.backend}-${..e}
  backend: fakequant
  device: ${dev}
dev: cuda:${e}
literal: \${not.a.ref}
)");
  CHECK(s.resolved["a"] == "5_x");
  CHECK(s.resolved["b"] == "5_x");
  CHECK(s.quantize.model_path == "5_x/m.pt");
  CHECK(s.quantize.results_dir == "out/fakequant-5");
  CHECK(s.quantize.device == "cuda:5");
  CHECK(s.resolved["literal"] == "${not.a.ref}");
}

TEST_CASE("spec interpolation: environment variables", "[spec]") {
  ::setenv("TQ_TEST_SPEC_DIR", "/data/calib", 1);
  ::setenv("TQ_TEST_SPEC_BS", "24", 1);
  ::unsetenv("TQ_TEST_SPEC_UNSET");
  auto s = parse(R"(results_dir: ${env:TQ_TEST_SPEC_UNSET,runs/default}
quantize:
  model_path: ${oc.env:TQ_TEST_SPEC_UNSET,'models/a,b.pt'}
  results_dir: ${env:TQ_TEST_SPEC_UNSET,${results_dir}/q}
dataset:
  quant_calibration_dataset:
    images_dir: ${env:TQ_TEST_SPEC_DIR}
    batch_size: ${oc.env:TQ_TEST_SPEC_BS}
    max_batches: ${env:TQ_TEST_SPEC_UNSET, 3}
    label_key: pre_${env:TQ_TEST_SPEC_BS}_post
)");
  CHECK(s.results_dir == "runs/default");
  CHECK(s.quantize.model_path == "models/a,b.pt");
  CHECK(s.quantize.results_dir == "runs/default/q");
  const auto& cal = *s.dataset.quant_calibration_dataset;
  CHECK(cal.images_dir == "/data/calib");
  CHECK(cal.batch_size == 24);
  CHECK(cal.max_batches == 3);
  CHECK(cal.label_key == "pre_24_post");
  CHECK(s.resolved["dataset"]["quant_calibration_dataset"]["batch_size"] == 24);
  CHECK(s.resolved["dataset"]["quant_calibration_dataset"]["label_key"] == "pre_24_post");
  ::unsetenv("TQ_TEST_SPEC_DIR");
  ::unsetenv("TQ_TEST_SPEC_BS");
}

TEST_CASE("spec overrides: set, index, lists and new maps", "[spec]") {
  const std::string text = R"(results_dir: /r
quantize:
  mode: weight_only_ptq
  model_path: ???
  layers:
    - module_name: Linear
      weights: {dtype: int8}
  skip_names: [head]
)";
  auto s =
      parse(text, {"quantize.mode=static_ptq", "results_dir=runs/x",
                   "quantize.layers.0.weights.dtype=int4",
                   "quantize.layers.0.weights.group_size=32", "quantize.layers.1.module_name=Conv*",
                   "quantize.skip_names=[a, '*.fc']", "quantize.model_path=${results_dir}/m.pt",
                   "+dataset.quant_calibration_dataset.images_dir=/calib",
                   "++evaluate.gates={min_top1: 50, min_cosine: 0.9}",
                   "quantize.backend_kwargs.opts.level=2", "quantize.device= cuda:0 "});
  CHECK(s.quantize.mode == tq::Mode::kStatic);
  CHECK(s.results_dir == "runs/x");
  CHECK(s.quantize.layers[0].weights->dtype == tq::DType::kInt4);
  CHECK(s.quantize.layers[0].weights->group_size == 32);
  REQUIRE(s.quantize.layers.size() == 2);
  CHECK(s.quantize.layers[1].module_name == "Conv*");
  REQUIRE(s.quantize.skip_names.size() == 2);
  CHECK(s.quantize.skip_names[1].pattern == "*.fc");
  CHECK(s.quantize.model_path == "runs/x/m.pt");
  CHECK(s.missing.empty());
  CHECK(s.dataset.quant_calibration_dataset->images_dir == "/calib");
  CHECK(s.evaluate.gates.get(tq::Gate::kMinTop1) == 50.0);
  CHECK(s.evaluate.gates.get(tq::Gate::kMinCosine) == 0.9);
  CHECK(s.quantize.backend_kwargs == nlohmann::json{{"opts", {{"level", 2}}}});
  CHECK(s.quantize.device == "cuda:0");
  CHECK(s.resolved["results_dir"] == "runs/x");
  // Values from the command line are located there.
  CHECK(s.loc("quantize.mode").file == "command-line override 'quantize.mode=static_ptq'");
  CHECK(s.loc("quantize.mode").line == 0);
  CHECK(s.loc("quantize.layers.0.module_name").line == 6);
  // An override can also mark a value as missing, or set an empty string.
  s = parse(text, {"quantize.model_path=???", "results_dir="});
  CHECK(s.missing == std::set<std::string>{"quantize.model_path"});
  CHECK(s.results_dir.empty());
  CHECK(s.resolved["results_dir"] == "");
  // Missing lists and maps are created on the way.
  s = parse("results_dir: r\n",
            {"quantize.layers.0.module_name=Linear",
             "quantize.layers.0.weights.dtype=float8_e4m3fn", "quantize.layers.1.module_name=fc"});
  REQUIRE(s.quantize.layers.size() == 2);
  CHECK(s.quantize.layers[0].module_name == "Linear");
  CHECK(s.quantize.layers[0].weights->dtype == tq::DType::kFp8E4M3);
  CHECK(s.quantize.layers[1].module_name == "fc");
  // Later overrides win; an empty spec can be filled entirely.
  s = parse("", {"quantize.model_path=a.pt", "quantize.model_path=b.pt", "evaluate.batch_size=8"});
  CHECK(s.quantize.model_path == "b.pt");
  CHECK(s.evaluate.batch_size == 8);
}

TEST_CASE("spec interpolation: limits on what references build", "[spec]") {
  auto fail_of = [](const std::string& text) -> std::pair<int, std::string> {
    try {
      tq::parse_spec_text(text, "spec.yaml", {});
    } catch (const tq::SpecError& e) {
      return {e.loc().line, e.what()};
    }
    return {0, "<accepted>"};
  };
  // Each line doubles the text: 2^40 x 16 characters without a limit.
  std::string doubling;
  for (int i = 0; i < 40; ++i)
    doubling += "k" + std::to_string(i) + ": \"${k" + std::to_string(i + 1) + "}${k" +
                std::to_string(i + 1) + "}\"\n";
  doubling += "k40: xxxxxxxxxxxxxxxx\nresults_dir: ${k0}\n";
  auto f = fail_of(doubling);
  CHECK(f.first > 0);
  CHECK_THAT(f.second, Contains("interpolation makes a value of") &&
                           Contains("characters (at most 1000000)"));
  // The same with lists: the copies double.
  std::string lists;
  for (int i = 0; i < 40; ++i)
    lists += "k" + std::to_string(i) + ": [\"${k" + std::to_string(i + 1) + "}\", \"${k" +
             std::to_string(i + 1) + "}\"]\n";
  lists += "k40: [a, b]\nquantize:\n  backend_kwargs: {x: \"${k0}\"}\n";
  f = fail_of(lists);
  CHECK_THAT(f.second, Contains("interpolation builds more than 1000000 values"));
  // A chain of 1000 references: an error, not a stack overflow.
  std::string chain;
  for (int i = 0; i < 1000; ++i)
    chain += "k" + std::to_string(i) + ": ${k" + std::to_string(i + 1) + "}\n";
  chain += "k1000: end\nresults_dir: ${k0}\n";
  f = fail_of(chain);
  CHECK_THAT(f.second, Contains("interpolation nested deeper than 256 references"));
  // A deep list copied into a deep place would nest past the reader's limit.
  const std::string deep(250, '[');
  f = fail_of("a: " + deep + std::string(250, ']') +
              "\nquantize:\n  backend_kwargs: [[[[[[[[[[\"${a}\"]]]]]]]]]]\n");
  CHECK(f.first == 3);
  CHECK_THAT(f.second, Contains("quantize.backend_kwargs.0.0.0.0.0.0.0.0.0.0: interpolation makes "
                                "lists and maps nest deeper than 256 levels"));
  // Within the limits, all of it works.
  CHECK(fail_of("a: [1, 2]\nb: [\"${a}\", \"${a}\"]\nc: ${b}\nresults_dir: ${c.0.1}\n").second ==
        "<accepted>");
}
