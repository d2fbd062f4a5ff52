// Image-folder loader: flat and class folders, explicit classes, formats,
// preprocessing numerics, decode threads, shuffle, errors, and the
// Fashion-MNIST PNGs against test.npz.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include <torch/script.h>
#include <opencv2/imgcodecs.hpp>

#include "taoquant/data.h"
#include "test_data_util.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using namespace tqtest_data;

namespace {

// A BGR image whose pixel (y, x, ch) is f(y, x, ch).
template <class F>
void write_bgr(const std::string& path, int h, int w, F f) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) m.at<cv::Vec3b>(y, x)[c] = static_cast<uint8_t>(f(y, x, c));
  fs::create_directories(fs::path(path).parent_path());
  REQUIRE(cv::imwrite(path, m));
}

void write_gray(const std::string& path, int h, int w, int value) {
  cv::Mat m(h, w, CV_8UC1, cv::Scalar(value));
  fs::create_directories(fs::path(path).parent_path());
  REQUIRE(cv::imwrite(path, m));
}

std::unique_ptr<tq::DataLoader> images(const std::string& dir, const std::string& extra = "",
                                       bool labels = true) {
  return loader_of("images_dir: " + dir + "\n" + extra, labels);
}

std::pair<at::Tensor, at::Tensor> drain(tq::DataLoader& l) {
  std::vector<at::Tensor> xs, ys;
  tq::Batch b;
  while (l.next(b)) {
    xs.push_back(b.inputs.at(0));
    if (b.labels.defined()) ys.push_back(b.labels);
  }
  return {at::cat(xs, 0), ys.empty() ? at::Tensor() : at::cat(ys, 0)};
}

}  // namespace

TEST_CASE("images: flat folder, RGB order, scale/mean/std numerics", "[data][images]") {
  const std::string dir = temp_dir("img-flat");
  auto px = [](int y, int x, int c) { return (y * 5 + x) * 10 + c; };  // BGR channel c
  write_bgr(dir + "/b.png", 4, 5, px);
  write_bgr(dir + "/a.png", 4, 5, [&](int y, int x, int c) { return px(y, x, c) + 1; });
  fs::rename(dir + "/a.png", dir + "/a.PNG");  // upper-case extension
  write_text(dir + "/notes.txt", "ignored");
  auto l = images(dir, "preprocess: {mean: [0.1, 0.2, 0.3], std: [0.5, 0.25, 2.0]}\nbatch_size: 8");
  CHECK(l->num_samples() == 2);
  CHECK_FALSE(l->has_labels());  // flat folder
  auto [x, y] = drain(*l);
  CHECK_FALSE(y.defined());
  REQUIRE(x.sizes() == at::IntArrayRef({2, 3, 4, 5}));
  const double mean[3] = {0.1, 0.2, 0.3}, stdv[3] = {0.5, 0.25, 2.0};
  for (int n = 0; n < 2; ++n)  // sorted: a.PNG first (offset 1), then b.png
    for (int c = 0; c < 3; ++c)
      for (int yy = 0; yy < 4; ++yy)
        for (int xx = 0; xx < 5; ++xx) {
          const int raw =
              px(yy, xx, 2 - c) + (n == 0 ? 1 : 0);  // output channel 0 = R = BGR channel 2
          CHECK(x[n][c][yy][xx].item<float>() ==
                Approx((raw / 255.0 - mean[c]) / stdv[c]).margin(1e-6));
        }
  // color: bgr keeps OpenCV's order; scale 1 keeps raw values.
  auto [xb, yb] = drain(*images(dir, "preprocess: {color: bgr, scale: 1}"));
  CHECK(xb[1][0][2][3].item<float>() == static_cast<float>(px(2, 3, 0)));
  CHECK(xb[1][2][2][3].item<float>() == static_cast<float>(px(2, 3, 2)));
}

