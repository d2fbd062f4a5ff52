// One table per enumerable thing. The spec parser, validation, `--help`,
// `tao-quant backends` and the reports all read these tables; nothing else
// spells out the allowed values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "taoquant/strings.h"

namespace tq {

enum class DType { kNative, kInt8, kUInt8, kInt4, kFp8E4M3, kFp8E5M2 };
enum class Mode { kWeightOnly, kStatic, kDynamic };
enum class Granularity { kPerTensor, kPerChannel, kPerGroup };
enum class LayerKind {
  kLinear,
  kConv1d,
  kConv2d,
  kConv3d,
  kConvTranspose1d,
  kConvTranspose2d,
  kConvTranspose3d
};

template <class E>
struct EnumEntry {
  E value;
  std::string_view name;
  std::string_view help;
};

// A named table of entries plus accepted alternative spellings
// (e.g. "float8_e4m3fn" for "fp8_e4m3fn").
template <class E>
struct EnumTable {
  std::string_view what;  // "dtype", "mode", ... (used in messages)
  std::vector<EnumEntry<E>> entries;
  std::vector<std::pair<std::string_view, E>> aliases;

  std::optional<E> parse(std::string_view s) const {
    for (const auto& e : entries)
      if (e.name == s) return e.value;
    for (const auto& [a, v] : aliases)
      if (a == s) return v;
    return std::nullopt;
  }
  std::string_view name(E v) const {
    for (const auto& e : entries)
      if (e.value == v) return e.name;
    return "?";
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : entries) out.emplace_back(e.name);
    return out;
  }
  // "a, b, c"
  std::string joined() const { return join(names()); }
};

// The one table of a spec enum (DType, Mode, Rounding, Granularity,
// LayerKind): all of them stand together in enums.cpp.
template <class E>
const EnumTable<E>& enum_table();

inline const EnumTable<DType>& dtype_table() {
  return enum_table<DType>();
}
inline const EnumTable<Mode>& mode_table() {
  return enum_table<Mode>();
}
inline const EnumTable<Granularity>& granularity_table() {
  return enum_table<Granularity>();
}
inline const EnumTable<LayerKind>& layer_kind_table() {
  return enum_table<LayerKind>();
}

inline std::string_view to_string(DType v) {
  return dtype_table().name(v);
}
inline std::string_view to_string(Mode v) {
  return mode_table().name(v);
}
inline std::string_view to_string(Granularity v) {
  return granularity_table().name(v);
}
inline std::string_view to_string(LayerKind v) {
  return layer_kind_table().name(v);
}

// The names of enum values, in order: {"int8", "uint8"}.
template <class E>
std::vector<std::string> names_of(const std::vector<E>& values) {
  std::vector<std::string> out;
  for (auto v : values) out.emplace_back(to_string(v));
  return out;
}

// Facts about a dtype used by planning, quantization and reports.
struct DTypeTraits {
  int bits = 32;            // storage bits per element (native: 32)
  bool is_float8 = false;   // OCP FP8
  bool is_integer = false;  // int8/uint8/int4
  bool is_signed = true;    // integer formats only
  Granularity default_granularity = Granularity::kPerTensor;
};
DTypeTraits dtype_traits(DType d);

// The granularities that make sense for a dtype used for weights.
std::vector<Granularity> weight_granularities(DType d);

}  // namespace tq
