// jit::onednn_max_pools (lib/src/torch/jit/float_pools.cpp): the rewritten
// graph gives LibTorch's own aten::max_pool2d values, bit for bit, in every
// setting and on every input the op may see (through each of its two
// kernels), and a real model run through a rewritten copy gives the
// untouched model's output exactly.
#include <catch2/catch.hpp>

#include <limits>

#include <torch/csrc/jit/testing/file_check.h>
#include <torch/script.h>

#include "taoquant/calibration.h"
#include "taoquant/jit.h"

using torch::jit::Module;
using torch::jit::testing::FileCheck;
namespace jit = tq::jit;

namespace {

const std::string kModels = TQ_MODELS_DIR;

// Five pools: the plain one, one-element lists, and every setting away
// from its default (with dilation, which only LibTorch's kernel runs).
Module pools_module() {
  Module m("Pools");
  m.define(R"JIT(
    def forward(self, x: Tensor):
        a = torch.max_pool2d(x, [2, 2])
        b = torch.max_pool2d(x, [3, 3], [2, 2], [1, 1], [1, 1], True)
        c = torch.max_pool2d(x, [3, 2], [1, 2], [1, 0], [2, 1], False)
        d = torch.max_pool2d(x, [3], [2], [1], [1], True)
        e = torch.max_pool2d(x, [2, 3], [3, 1], [0, 1], [1, 1], False)
        return (a, b, c, d, e)
  )JIT");
  return m;
}

// Equal values, NaN where the reference has NaN, the reference's strides.
void check_same(const c10::IValue& got, const c10::IValue& want) {
  const auto g = got.toTuple()->elements(), w = want.toTuple()->elements();
  REQUIRE(g.size() == w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const at::Tensor a = g[i].toTensor(), b = w[i].toTensor();
    INFO("output " << i);
    REQUIRE(a.sizes() == b.sizes());
    CHECK(a.strides() == b.strides());
    CHECK(a.scalar_type() == b.scalar_type());
    CHECK(at::equal(a.isnan(), b.isnan()));
    CHECK(at::equal(a.nan_to_num(0), b.nan_to_num(0)));
  }
}

}  // namespace

TEST_CASE("jit onednn_max_pools: LibTorch's max_pool2d values, in every setting", "[jit]") {
  Module plain = pools_module();
  Module fast = plain.clone(/*inplace=*/true);
  CHECK(jit::onednn_max_pools(fast) == 5);
  CHECK(jit::onednn_max_pools(fast) == 0);  // nothing left to rewrite
  FileCheck()
      .check_count("taoquant::max_pool2d", 5, /*exactly=*/true)
      ->check_not("aten::max_pool2d")
      ->run(*fast.get_method("forward").graph());
  FileCheck().check_count("aten::max_pool2d", 5)->run(*plain.get_method("forward").graph());

  torch::manual_seed(7);
  // 2x16x48x44: above the size where the oneDNN kernel is taken.
  const at::Tensor x = torch::randn({2, 16, 48, 44});
  at::Tensor nan = x.clone(), inf = x.clone();
  nan.index_put_({1, 2, 4, 4}, std::numeric_limits<float>::quiet_NaN());
  inf.index_put_({0, 0, 0, 0}, -std::numeric_limits<float>::infinity());
  inf.index_put_({1, 15, 47, 43}, std::numeric_limits<float>::infinity());
  const std::vector<std::pair<std::string, at::Tensor>> inputs{
      {"NCHW float (oneDNN)", x},
      {"ties (oneDNN)", x.round()},
      {"all equal (oneDNN)", at::full_like(x, -3.0f)},
      {"NaN (LibTorch's kernel: oneDNN skips NaN)", nan},
      {"infinities (LibTorch's kernel)", inf},
      {"small (LibTorch's kernel)", x.narrow(0, 0, 1).narrow(1, 0, 2).contiguous()},
      {"channels-last input", x.contiguous(at::MemoryFormat::ChannelsLast)},
      {"strided view", x.narrow(3, 1, 40)},
      {"unbatched CHW", x[0]},
      {"double", x.to(at::kDouble)},
  };
  torch::NoGradGuard no_grad;
  for (const auto& [what, in] : inputs) {
    INFO(what);
    check_same(fast.forward({in}), plain.forward({in}));
  }
}

TEST_CASE("jit onednn_max_pools: a capture of the Fashion-MNIST CNN gives its output", "[jit]") {
  // capture_layers runs a rewritten copy (layer_taps.cpp); the model's
  // output must be the untouched model's, to the bit.
  Module cnn = torch::jit::load(kModels + "/fmnist/cnn.pt");
  cnn.eval();
  auto inlined = jit::inlined_graph(cnn);
  CHECK(jit::onednn_max_pools(*inlined) == 2);  // the model has two pools
  torch::manual_seed(3);
  const at::Tensor x = torch::rand({32, 1, 28, 28});
  torch::NoGradGuard no_grad;
  const at::Tensor want = cnn.forward({x}).toTensor();
  tq::CaptureOptions opts;
  opts.outputs = true;
  const auto cap = tq::capture_layers(cnn, {x}, opts);
  CHECK(at::equal(cap.model_output.toTensor(), want));
  FileCheck().check_not("taoquant::max_pool2d")->run(*jit::inlined_graph(cnn));
}