TEST_CASE("images: resize shorter side, center crop, direct resize, gray", "[data][images]") {
  const std::string dir = temp_dir("img-geom");
  // 8x12, constant in 2x2 blocks: shrinking by 2 (INTER_AREA) gives the block values exactly.
  auto block = [](int y, int x, int) { return (y / 2) * 40 + (x / 2) * 5; };
  write_bgr(dir + "/img.bmp", 8, 12, block);
  // resize 4 -> 4x6; center crop [4,4] -> columns 1..4 of the 4x6 image.
  auto [x, y] = drain(
      *images(dir, "preprocess: {resize: 4, center_crop: true, input_size: [4, 4], scale: 1}"));
  REQUIRE(x.sizes() == at::IntArrayRef({1, 3, 4, 4}));
  for (int yy = 0; yy < 4; ++yy)
    for (int xx = 0; xx < 4; ++xx)
      CHECK(x[0][1][yy][xx].item<float>() == static_cast<float>(yy * 40 + (xx + 1) * 5));
  // Odd margins round half to even (torchvision): 12 wide, crop 5 -> left round(3.5) = 4.
  auto [c5, _c] = drain(*images(dir, "preprocess: {center_crop: true, input_size: 5, scale: 1}"));
  REQUIRE(c5.sizes() == at::IntArrayRef({1, 3, 5, 5}));
  // top = round((8-5)/2) = round(1.5) = 2, left = round(3.5) = 4
  CHECK(c5[0][0][0][0].item<float>() == static_cast<float>(block(2, 4, 0)));
  // input_size without resize/crop: direct resize.
  auto [d, _d] = drain(*images(dir, "preprocess: {input_size: [3, 7]}"));
  CHECK(d.sizes() == at::IntArrayRef({1, 3, 3, 7}));
  // gray: one channel.
  const std::string gdir = temp_dir("img-gray");
  write_gray(gdir + "/g.png", 6, 6, 200);
  write_bgr(gdir + "/c.jpg", 6, 6, [](int, int, int) { return 100; });  // JPEG of a constant colour
  auto [g, _g] = drain(*images(gdir, "preprocess: {color: gray, mean: 0.5, std: 0.5}"));
  REQUIRE(g.sizes() == at::IntArrayRef({2, 1, 6, 6}));
  CHECK(g[0][0][0][0].item<float>() ==
        Approx((100 / 255.0 - 0.5) / 0.5).margin(0.02));  // c.jpg (lossy)
  CHECK(g[1][0][3][3].item<float>() == Approx((200 / 255.0 - 0.5) / 0.5).margin(1e-6));  // g.png
  // A mean with 3 values for gray images is a spec error at its line.
  auto e = catch_error([&] { images(gdir, "preprocess: {color: gray, mean: [0.1, 0.2, 0.3]}"); });
  CHECK(e.code == tq::ExitCode::kUsage);
  CHECK_THAT(e.msg, Contains("spec.yaml:") && Contains("preprocess.mean") && Contains("1 channel"));
}

TEST_CASE("images: class folders, explicit classes, threads, shuffle", "[data][images]") {
  const std::string dir = temp_dir("img-classes");
  const std::vector<std::string> cls = {"cat", "dog", "emu"};
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 3 + c; ++i)
      write_gray(dir + "/" + cls[c] + "/" + std::to_string(i) + ".png", 4, 4, 10 * c + i);
  write_gray(dir + "/dog/nested/deep.png", 4, 4, 99);  // recursive inside a class
  write_gray(dir + "/.hidden/x.png", 4, 4, 1);         // ignored
  auto l = images(dir, "preprocess: {color: gray, scale: 1}\nbatch_size: 3\nnum_workers: 3");
  CHECK(l->has_labels());
  CHECK(l->class_names() == cls);
  CHECK(l->num_samples() == 13);
  CHECK_THAT(l->describe(), Contains("13 samples") && Contains("3 classes"));
  auto [x, y] = drain(*l);
  const std::vector<int64_t> labels = {0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2};
  const std::vector<float> values = {0, 1, 2, 10, 11, 12, 13, 99, 20, 21, 22, 23, 24};
  for (size_t i = 0; i < labels.size(); ++i) {
    CHECK(y[static_cast<int64_t>(i)].item<int64_t>() == labels[i]);
    CHECK(x[static_cast<int64_t>(i)][0][0][0].item<float>() == values[i]);
  }
  // One worker gives the same batches; reset replays them.
  auto [x1, y1] =
      drain(*images(dir, "preprocess: {color: gray, scale: 1}\nbatch_size: 3\nnum_workers: 1"));
  CHECK(x1.equal(x));
  CHECK(y1.equal(y));
  l->reset();
  tq::Batch b;
  REQUIRE(l->next(b));
  CHECK(b.inputs[0].equal(x.narrow(0, 0, 3)));
  // Explicit classes set the label order.
  auto [xe, ye] =
      drain(*images(dir, "preprocess: {color: gray, scale: 1}\nclasses: [emu, dog, cat]"));
  CHECK(ye[0].item<int64_t>() == 0);
  CHECK(xe[0][0][0][0].item<float>() == 20);
  // Shuffle: seeded, a permutation with labels following their images.
  const std::string sh =
      "preprocess: {color: gray, scale: 1}\nshuffle: true\nbatch_size: 4\nnum_workers: 2\n";
  auto [xs, ys] = drain(*images(dir, sh + "seed: 3"));
  auto [xs2, ys2] = drain(*images(dir, sh + "seed: 3"));
  CHECK(xs.equal(xs2));
  CHECK(ys.equal(ys2));
  CHECK_FALSE(xs.equal(x));
  for (int64_t i = 0; i < 13; ++i) {
    float v = xs[i][0][0][0].item<float>();
    auto it = std::find(values.begin(), values.end(), v);
    REQUIRE(it != values.end());
    CHECK(ys[i].item<int64_t>() == labels[static_cast<size_t>(it - values.begin())]);
  }
  // max_batches.
  auto lm = images(dir, "preprocess: {color: gray}\nbatch_size: 4\nmax_batches: 2");
  CHECK(lm->num_samples() == 8);
  CHECK(drain(*lm).first.size(0) == 8);
}

