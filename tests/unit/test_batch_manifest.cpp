// Batch manifests (jobs, templates, defaults, ids, errors), shards, and the
// XXH64 hash resume relies on.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

#include "batch_test_util.h"
#include "taoquant/batch.h"
#include "taoquant/result_files.h"

using Catch::Matchers::Contains;
using tqtest::ScratchDir;
using tqtest::write;

namespace {

// A manifest dir with specs/ and models/ below it.
void make_tree(const ScratchDir& d) {
  write(d / "specs/int8.yaml", "quantize:\n  backend: libtorch\n  model_path: m.pt\n");
  write(d / "specs/static.yaml", "quantize:\n  backend: libtorch\n  mode: static_ptq\n");
  for (const char* m : {"models/c.pt", "models/a.pt", "models/b.pt", "models/other.bin"})
    write(d / m, "PK");
}

struct Failure {
  tq::ExitCode code = tq::ExitCode::kOk;
  tq::SourceLoc loc;
  std::string msg = "<no error>";
};

Failure fail_of(const ScratchDir& d, const std::string& text) {
  write(d / "manifest.yaml", text);
  try {
    tq::load_manifest(d / "manifest.yaml");
  } catch (const tq::SpecError& e) {
    return {e.code(), e.loc(), e.what()};
  }
  return {};
}

}  // namespace

