// Max pooling through oneDNN for the float passes tao-quant runs itself
// (jit.h, onednn_max_pools).
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace {

// Where LibTorch's oneDNN max pooling gives max_pool2d's values: a
// contiguous 4-D float tensor, no dilation, no gradient, and large enough
// that the conversions pay (a 1x32x28x28 input: 0.023 ms against 0.056).
bool onednn_fits(const at::Tensor& x, const std::vector<int64_t>& dilation) {
  return at::hasMKLDNN() && x.dim() == 4 && x.scalar_type() == at::kFloat &&
         x.layout() == at::kStrided && x.device().is_cpu() && x.is_contiguous() &&
         x.numel() >= (int64_t{1} << 16) && !(at::GradMode::is_enabled() && x.requires_grad()) &&
         std::all_of(dilation.begin(), dilation.end(), [](int64_t d) { return d == 1; });
}

// aten::max_pool2d, through oneDNN where that gives the same values: a
// maximum is exact, but oneDNN skips NaN where LibTorch's kernel returns it,
// so only an input whose sum is finite (no NaN, no infinity) goes there.
at::Tensor max_pool2d_op(const at::Tensor& x, std::vector<int64_t> kernel,
                         std::vector<int64_t> stride, std::vector<int64_t> padding,
                         std::vector<int64_t> dilation, bool ceil_mode) {
  if (onednn_fits(x, dilation) && std::isfinite(x.sum().item<float>()))
    return at::mkldnn_max_pool2d(x.to_mkldnn(), kernel, stride.empty() ? kernel : stride, padding,
                                 dilation, ceil_mode)
        .to_dense();
  return at::max_pool2d(x, kernel, stride, padding, dilation, ceil_mode);
}

TORCH_LIBRARY_FRAGMENT(taoquant, m) {
  m.def(
      "max_pool2d(Tensor self, int[] kernel_size, int[] stride, int[] padding, int[] dilation, "
      "bool ceil_mode) -> Tensor",
      max_pool2d_op);
}

}  // namespace

size_t onednn_max_pools(Graph& g) {
  static const auto kMaxPool = c10::Symbol::fromQualString("aten::max_pool2d");
  static const auto kCall = c10::Symbol::fromQualString("taoquant::max_pool2d");
  size_t n = 0;
  auto pools = find_nodes(g.block(), [](Node* x) {
    return x->kind() == kMaxPool && x->inputs().size() == 6 && x->outputs().size() == 1;
  });
  for (Node* pool : pools) {
    Node* call = g.create(kCall, pool->inputs(), 1);
    call->insertBefore(pool);
    call->output()->setType(pool->output()->type());
    pool->output()->replaceAllUsesWith(call->output());
    pool->destroy();
    ++n;
  }
  return n;
}

size_t onednn_max_pools(Module& m) {
  return on_every_method(m, [](Graph& g) { return onednn_max_pools(g); });
}

}  // namespace tq::jit
