// Tensor-file loaders: .npz (stored and compressed), .npy, .pt; batching,
// shuffling, max_batches, tuples of inputs, every error, and the full
// Fashion-MNIST test set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include <torch/script.h>
#include "taoquant/json.h"

#include "taoquant/data.h"
#include "test_data_util.h"

using Catch::Matchers::Contains;
using namespace tqtest_data;

namespace {

// All batches, inputs concatenated per input index, labels concatenated.
struct All {
  std::vector<at::Tensor> inputs;
  at::Tensor labels;
  std::vector<int64_t> batch_sizes;
  std::vector<size_t> first_index;
};
All drain(tq::DataLoader& l) {
  All a;
  std::vector<std::vector<at::Tensor>> ins;
  std::vector<at::Tensor> labs;
  tq::Batch b;
  while (l.next(b)) {
    if (ins.empty()) ins.resize(b.inputs.size());
    for (size_t i = 0; i < b.inputs.size(); ++i) ins[i].push_back(b.inputs[i]);
    if (b.labels.defined()) labs.push_back(b.labels);
    a.batch_sizes.push_back(b.inputs[0].size(0));
    a.first_index.push_back(b.first_index);
  }
  for (auto& v : ins) a.inputs.push_back(at::cat(v, 0));
  if (!labs.empty()) a.labels = at::cat(labs, 0);
  return a;
}

at::Tensor f32_x() {
  return at::arange(240, at::kFloat).reshape({10, 2, 3, 4});
}
at::Tensor f32_y() {
  return at::arange(10, at::kLong).remainder(3);
}

}  // namespace

TEST_CASE("npz float32 (stored and compressed): batches, values, labels", "[data][npz]") {
  for (const char* name : {"f32.npz", "f32c.npz"}) {
    INFO(name);
    auto l = loader_of(std::string("data_file: ") + fixture(name) + "\nbatch_size: 4");
    CHECK(l->num_samples() == 10);
    CHECK(l->num_batches() == 3);
    CHECK(l->has_labels());
    CHECK_THAT(l->describe(), Contains("10 samples") && Contains("batch 4"));
    All a = drain(*l);
    CHECK(a.batch_sizes == std::vector<int64_t>{4, 4, 2});
    CHECK(a.first_index == std::vector<size_t>{0, 4, 8});
    REQUIRE(a.inputs.size() == 1);
    CHECK(a.inputs[0].scalar_type() == at::kFloat);
    CHECK(a.inputs[0].equal(f32_x()));
    CHECK(a.labels.scalar_type() == at::kLong);
    CHECK(a.labels.equal(f32_y()));
    // reset replays the same batches (compressed members reopen).
    l->reset();
    All b = drain(*l);
    CHECK(b.inputs[0].equal(f32_x()));
  }
}

TEST_CASE("npz without want_labels has no labels", "[data][npz]") {
  auto l = loader_of("data_file: " + fixture("f32.npz"), false);
  CHECK_FALSE(l->has_labels());
  tq::Batch b;
  REQUIRE(l->next(b));
  CHECK_FALSE(b.labels.defined());
}

TEST_CASE("npz uint8 inputs become float pixels with scale/mean/std", "[data][npz]") {
  auto l = loader_of("data_file: " + fixture("u8.npz") +
                     "\npreprocess: {mean: [0.5, 0.25, 0.0], std: [0.5, 2.0, 1.0]}");
  All a = drain(*l);
  REQUIRE(a.inputs[0].sizes() == at::IntArrayRef({2, 3, 2, 2}));
  CHECK(a.inputs[0].scalar_type() == at::kFloat);
  auto x = a.inputs[0].contiguous();
  const double mean[3] = {0.5, 0.25, 0.0}, stdv[3] = {0.5, 2.0, 1.0};
  for (int64_t i = 0; i < 24; ++i) {
    int64_t c = (i / 4) % 3;
    double raw = static_cast<double>((i * 10) % 256);
    CHECK(x.view({-1})[i].item<float>() == Approx((raw / 255.0 - mean[c]) / stdv[c]).margin(1e-6));
  }
  // int32 labels become int64.
  CHECK(a.labels.scalar_type() == at::kLong);
  CHECK(a.labels.equal(at::tensor({1, 0}, at::kLong)));
  // A mean with the wrong channel count is an error naming the array.
  auto c = catch_error([] {
    drain(*loader_of("data_file: " + fixture("u8.npz") + "\npreprocess: {mean: [0.1, 0.2]}"));
  });
  CHECK(c.code == tq::ExitCode::kRuntime);
  CHECK_THAT(c.msg, Contains("u8.npz: x") && Contains("preprocess.mean has 2 values") &&
                        Contains("3 channels"));
}