TEST_CASE("batch manifest: spec jobs, templates and defaults", "[batch]") {
  ScratchDir d("manifest");
  make_tree(d);
  write(d / "manifest.yaml", R"(# zoo
defaults:
  overrides: [quantize.default_layer_dtype=int8]
  timeout: 120
  evaluate: true
jobs:
  - spec: specs/int8.yaml
  - spec: specs/int8.yaml
    id: cnn-int4
    overrides: ["quantize.default_layer_dtype=int4"]
    evaluate: false
    timeout: 5
  - template: specs/static.yaml
    models: models/*.pt
  - template: specs/int8.yaml
    models: [models/b.pt, "models/{a,c}.pt"]
    id: "w8-{stem}-{spec}"
)");
  const tq::Manifest m = tq::load_manifest(d / "manifest.yaml");
  CHECK(m.name == "manifest");
  CHECK(m.dir == d.str());
  REQUIRE(m.default_timeout_s);
  CHECK(*m.default_timeout_s == 120);
  REQUIRE(m.jobs.size() == 8);
  std::vector<std::string> ids;
  for (const auto& j : m.jobs) ids.push_back(j.id);
  CHECK(ids == std::vector<std::string>{"int8", "cnn-int4", "static-a", "static-b", "static-c",
                                        "w8-a-int8", "w8-b-int8", "w8-c-int8"});
  for (size_t i = 0; i < m.jobs.size(); ++i) CHECK(m.jobs[i].index == i);

  const auto& j0 = m.jobs[0];
  CHECK(j0.spec == d / "specs/int8.yaml");
  CHECK(j0.overrides == std::vector<std::string>{"quantize.default_layer_dtype=int8"});
  CHECK(j0.evaluate);
  CHECK_FALSE(j0.timeout_s);
  CHECK(j0.model.empty());
  CHECK(j0.loc.line == 7);

  const auto& j1 = m.jobs[1];
  CHECK(j1.overrides == std::vector<std::string>{"quantize.default_layer_dtype=int8",
                                                 "quantize.default_layer_dtype=int4"});
  CHECK_FALSE(j1.evaluate);
  REQUIRE(j1.timeout_s);
  CHECK(*j1.timeout_s == 5);

  // Template: one job per matching file, sorted, directories and other
  // extensions left out, model_path set last.
  const auto& a = m.jobs[2];
  CHECK(a.model == d / "models/a.pt");
  CHECK(a.overrides.back() == "quantize.model_path=" + d / "models/a.pt");
  CHECK(a.overrides.front() == "quantize.default_layer_dtype=int8");
  CHECK(m.jobs[4].model == d / "models/c.pt");
  // A list of patterns with braces; duplicates collapse, order is sorted.
  CHECK(m.jobs[5].model == d / "models/a.pt");
  CHECK(m.jobs[7].model == d / "models/c.pt");
}

TEST_CASE("batch manifest: derived ids and the manifest hash", "[batch]") {
  ScratchDir d("manifest");
  make_tree(d);
  const std::string text = R"(jobs:
  - spec: specs/int8.yaml
    overrides: [quantize.mode=static_ptq, "quantize.model_path=x/resnet18.pt"]
  - spec: ./specs/../specs/int8.yaml
    overrides: ["quantize.model_path=x/My Model.pt"]
)";
  write(d / "manifest.yaml", text);
  const tq::Manifest m = tq::load_manifest(d / "manifest.yaml");
  REQUIRE(m.jobs.size() == 2);
  CHECK(m.jobs[0].id == "int8-resnet18-static_ptq");
  CHECK(m.jobs[1].id == "int8-My_Model");
  CHECK(m.jobs[1].spec == d / "specs/int8.yaml");
  CHECK(m.hash.size() == 16);

  // The same manifest in another directory (another machine): same hash.
  ScratchDir other("manifest");
  make_tree(other);
  write(other / "manifest.yaml", text);
  CHECK(tq::load_manifest(other / "manifest.yaml").hash == m.hash);
  // A different override: a different manifest.
  write(other / "manifest.yaml", text + "    evaluate: true\n");
  CHECK(tq::load_manifest(other / "manifest.yaml").hash != m.hash);
}

TEST_CASE("batch manifest: interpolation and relative paths", "[batch]") {
  ScratchDir d("manifest");
  make_tree(d);
  ::setenv("TQ_TEST_BATCH_MODELS", "models", 1);
  write(d / "manifest.yaml", R"(zoo: ${env:TQ_TEST_BATCH_MODELS}
jobs:
  - template: specs/int8.yaml
    models: ${zoo}/b.pt
    overrides: ['results_note=\${not.expanded}']
)");
  const tq::Manifest m = tq::load_manifest(d / "manifest.yaml");
  ::unsetenv("TQ_TEST_BATCH_MODELS");
  REQUIRE(m.jobs.size() == 1);
  CHECK(m.jobs[0].model == d / "models/b.pt");
  CHECK(m.jobs[0].overrides[0] == "results_note=${not.expanded}");
}

TEST_CASE("batch manifest errors: located, with the fix", "[batch]") {
  ScratchDir d("manifest");
  make_tree(d);

  auto f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n    evalute: true\n");
  CHECK(f.code == tq::ExitCode::kUsage);
  CHECK(f.loc.line == 3);
  CHECK(f.loc.column == 5);
  CHECK_THAT(f.msg, Contains("jobs.0.evalute: unknown key (did you mean 'evaluate'?)"));

  f = fail_of(d, "jbos:\n  - spec: specs/int8.yaml\n");
  CHECK(f.loc.line == 1);
  CHECK_THAT(f.msg, Contains("did you mean 'jobs'?"));

  f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n  - spec: specs/int8.yaml\n");
  CHECK(f.loc.line == 3);
  CHECK_THAT(f.msg, Contains("job id 'int8' is used twice"));
  CHECK_THAT(f.msg, Contains("manifest.yaml:2:5"));
  CHECK_THAT(f.msg, Contains("manifest.yaml:3:5"));
  CHECK_THAT(f.msg, Contains("explicit, different id"));

  f = fail_of(d, "jobs:\n  - spec: specs/nope.yaml\n");
  CHECK(f.loc.line == 2);
  CHECK_THAT(f.msg,
             Contains("'specs/nope.yaml' does not exist (relative to the manifest's directory"));

  f = fail_of(d, "jobs:\n  - template: specs/int8.yaml\n    models: models/*.onnx\n");
  CHECK(f.loc.line == 3);
  CHECK_THAT(f.msg, Contains("'models/*.onnx' matches no model file"));

  // A model missing from a brace list is an error, not a dropped job.
  f = fail_of(
      d,
      "jobs:\n  - template: specs/int8.yaml\n    models: [models/b.pt, \"models/{a,zz,c}.pt\"]\n");
  CHECK(f.loc.line == 3);
  CHECK_THAT(f.msg, Contains("'models/zz.pt' (from 'models/{a,zz,c}.pt') matches no model file"));

  f = fail_of(d, "jobs:\n  - template: specs/int8.yaml\n    models: models/*.pt\n    id: fixed\n");
  CHECK(f.loc.line == 4);
  CHECK_THAT(f.msg, Contains("use {stem}"));

  f = fail_of(d,
              "jobs:\n  - template: specs/int8.yaml\n    models: models/*.pt\n    id: x-{stme}\n");
  CHECK_THAT(f.msg, Contains("did you mean 'stem'?"));

  f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n    overrides: [quantize.mode]\n");
  CHECK(f.loc.line == 3);
  CHECK_THAT(f.msg, Contains("jobs.0.overrides.0: expected KEY=VALUE"));

  f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n    overrides: quantize.mode=static_ptq\n");
  CHECK_THAT(f.msg, Contains("expected a list of KEY=VALUE strings"));

  f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n    template: specs/int8.yaml\n");
  CHECK_THAT(f.msg, Contains("set spec: or template:, not both"));

  f = fail_of(d, "jobs:\n  - template: specs/int8.yaml\n");
  CHECK_THAT(f.msg, Contains("needs models:"));

  f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n    id: ../escape\n");
  CHECK_THAT(f.msg, Contains("is not a valid job id"));

  f = fail_of(d, "jobs:\n  - spec: specs/int8.yaml\n    timeout: -3\n");
  CHECK_THAT(f.msg, Contains("jobs.0.timeout: expected a number of seconds > 0"));

  f = fail_of(d, "jobs: []\n");
  CHECK_THAT(f.msg, Contains("jobs: the list is empty"));

  f = fail_of(d, "");
  CHECK_THAT(f.msg, Contains("the manifest is empty"));

  f = fail_of(d, "jobs:\n  - spec: [unclosed\n");
  CHECK(f.code == tq::ExitCode::kUsage);

  // Brace groups multiply: 11 of them would be 2048 patterns (and 20,000
  // used to take exponential time and memory).
  for (int groups : {11, 20000}) {
    std::string models;
    for (int i = 0; i < groups; ++i) models += "{a,b}";
    f = fail_of(d, "jobs:\n  - template: specs/int8.yaml\n    models: models/" + models + ".pt\n");
    CHECK(f.loc.line == 3);
    CHECK_THAT(f.msg, Contains("expands to more than 1000 patterns"));
  }
  f = fail_of(d, "jobs:\n  - template: specs/int8.yaml\n    models: models/{a,{b,c}}.pt\n");
  CHECK(f.code == tq::ExitCode::kOk);  // nested groups: 3 patterns, each matches

  try {
    tq::load_manifest(d / "missing.yaml");
    FAIL("no error");
  } catch (const tq::SpecError& e) {
    CHECK_THAT(e.what(), Contains("cannot read the manifest"));
  }
}

TEST_CASE("batch shards: parsing and a deterministic partition", "[batch]") {
  const tq::Shard s = tq::parse_shard("2/3");
  CHECK(s.index == 2);
  CHECK(s.count == 3);
  CHECK(s.sharded());
  CHECK(tq::parse_shard("1/1").count == 1);
  for (const char* bad : {"0/3", "4/3", "3", "a/b", "/2", "2/", "-1/2", "1/0"}) {
    INFO(bad);
    try {
      tq::parse_shard(bad);
      FAIL("accepted");
    } catch (const tq::UsageError& e) {
      CHECK(e.code() == tq::ExitCode::kUsage);
      CHECK_THAT(e.what(), Contains("--shard"));
    }
  }
  CHECK_THAT(std::string([] {
               try {
                 tq::parse_shard("5/4");
               } catch (const tq::UsageError& e) {
                 return std::string(e.what());
               }
               return std::string();
             }()),
             Contains("numbered 1..4"));
  // Every job in exactly one shard; job k in shard k % N + 1.
  for (int n = 1; n <= 5; ++n)
    for (size_t k = 0; k < 17; ++k) {
      int owners = 0;
      for (int i = 1; i <= n; ++i) owners += tq::Shard{i, n}.contains(k) ? 1 : 0;
      CHECK(owners == 1);
      CHECK(tq::Shard{static_cast<int>(k % n) + 1, n}.contains(k));
    }
}

TEST_CASE("batch hash: XXH64 reference values, streaming, files", "[batch]") {
  // Reference values from the xxHash library (libxxhash 0.8.1).
  CHECK(tq::Hash64().digest() == 0xef46db3751d8e999ULL);
  CHECK(tq::Hash64().update("a").digest() == 0xd24ec4f1a98c6e5bULL);
  CHECK(tq::Hash64().update("abc").digest() == 0x44bc2cf5ad770999ULL);
  CHECK(tq::Hash64(42).update("abc").digest() == 0x13c1d910702770e6ULL);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  CHECK(tq::Hash64().update(fox).digest() == 0x0b242d361fda71bcULL);
  CHECK(tq::Hash64(42).update(fox).digest() == 0xaa9f288a8baa3d3fULL);
  std::string k(1000, '\0');
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<char>((i * 7 + 3) % 256);
  CHECK(tq::Hash64().update(k).digest() == 0x5f235fa033f1a3fbULL);
  CHECK(tq::Hash64(42).update(k).digest() == 0xd776e8028586ff61ULL);
  CHECK(tq::Hash64().update(k).hex() == "5f235fa033f1a3fb");

  // Any split of the input gives the same digest.
  for (size_t step : {1u, 3u, 31u, 32u, 33u, 64u, 999u}) {
    tq::Hash64 h;
    for (size_t off = 0; off < k.size(); off += step) h.update(k.substr(off, step));
    CHECK(h.digest() == 0x5f235fa033f1a3fbULL);
  }
  ScratchDir d("hash");
  write(d / "k.bin", k);
  CHECK(tq::hash_file(d / "k.bin") == "5f235fa033f1a3fb");
  CHECK_THROWS_AS(tq::hash_file(d / "none.bin"), tq::RuntimeError);

  tq::write_text_atomic(d / "deep/er/out.txt", "hello\n");
  CHECK(tqtest::slurp(d / "deep/er/out.txt") == "hello\n");
  tq::write_text_atomic(d / "deep/er/out.txt", "again\n");
  CHECK(tqtest::slurp(d / "deep/er/out.txt") == "again\n");
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d / "deep/er"))
    files += e.is_regular_file();
  CHECK(files == 1);  // no temporary left behind
}