TEST_CASE("images: errors name the folder or file", "[data][images][errors]") {
  const std::string empty = temp_dir("img-empty");
  auto e = catch_error([&] { images(empty); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("'" + empty + "' is empty"));

  const std::string txt = temp_dir("img-txt");
  write_text(txt + "/readme.txt", "x");
  e = catch_error([&] { images(txt); });
  CHECK_THAT(e.msg, Contains("no images") && Contains(".png") && Contains("readme.txt"));

  e = catch_error([&] { images(txt + "/nope"); });
  CHECK_THAT(e.msg, Contains("nope") && Contains("does not exist") &&
                        Contains("dataset.test_dataset.images_dir"));

  const std::string bad = temp_dir("img-corrupt");
  write_gray(bad + "/a.png", 4, 4, 1);
  write_text(bad + "/b.png", "not a png at all");
  e = catch_error([&] { drain(*images(bad, "batch_size: 1")); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("cannot decode image") && Contains(bad + "/b.png"));

  const std::string sizes = temp_dir("img-sizes");
  write_gray(sizes + "/a.png", 4, 4, 1);
  write_gray(sizes + "/b.png", 5, 4, 1);
  e = catch_error([&] { drain(*images(sizes, "preprocess: {color: gray}")); });
  CHECK_THAT(e.msg, Contains("inconsistent image sizes") && Contains("b.png") &&
                        Contains("1x5x4") && Contains("a.png") && Contains("input_size"));
  // ... and input_size fixes it.
  CHECK(drain(*images(sizes, "preprocess: {color: gray, input_size: 4}")).first.size(0) == 2);

  const std::string cls = temp_dir("img-cls");
  write_gray(cls + "/cat/a.png", 4, 4, 1);
  write_gray(cls + "/dgo/a.png", 4, 4, 1);
  e = catch_error([&] { images(cls, "classes: [cat, dog]"); });
  CHECK_THAT(e.msg, Contains(cls + "/dgo") && Contains("not in the classes list") &&
                        Contains("did you mean 'dog'"));
  fs::rename(cls + "/dgo", cls + "/bird");
  e = catch_error([&] { images(cls, "classes: [cat, dog, bird]"); });
  CHECK_THAT(e.msg, Contains("class 'dog'") && Contains("has no folder"));

  e = catch_error([&] { images(cls, "preprocess: {center_crop: true}"); });
  CHECK(e.code == tq::ExitCode::kUsage);
  CHECK_THAT(e.msg, Contains("center_crop needs preprocess.input_size"));
}

TEST_CASE("check_input_fits names the data shape and the model's first layer", "[data][check]") {
  auto model = torch::jit::load(models("fmnist/cnn.pt"));
  model.eval();
  tq::Batch ok;
  ok.inputs = {at::zeros({4, 1, 28, 28})};
  CHECK_NOTHROW(tq::check_input_fits(model, ok));
  tq::Batch bad;
  bad.inputs = {at::zeros({4, 3, 32, 32})};
  auto e = catch_error([&] { tq::check_input_fits(model, bad); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("the model's forward failed on the calibration/test data (shape "
                             "[1,3,32,32]): RuntimeError: Given groups=1") &&
                        Contains("to have 1 channels, but got 3 channels") &&
                        Contains("\nhint: the data's shape does not fit the model's input: its "
                                 "first layer 'features.conv1' Conv2d expects 1 input channels"));
  // A uint8 input of the right shape is a dtype mismatch.
  bad.inputs = {at::zeros({4, 1, 28, 28}, at::kByte)};
  e = catch_error([&] { tq::check_input_fits(model, bad); });
  CHECK_THAT(e.msg, Contains("hint: the data's dtype (Byte) does not fit the model's input, which "
                             "takes floating-point values"));
}

TEST_CASE("a model that reshapes, then raises: its own message first, the shape only a hint",
          "[data][check]") {
  // The first layer is a Linear of 784 features, the data [N,1,28,28]: a
  // guess from that layer says "does not fit", but the model flattens first.
  auto model = torch::jit::load(fixture("raising_flat.pt"));
  model.eval();
  tq::Batch b;
  b.inputs = {at::zeros({4, 1, 28, 28})};
  auto e = catch_error([&] { tq::check_input_fits(model, b, "calibration data"); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  INFO(e.msg);
  CHECK_THAT(e.msg, StartsWith("the model's forward failed on the calibration data (shape "
                               "[1,1,28,28]): builtins.RuntimeError: the model's own check "
                               "failed: expected logits in a calibrated range\nhint: "));
  CHECK_THAT(e.msg, Contains("its first layer 'fc' Linear expects 784 input features (unless the "
                             "forward reshapes its input before that layer)"));
}

TEST_CASE("check_input_fits runs two samples: a forward that holds for one only fails there",
          "[data][check]") {
  // Branch specialization decides an assert on every call's path without
  // data, trusting this check (specialize.cpp); an assert that one sample
  // passes and the calibration batches would not must fail here.
  torch::jit::Module m("OneAtATime");
  m.define(
      "def forward(self, x):\n"
      "  assert x.size(0) == 1, 'one sample at a time'\n"
      "  return x * 2.0\n");
  tq::Batch one;
  one.inputs = {at::zeros({1, 3})};
  CHECK_NOTHROW(tq::check_input_fits(m, one, "calibration data"));
  tq::Batch four;
  four.inputs = {at::zeros({4, 3})};
  auto e = catch_error([&] { tq::check_input_fits(m, four, "calibration data"); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, StartsWith("the model's forward failed on the calibration data (shape [1,3]") &&
                        Contains("one sample at a time"));
}

TEST_CASE("a model whose own code raises: its message, not 'does not fit'", "[data][check]") {
  auto model = torch::jit::load(fixture("raising.pt"));
  model.eval();
  tq::Batch b;
  b.inputs = {at::zeros({4, 1, 28, 28})};
  auto e = catch_error([&] { tq::check_input_fits(model, b); });
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("the model's forward failed on the calibration/test data (shape "
                             "[1,1,28,28], which its first layer 'conv' Conv2d expects 1 input "
                             "channels takes)") &&
                        Contains("input rejected by the model: values must be in [-1, 1]") &&
                        Contains("(normalize the calibration data first)") &&
                        !Contains("does not fit"));
  // Through the binary, with and without -v: the model's message reaches the user.
  const std::string dir = temp_dir("raising");
  const std::string spec = dir + "/spec.yaml";
  std::ofstream(spec) << "results_dir: " << dir
                      << "/out\nquantize:\n  backend: libtorch\n  mode: static_ptq\n"
                         "  default_layer_dtype: int8\n  model_path: "
                      << fixture("raising.pt")
                      << "\ndataset:\n  quant_calibration_dataset:\n    data_file: "
                      << models("fmnist/calib.npz") << "\n    batch_size: 8\n";
  for (const std::string flag : {"", " -v"}) {
    INFO(flag);
    const Run r = run_cmd(std::string(TQ_CLI) + flag + " quantize -e " + spec);
    CHECK(r.status == 1);
    CHECK_THAT(r.out, Contains("input rejected by the model: values must be in [-1, 1]") &&
                          !Contains("does not fit"));
  }
}

TEST_CASE("the Fashion-MNIST PNGs, normalized, equal test.npz", "[data][images][fmnist]") {
  const std::string dir = models("fmnist/test_png");
  auto l = images(
      dir,
      "preprocess: {color: gray, mean: [0.2860], std: [0.3530]}\nbatch_size: 128\nnum_workers: 2");
  REQUIRE(l->num_samples() == 1000);
  CHECK(l->class_names().size() == 10);
  auto [x, y] = drain(*l);
  // The loader's order: class folders in name order, files sorted; file name = index in test.npz.
  std::vector<std::pair<std::string, int64_t>> files;
  for (const auto& c : l->class_names()) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir + "/" + c)) names.push_back(e.path().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) files.emplace_back(n, std::stoll(fs::path(n).stem().string()));
  }
  REQUIRE(files.size() == 1000);
  auto t =
      loader_of("data_file: " + models("fmnist/test.npz") + "\nbatch_size: 1000\nmax_batches: 1");
  tq::Batch ref;
  REQUIRE(t->next(ref));
  std::vector<int64_t> idx;
  for (const auto& f : files) idx.push_back(f.second);
  at::Tensor want = ref.inputs[0].index_select(0, at::tensor(idx, at::kLong));
  CHECK((x - want).abs().max().item<float>() < 1e-5f);
  CHECK(y.equal(ref.labels.index_select(0, at::tensor(idx, at::kLong))));
}
