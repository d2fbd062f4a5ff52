// The op-info table: which ops are layers, which pass quantization ranges
// through, and LibTorch's quantized kernels per layer kind.
#include <map>

#include <torch/csrc/jit/ir/ir.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace {

// Ops whose output is quantized like their input (LibTorch's "general ops"
// for static quantization): the observer of their input is the observer of
// their output. Per op: whether it commutes with a positive per-channel
// scale of its input (equalization scales through it), and whether its
// quantized kernel requantizes the result with the input's parameters (a
// clamp bound or an average lands on the grid; shape ops, max pooling and
// relu keep grid values as they are).
struct RangeOp {
  const char* name;
  bool commutes_with_channel_scale;
  bool requantizes;
};
const RangeOp kPassesRanges[] = {
    {"aten::max_pool1d", true, false},
    {"aten::max_pool2d", true, false},
    {"aten::max_pool3d", true, false},
    {"aten::adaptive_max_pool2d", true, false},
    {"aten::avg_pool1d", true, true},
    {"aten::avg_pool2d", true, true},
    {"aten::avg_pool3d", true, true},
    {"aten::adaptive_avg_pool1d", true, true},
    {"aten::adaptive_avg_pool2d", true, true},
    {"aten::adaptive_avg_pool3d", true, true},
    {"aten::flatten", false, false},
    {"aten::reshape", false, false},
    {"aten::view", false, false},
    {"aten::relu", true, false},
    {"aten::relu_", true, false},
    {"aten::dropout", true, false},
    {"aten::dropout_", true, false},
    {"aten::contiguous", true, false},
    {"aten::permute", false, false},
    {"aten::transpose", false, false},
    {"aten::squeeze", false, false},
    {"aten::unsqueeze", false, false},
    {"aten::hardtanh", false, true},
    {"aten::hardtanh_", false, true},
    {"aten::clamp", false, true},
    {"aten::detach", true, false},
    {"aten::mean", false, true},
    {"aten::upsample_nearest2d", false, true},
    {"aten::__getitem__", false, false},
    {"prim::TupleIndex", false, false},
    {"prim::ListUnpack", false, false},
    {"aten::chunk", false, false},
    {"aten::select", false, false},
    {"aten::slice", false, false},
    {"aten::t", false, false},
};

const std::map<std::string, OpInfo>& table() {
  static const std::map<std::string, OpInfo> kTable = [] {
    std::map<std::string, OpInfo> t;
    const std::pair<const char*, std::optional<LayerKind>> layers[] = {
        {"aten::conv1d", LayerKind::kConv1d},
        {"aten::conv2d", LayerKind::kConv2d},
        {"aten::conv3d", LayerKind::kConv3d},
        {"aten::_convolution", std::nullopt},  // traced convs; the rank tells the kind
        {"aten::linear", LayerKind::kLinear},
    };
    for (const auto& [name, kind] : layers) t[name] = {OpRole::kLayer, kind};
    t["aten::conv_transpose1d"] = {OpRole::kTransposedLayer, LayerKind::kConvTranspose1d};
    t["aten::conv_transpose2d"] = {OpRole::kTransposedLayer, LayerKind::kConvTranspose2d};
    t["aten::conv_transpose3d"] = {OpRole::kTransposedLayer, LayerKind::kConvTranspose3d};
    for (const auto& op : kPassesRanges)
      t[op.name] = {OpRole::kPassesRanges, std::nullopt, op.commutes_with_channel_scale,
                    op.requantizes};
    return t;
  }();
  return kTable;
}

}  // namespace

OpInfo op_info(const std::string& qualified_name) {
  auto it = table().find(qualified_name);
  return it == table().end() ? OpInfo{} : it->second;
}

OpInfo op_info(const Node* n) {
  return op_info(n->kind().toQualString());
}

bool is_layer_op(const Node* n) {
  return op_info(n).role == OpRole::kLayer;
}

bool passes_ranges(const Node* n) {
  return op_info(n).role == OpRole::kPassesRanges;
}

std::optional<QuantizedOp> quantized_op(LayerKind kind) {
  switch (kind) {
    case LayerKind::kLinear:
      return QuantizedOp{"quantized::linear_prepack", "quantized::linear", ""};
    case LayerKind::kConv1d:
      return QuantizedOp{"quantized::conv1d_prepack", "quantized::conv1d", ""};
    case LayerKind::kConv2d:
      return QuantizedOp{"quantized::conv2d_prepack", "quantized::conv2d", "new"};
    case LayerKind::kConv3d:
      return QuantizedOp{"quantized::conv3d_prepack", "quantized::conv3d", "new"};
    default:
      return std::nullopt;
  }
}

}  // namespace tq::jit