TEST_CASE("npz float64 becomes float32", "[data][npz]") {
  All a = drain(*loader_of("data_file: " + fixture("f64.npz") + "\nbatch_size: 2"));
  CHECK(a.inputs[0].scalar_type() == at::kFloat);
  CHECK(a.inputs[0].equal(at::arange(20, at::kFloat).reshape({5, 4}) / 8));
  CHECK(a.labels.equal(at::tensor({4, 3, 2, 1, 0}, at::kLong)));
}

TEST_CASE("several input keys make a tuple of inputs", "[data][npz]") {
  auto l = loader_of("data_file: " + fixture("multi.npz") + "\ninput_key: [b, a]\nbatch_size: 3");
  All a = drain(*l);
  REQUIRE(a.inputs.size() == 2);
  CHECK(a.inputs[0].equal(-at::arange(35, at::kFloat).reshape({7, 5})));
  CHECK(a.inputs[1].equal(at::arange(21, at::kFloat).reshape({7, 3})));
  CHECK(a.labels.equal(at::arange(7, at::kLong)));
  CHECK_THAT(l->describe(), Contains("2 inputs"));
}

TEST_CASE("several files make a tuple of inputs", "[data][npz][npy]") {
  // f32c.npz: x [10,...]; x.npy has 9 rows -> error naming both.
  auto c = catch_error(
      [] { loader_of("data_file: [" + fixture("f32.npz") + ", " + fixture("x.npy") + "]"); });
  CHECK(c.code == tq::ExitCode::kRuntime);
  CHECK_THAT(c.msg, Contains("different sample counts") && Contains("f32.npz: x") &&
                        Contains("has 10") && Contains("x.npy") && Contains("has 9"));
  // Two files with the same count: inputs in file order, labels from the first that has them.
  All a = drain(*loader_of("data_file: [" + fixture("f32.npz") + ", " + fixture("f32c.npz") +
                           "]\nbatch_size: 3"));
  REQUIRE(a.inputs.size() == 2);
  CHECK(a.inputs[0].equal(f32_x()));
  CHECK(a.inputs[1].equal(f32_x()));
  CHECK(a.labels.equal(f32_y()));
}

TEST_CASE("npy files", "[data][npy]") {
  auto l = loader_of("data_file: " + fixture("x.npy") + "\nbatch_size: 4");
  CHECK_FALSE(l->has_labels());
  All a = drain(*l);
  CHECK(a.inputs[0].equal(at::arange(36, at::kFloat).reshape({9, 4})));
  CHECK(a.batch_sizes == std::vector<int64_t>{4, 4, 1});
}

