#include "taoquant/enums.h"

#include <tuple>

#include "taoquant/algorithms.h"
#include "taoquant/error.h"

namespace tq {

namespace {

// Every enum table, in one place.
using EnumTables = std::tuple<EnumTable<DType>, EnumTable<Mode>, EnumTable<Rounding>,
                              EnumTable<Granularity>, EnumTable<LayerKind>>;

const EnumTables& tables() {
  static const EnumTables t{
      EnumTable<DType>{
          "dtype",
          {{DType::kInt8, "int8", "8-bit signed integer, symmetric by default"},
           {DType::kUInt8, "uint8", "8-bit unsigned integer, affine (zero point)"},
           {DType::kInt4, "int4", "4-bit signed integer, per-group scales, packed two per byte"},
           {DType::kFp8E4M3, "fp8_e4m3fn", "OCP FP8 E4M3FN (max 448, no infinities)"},
           {DType::kFp8E5M2, "fp8_e5m2", "OCP FP8 E5M2 (max 57344)"},
           {DType::kNative, "native", "leave in the model's float type"}},
          {{"float8_e4m3fn", DType::kFp8E4M3}, {"float8_e5m2", DType::kFp8E5M2}}},
      EnumTable<Mode>{
          "mode",
          {{Mode::kWeightOnly, "weight_only_ptq", "quantize weights only; no calibration data"},
           {Mode::kStatic, "static_ptq", "weights and activations; needs calibration data"},
           {Mode::kDynamic, "dynamic_ptq", "weights offline, activations at run time"}},
          {}},
      EnumTable<Rounding>{
          "rounding",
          {{Rounding::kNearest, "nearest", "round each weight to the nearest grid value"},
           {Rounding::kGptq, "gptq",
            "GPTQ: round column by column, moving each error onto the columns left, weighted by "
            "the inverse Hessian of the layer's calibration inputs"}},
          {}},
      EnumTable<Granularity>{
          "granularity",
          {{Granularity::kPerTensor, "per_tensor", "one scale for the tensor"},
           {Granularity::kPerChannel, "per_channel", "one scale per output channel"},
           {Granularity::kPerGroup, "per_group", "one scale per group of group_size weights"}},
          {}},
      EnumTable<LayerKind>{"layer kind",
                           {{LayerKind::kLinear, "Linear", "fully connected"},
                            {LayerKind::kConv1d, "Conv1d", ""},
                            {LayerKind::kConv2d, "Conv2d", ""},
                            {LayerKind::kConv3d, "Conv3d", ""},
                            {LayerKind::kConvTranspose1d, "ConvTranspose1d", ""},
                            {LayerKind::kConvTranspose2d, "ConvTranspose2d", ""},
                            {LayerKind::kConvTranspose3d, "ConvTranspose3d", ""}},
                           {}}};
  return t;
}

}  // namespace

template <class E>
const EnumTable<E>& enum_table() {
  return std::get<EnumTable<E>>(tables());
}

template const EnumTable<DType>& enum_table();
template const EnumTable<Mode>& enum_table();
template const EnumTable<Rounding>& enum_table();
template const EnumTable<Granularity>& enum_table();
template const EnumTable<LayerKind>& enum_table();

DTypeTraits dtype_traits(DType d) {
  switch (d) {
    case DType::kNative:
      return {32, false, false, true, Granularity::kPerTensor};
    case DType::kInt8:
      return {8, false, true, true, Granularity::kPerChannel};
    case DType::kUInt8:
      return {8, false, true, false, Granularity::kPerChannel};
    case DType::kInt4:
      return {4, false, true, true, Granularity::kPerGroup};
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return {8, true, false, true, Granularity::kPerTensor};
  }
  return {};
}

std::vector<Granularity> weight_granularities(DType d) {
  switch (d) {
    case DType::kNative:
      return {};
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt4:
      return {Granularity::kPerTensor, Granularity::kPerChannel, Granularity::kPerGroup};
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return {Granularity::kPerTensor, Granularity::kPerChannel};
  }
  return {};
}

}  // namespace tq
