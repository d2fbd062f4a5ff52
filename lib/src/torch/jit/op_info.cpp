// The op-info table: which ops are layers, which pass quantization ranges
// through, and LibTorch's quantized kernels per layer kind.
#include <map>

#include <torch/csrc/jit/ir/ir.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace {

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
    // Ops whose output is quantized like their input (LibTorch's "general
    // ops" for static quantization): the observer of their input is the
    // observer of their output.
    for (const char* name : {"aten::max_pool1d",
                             "aten::max_pool2d",
                             "aten::max_pool3d",
                             "aten::adaptive_max_pool2d",
                             "aten::avg_pool1d",
                             "aten::avg_pool2d",
                             "aten::avg_pool3d",
                             "aten::adaptive_avg_pool1d",
                             "aten::adaptive_avg_pool2d",
                             "aten::adaptive_avg_pool3d",
                             "aten::flatten",
                             "aten::reshape",
                             "aten::view",
                             "aten::relu",
                             "aten::relu_",
                             "aten::dropout",
                             "aten::dropout_",
                             "aten::contiguous",
                             "aten::permute",
                             "aten::transpose",
                             "aten::squeeze",
                             "aten::unsqueeze",
                             "aten::hardtanh",
                             "aten::hardtanh_",
                             "aten::clamp",
                             "aten::detach",
                             "aten::mean",
                             "aten::upsample_nearest2d",
                             "aten::__getitem__",
                             "prim::TupleIndex",
                             "prim::ListUnpack",
                             "aten::chunk",
                             "aten::select",
                             "aten::slice",
                             "aten::t"})
      t[name] = {OpRole::kPassesRanges, std::nullopt};
    for (const char* name :
         {"aten::relu", "aten::relu_", "aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d",
          "aten::adaptive_max_pool2d", "aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d",
          "aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d",
          "aten::dropout", "aten::dropout_", "aten::contiguous", "aten::detach"})
      t[name].commutes_with_channel_scale = true;
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