TEST_CASE("pt files: tensor, tuple, dict", "[data][pt]") {
  const at::Tensor t = at::arange(12, at::kFloat).reshape({6, 2});
  All a = drain(*loader_of("data_file: " + fixture("tensor.pt") + "\nbatch_size: 4"));
  CHECK(a.inputs[0].equal(t));
  CHECK_FALSE(a.labels.defined());

  // A tuple: every element is an input, unless label_key names one.
  All b = drain(*loader_of("data_file: " + fixture("tuple.pt")));
  CHECK(b.inputs.size() == 2);
  All c = drain(*loader_of("data_file: " + fixture("tuple.pt") + "\nlabel_key: '1'"));
  REQUIRE(c.inputs.size() == 1);
  CHECK(c.inputs[0].equal(t));
  CHECK(c.labels.equal(at::arange(6, at::kLong)));

  All d = drain(*loader_of("data_file: " + fixture("dict.pt") + "\nbatch_size: 5"));
  REQUIRE(d.inputs.size() == 1);
  CHECK(d.inputs[0].equal(t));
  CHECK(d.labels.equal(at::arange(6, at::kLong).remainder(2)));

  auto e = catch_error([] { loader_of("data_file: " + fixture("dict.pt") + "\ninput_key: z"); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("dict.pt") && Contains("'z'") && Contains("keys: x, y"));
}

TEST_CASE("shuffle is a seeded permutation, max_batches limits", "[data][shuffle]") {
  for (const char* name : {"f32.npz", "f32c.npz", "dict.pt"}) {
    INFO(name);
    const std::string base = "data_file: " + fixture(name) + "\nbatch_size: 3\nshuffle: true\n";
    All a = drain(*loader_of(base + "seed: 7"));
    All b = drain(*loader_of(base + "seed: 7"));
    All c = drain(*loader_of(base + "seed: 8"));
    CHECK(a.inputs[0].equal(b.inputs[0]));
    CHECK(a.labels.equal(b.labels));
    CHECK_FALSE(a.inputs[0].equal(c.inputs[0]));
    // A permutation of the unshuffled rows, labels still matching their rows.
    All plain = drain(*loader_of("data_file: " + fixture(name)));
    const int64_t n = plain.inputs[0].size(0);
    REQUIRE(a.inputs[0].size(0) == n);
    std::set<int64_t> seen;
    for (int64_t i = 0; i < n; ++i) {
      int64_t j = -1;
      for (int64_t k = 0; k < n; ++k)
        if (plain.inputs[0][k].equal(a.inputs[0][i])) j = k;
      REQUIRE(j >= 0);
      seen.insert(j);
      CHECK(plain.labels[j].item<int64_t>() == a.labels[i].item<int64_t>());
    }
    CHECK(seen.size() == static_cast<size_t>(n));
  }
  // The permutation is fixed by the seed (mt19937_64 + Fisher-Yates), so it is
  // the same on every platform: pin it.
  All p = drain(*loader_of("data_file: " + fixture("f32.npz") + "\nshuffle: true\nseed: 7"));
  std::vector<int64_t> order;
  for (int64_t i = 0; i < 10; ++i)
    order.push_back(static_cast<int64_t>(p.inputs[0][i][0][0][0].item<float>()) / 24);
  All p2 = drain(*loader_of("data_file: " + fixture("f32c.npz") + "\nshuffle: true\nseed: 7"));
  CHECK(p2.inputs[0].equal(p.inputs[0]));
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(order != sorted);

  auto l = loader_of("data_file: " + fixture("f32.npz") + "\nbatch_size: 4\nmax_batches: 2");
  CHECK(l->num_batches() == 2);
  CHECK(l->num_samples() == 8);
  All m = drain(*l);
  CHECK(m.batch_sizes == std::vector<int64_t>{4, 4});
  CHECK(m.inputs[0].equal(f32_x().narrow(0, 0, 8)));
  auto big = loader_of("data_file: " + fixture("f32.npz") + "\nbatch_size: 4\nmax_batches: 9");
  CHECK(big->num_batches() == 3);
  CHECK(big->num_samples() == 10);
}

TEST_CASE("tensor-file errors name the file, the key and what was expected", "[data][errors]") {
  struct Case {
    std::string body;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"data_file: " + fixture("f32.npz") + "\ninput_key: xx",
       {"f32.npz", "no array 'xx'", "did you mean 'x'", "keys: x, y"}},
      {"data_file: " + fixture("arr0.npz"),
       {"arr0.npz", "no array 'x'", "keys: arr_0", "input_key"}},
      {"data_file: " + fixture("f16.npz"),
       {"f16.npz: x", "unsupported dtype float16", "'<f2'", "float32"}},
      {"data_file: " + fixture("fortran.npz"), {"fortran.npz: x", "Fortran order"}},
      {"data_file: " + fixture("bigend.npz"), {"bigend.npz: x", "big-endian", "'>f4'"}},
      {"data_file: " + fixture("flabels.npz"), {"flabels.npz: y", "labels are float32", "integer"}},
      {"data_file: " + fixture("zero.npz"), {"zero.npz: x", "zero samples"}},
      {"data_file: " + fixture("multi.npz") + "\ninput_key: [a, y, b]\nlabel_key: nope", {}},
      {"data_file: " + fixture("multi_bad.npz") + "\ninput_key: [a, b]",
       {"different sample counts", "multi_bad.npz: a", "has 7", "multi_bad.npz: b", "has 6"}},
      {"data_file: " + fixture("corrupt.npz"), {"corrupt.npz", "zip"}},
      {"data_file: " + fixture("nonexistent.npz"),
       {"nonexistent.npz", "does not exist", "dataset.test_dataset.data_file"}},
      {"data_file: " + fixtures(), {"is a folder"}},
      {"data_file: " + fixture("x.csv"), {}},
  };
  write_text(fixture("x.csv"), "1,2\n");
  for (const auto& c : cases) {
    INFO(c.body);
    auto e = catch_error([&] { drain(*loader_of(c.body)); });
    if (c.body.find("label_key: nope") != std::string::npos) {
      CHECK_FALSE(e.thrown);  // a missing label key only means "no labels"
      continue;
    }
    REQUIRE(e.thrown);
    CHECK(e.code == tq::ExitCode::kRuntime);
    if (c.body.find("x.csv") != std::string::npos) {
      CHECK_THAT(e.msg, Contains("unsupported extension '.csv'") && Contains(".npz, .npy or .pt"));
      continue;
    }
    for (const auto& p : c.parts) CHECK_THAT(e.msg, Contains(p));
  }
  // An empty source is a spec error (exit 2).
  tq::Spec s = spec_of("dataset:\n  test_dataset:\n    batch_size: 4\n");
  auto e = catch_error(
      [&] { tq::make_data_loader(s, *s.dataset.test_dataset, "dataset.test_dataset", true); });
  CHECK(e.code == tq::ExitCode::kUsage);
  CHECK_THAT(e.msg, Contains("images_dir") && Contains("data_file"));
}

