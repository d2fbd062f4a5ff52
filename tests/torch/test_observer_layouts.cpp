// Observer ranges on every memory layout an observer meets (contiguous,
// channels-last, transposed and strided views, 1-D, 0-D), per tensor and
// per channel, against a plain loop over a contiguous copy.
#include <algorithm>
#include <limits>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "taoquant/observer.h"

namespace {

struct Case {
  std::string what;
  at::Tensor x;
};

// Per-channel (or whole-tensor, channel axis -1 meaning none) min and max by
// a loop over the values, channels moved to the front and made contiguous.
std::pair<std::vector<float>, std::vector<float>> loop_range(const std::vector<at::Tensor>& xs,
                                                             bool per_channel, int axis) {
  std::vector<float> lo, hi;
  for (const auto& x : xs) {
    at::Tensor y = x.dim() == 0 ? x.reshape({1}) : x;
    y = per_channel ? y.movedim(axis < 0 ? axis + y.dim() : axis, 0).contiguous()
                    : y.contiguous().reshape({1, -1});
    y = y.reshape({y.size(0), -1}).contiguous();
    const auto channels = static_cast<size_t>(y.size(0));
    const auto n = y.size(1);
    lo.resize(channels, std::numeric_limits<float>::infinity());
    hi.resize(channels, -std::numeric_limits<float>::infinity());
    const float* p = y.data_ptr<float>();
    for (size_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < n; ++i) {
        lo[c] = std::min(lo[c], p[static_cast<int64_t>(c) * n + i]);
        hi[c] = std::max(hi[c], p[static_cast<int64_t>(c) * n + i]);
      }
  }
  return {lo, hi};
}

void check_same(const std::string& observer, const std::vector<at::Tensor>& xs, bool per_channel,
                int axis) {
  tq::ObserverConfig cfg;
  cfg.dtype = tq::DType::kUInt8;
  cfg.per_channel = per_channel;
  cfg.axis = axis;
  auto o = tq::ObserverRegistry::instance().create(observer, cfg);
  for (const auto& x : xs) o->observe(x);
  const tq::QParams got = o->finalize();
  const auto [lo, hi] = loop_range(xs, per_channel, axis);
  const tq::QParams want = tq::qparams_from_range(lo, hi, cfg);
  CHECK(got.scale == want.scale);
  CHECK(got.zero_point == want.zero_point);
}

}  // namespace

TEST_CASE("observers: ranges on every layout equal a loop over the values", "[observers]") {
  torch::manual_seed(11);
  const at::Tensor nchw = torch::randn({3, 5, 4, 6}) * torch::arange(1, 6).reshape({1, 5, 1, 1});
  const at::Tensor wide = torch::randn({6, 40}) + 0.5;
  const std::vector<Case> cases{
      {"contiguous NCHW", nchw},
      {"channels-last", nchw.contiguous(at::MemoryFormat::ChannelsLast)},
      {"transposed view", wide.t()},
      {"strided slice", nchw.slice(3, 0, 6, 2)},
      {"weight-like 2-D", wide},
  };
  for (const auto& c : cases)
    for (const std::string observer : {"minmax", "moving_average_minmax"}) {
      INFO(c.what << ", " << observer);
      check_same(observer, {c.x}, false, 0);
      for (int axis = -1; axis < c.x.dim(); ++axis) {
        INFO("per channel, axis " << axis);
        check_same(observer, {c.x}, true, axis);
      }
    }
  SECTION("running ranges over batches of other layouts") {
    const at::Tensor second = (nchw * 2 - 1).contiguous(at::MemoryFormat::ChannelsLast);
    check_same("minmax", {nchw, second}, false, 0);
    check_same("minmax", {nchw, second}, true, 1);
  }
  SECTION("a 1-D tensor per channel: one value a channel; a 0-D tensor") {
    const at::Tensor v = torch::randn({7});
    check_same("minmax", {v}, true, 0);
    check_same("minmax", {v}, false, 0);
    check_same("minmax", {torch::tensor(2.5f).reshape({})}, false, 0);
  }
}
