// What the weight algorithms need to know about a layer's op: its geometry
// (from the inlined graph), its forward with other weights, and the
// Hessian of its inputs (im2col columns for convolutions).
#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/script.h>

#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/weight_algorithms.h"

namespace tq {

namespace {

using torch::jit::Node;
using torch::jit::Value;

// A constant int or int list argument (a prim::Constant, or a list of them).
std::optional<std::vector<int64_t>> const_ints(Value* v, size_t n) {
  if (v->node()->kind() == c10::prim::ListConstruct) {
    std::vector<int64_t> out;
    for (Value* in : v->node()->inputs()) {
      auto c = torch::jit::toIValue(in);
      if (!c || !c->isInt()) return std::nullopt;
      out.push_back(c->toInt());
    }
    return out;
  }
  auto c = torch::jit::toIValue(v);
  if (!c) return std::nullopt;
  if (c->isInt()) return std::vector<int64_t>(n, c->toInt());
  if (c->isIntList()) return c->toIntVector();
  return std::nullopt;
}

// Conv padding: ints, or 'valid' / 'same' (symmetric only).
bool read_padding(Value* v, LayerGeometry& g) {
  const size_t n = static_cast<size_t>(g.spatial_dims);
  if (auto ints = const_ints(v, n)) {
    g.padding = *ints;
    return true;
  }
  auto c = torch::jit::toIValue(v);
  if (!c || !c->isString()) return false;
  g.padding.assign(n, 0);
  if (c->toStringRef() == "valid") return true;
  for (size_t i = 0; i < n; ++i) {
    const int64_t total = g.dilation.at(i) * (g.kernel.at(i) - 1);
    if (total % 2) return false;  // 'same' with an even kernel pads one side more
    g.padding[i] = total / 2;
  }
  return true;
}

// `weight` is the layer's weight tensor (the graph does not know its rank).
LayerGeometry conv_geometry(Node* op, const at::Tensor& weight) {
  LayerGeometry g;
  g.conv = true;
  const bool generic = op->kind().toQualString() == std::string("aten::_convolution");
  if (weight.dim() < 3) {
    g.why = "a convolution weight of rank " + std::to_string(weight.dim());
    return g;
  }
  g.spatial_dims = static_cast<int>(weight.dim()) - 2;
  g.kernel.assign(weight.sizes().begin() + 2, weight.sizes().end());
  const size_t n = static_cast<size_t>(g.spatial_dims);
  auto stride = const_ints(op->input(3), n), dilation = const_ints(op->input(5), n);
  auto groups = torch::jit::toIValue(op->input(generic ? 8 : 6));
  if (generic) {
    auto transposed = torch::jit::toIValue(op->input(6));
    if (!transposed || !transposed->isBool() || transposed->toBool()) {
      g.why = "a transposed convolution";
      return g;
    }
  }
  if (!stride || !dilation || !groups || !groups->isInt()) {
    g.why = "its stride, dilation or groups are not constants in the graph";
    return g;
  }
  g.stride = *stride;
  g.dilation = *dilation;
  g.groups = groups->toInt();
  return g;
}

// The BatchNorm that alone reads `v` (shape reads aside), or "".
std::string batch_norm_reading(Value* v) {
  Node* bn = nullptr;
  for (const auto& u : v->uses()) {
    const std::string k = u.user->kind().toQualString();
    if (k == "aten::size" || k == "aten::dim") continue;
    if (bn || k != "aten::batch_norm" || u.offset != 0) return "";
    bn = u.user;
  }
  auto path = bn ? jit::layer_of(bn) : std::nullopt;
  return path ? *path : "";
}

}  // namespace

std::map<std::string, LayerGeometry> layer_geometries(const torch::jit::Module& model) {
  std::map<std::string, LayerGeometry> out;
  auto graph = jit::inlined_graph(model);
  for (const jit::LayerSite& site : jit::layer_sites(*graph)) {
    if (out.count(site.layer)) continue;
    const std::string kind = site.op->kind().toQualString();
    if (kind == "aten::linear") {
      out[site.layer] = LayerGeometry{};
      continue;
    }
    const at::Tensor w = find_submodule(model, site.layer).attr("weight").toTensor();
    LayerGeometry g = conv_geometry(site.op, w);
    if (g.why.empty()) {
      if (!read_padding(site.op->input(4), g))
        g.why = "its padding is not constant, or pads asymmetrically ('same', even kernel)";
      g.batch_norm_after = batch_norm_reading(site.op->output());
    }
    out[site.layer] = g;
  }
  return out;
}

at::Tensor layer_forward(const LayerGeometry& g, const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& bias) {
  if (!g.conv) return at::linear(x, weight, bias);
  const std::vector<int64_t> zeros(g.padding.size(), 0);
  return at::convolution(x, weight, bias, g.stride, g.padding, g.dilation, false, zeros, g.groups);
}

namespace {

// Samples [s, s + len) of x as im2col columns, [groups, K, len * positions]
// (a Linear's rows are one group of K).
at::Tensor columns(const LayerGeometry& g, const at::Tensor& x, int64_t K, int64_t s, int64_t len) {
  if (!g.conv) return x.reshape({-1, K}).narrow(0, s, len).to(at::kFloat).t().unsqueeze(0);
  // conv1d is a conv2d of height 1; im2col needs [N, C, H, W].
  const bool one = g.spatial_dims == 1;
  auto two = [&](const std::vector<int64_t>& v, int64_t pad) {
    return one ? std::vector<int64_t>{pad, v.at(0)} : v;
  };
  const at::Tensor in = (one ? x.unsqueeze(2) : x).narrow(0, s, len).to(at::kFloat);
  at::Tensor cols =
      at::im2col(in, two(g.kernel, 1), two(g.dilation, 1), two(g.padding, 0), two(g.stride, 1));
  // [N, groups * K, L] -> [groups, K, N * L]
  return cols.view({cols.size(0), g.groups, K, cols.size(2)})
      .permute({1, 2, 0, 3})
      .reshape({g.groups, K, -1});
}

// Calls fn(start, length) over x's samples (rows of a Linear's input) in
// chunks whose columns take about 32 MiB.
template <typename Fn>
void for_each_chunk(const LayerGeometry& g, const at::Tensor& x, int64_t K, Fn&& fn) {
  const int64_t n = g.conv ? x.size(0) : x.numel() / K;
  const int64_t per_sample =
      g.conv ? std::max<int64_t>(1, K * g.groups * (x.numel() / std::max<int64_t>(n, 1)) /
                                        std::max<int64_t>(1, x.size(1)))
             : K;
  const int64_t chunk = std::max<int64_t>(1, (int64_t{8} << 20) / per_sample);
  for (int64_t s = 0; s < n; s += chunk) fn(s, std::min(chunk, n - s));
}

}  // namespace

void accumulate_hessian(const LayerGeometry& g, const at::Tensor& x, at::Tensor& h) {
  const int64_t K = h.size(1);
  for_each_chunk(g, x, K, [&](int64_t s, int64_t len) {
    const at::Tensor c = columns(g, x, K, s, len);
    h += at::bmm(c, c.transpose(1, 2)).to(at::kDouble);
  });
}

void accumulate_paired(const LayerGeometry& g, const at::Tensor& weight, const at::Tensor& x,
                       const at::Tensor& xq, at::Tensor& h, at::Tensor& r) {
  TORCH_CHECK(x.sizes() == xq.sizes(), "accumulate_paired: inputs of shapes ", x.sizes(), " and ",
              xq.sizes());
  const int64_t K = h.size(1), groups = h.size(0);
  const at::Tensor w = weight.to(at::kFloat);
  for_each_chunk(g, xq, K, [&](int64_t s, int64_t len) {
    const at::Tensor c = columns(g, xq, K, s, len);
    h += at::bmm(c, c.transpose(1, 2)).to(at::kDouble);
    // W (x - x~) through the layer's own op: its outputs, [groups, rows / groups, columns].
    at::Tensor d;
    if (g.conv) {
      const at::Tensor dx = (x.narrow(0, s, len) - xq.narrow(0, s, len)).to(at::kFloat);
      d = layer_forward(g, dx, w, at::Tensor());
      d = d.reshape({d.size(0), d.size(1), -1}).permute({1, 0, 2}).reshape({groups, -1, c.size(2)});
    } else {
      const at::Tensor dx =
          (x.reshape({-1, K}).narrow(0, s, len) - xq.reshape({-1, K}).narrow(0, s, len))
              .to(at::kFloat);
      d = at::matmul(dx, w.reshape({w.size(0), K}).t()).t().unsqueeze(0);
    }
    r += at::bmm(d, c.transpose(1, 2)).to(at::kDouble);
  });
}

at::Tensor bias_correction_shift(const LayerGeometry& g, const at::Tensor& mean_input,
                                 const at::Tensor& weight_delta) {
  at::Tensor y = layer_forward(g, mean_input.unsqueeze(0).to(at::kDouble),
                               weight_delta.to(at::kDouble), at::Tensor());
  // Mean over every dimension but the channel's (dim 1 for convs, last for linear).
  const int64_t channel = g.conv ? 1 : y.dim() - 1;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < y.dim(); ++d)
    if (d != channel) dims.push_back(d);
  return -y.mean(dims);
}

}  // namespace tq