TEST_CASE("the Fashion-MNIST test set loads whole: 10000 samples, per-class counts match numpy",
          "[data][fmnist]") {
  const std::string npz = models("fmnist/test.npz");
  auto l = loader_of("data_file: " + npz + "\nbatch_size: 256");
  CHECK(l->num_samples() == 10000);
  CHECK(l->num_batches() == 40);
  std::vector<int64_t> counts(10, 0);
  double sum = 0;
  size_t n = 0;
  tq::Batch b;
  while (l->next(b)) {
    CHECK(b.inputs[0].sizes().slice(1) == at::IntArrayRef({1, 28, 28}));
    sum += b.inputs[0].to(at::kDouble).sum().item<double>();
    auto lab = b.labels.contiguous();
    for (int64_t i = 0; i < lab.size(0); ++i)
      ++counts.at(static_cast<size_t>(lab[i].item<int64_t>()));
    n += static_cast<size_t>(b.inputs[0].size(0));
  }
  CHECK(n == 10000);
  Run r = run_cmd(std::string(kPython) + " -c \"import numpy as np, json; d = np.load('" + npz +
                      "'); print(json.dumps({'counts': np.bincount(d['y'], minlength=10).tolist(), "
                      "'sum': float(d['x'].astype(np.float64).sum())}))\"",
                  false);
  REQUIRE(r.status == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(counts == j["counts"].get<std::vector<int64_t>>());
  CHECK(sum == Approx(j["sum"].get<double>()).margin(1e-3));  // the mean is near 0: absolute
}
