#include "compact_weights.h"

#include <cstring>
#include <sstream>

#include <torch/script.h>

#include "taoquant/jit.h"
#include "taoquant/model.h"
#include "taoquant/weight_quant.h"

namespace tq::libtorch {

namespace {

constexpr const char* kPrefix = "_tq_";

// Decoding, shared by every patched type. meta = [bits, granularity (0 tensor,
// 1 channel, 2 group), axis, group_size, groups_per_row, shape...].
constexpr const char* kDecodeSource = R"JIT(
def _tq_decode(self, codes: Tensor, scale: Tensor, zp: Tensor, lut: Tensor, meta: List[int], like: Tensor) -> Tensor:
    bits = meta[0]
    gran = meta[1]
    axis = meta[2]
    gs = meta[3]
    gpr = meta[4]
    shape = meta[5:]
    n = 1
    for d in shape:
        n = n * d
    c = codes.long()
    if bits == 4:
        c = torch.stack([c & 15, c >> 4], 1).reshape([-1])
    v = torch.index_select(lut, 0, c)
    if gran == 2:
        rows = shape[0]
        v = v[: rows * gpr * gs].reshape([rows, gpr, gs])
        if zp.numel() > 0:
            v = v - zp.reshape([rows, gpr, 1])
        v = v * scale.reshape([rows, gpr, 1])
        v = v.reshape([rows, gpr * gs])[:, : n // rows]
    else:
        v = v[:n].reshape(shape)
        bshape = [1 for _ in shape]
        if gran == 1:
            bshape[axis] = shape[axis]
        if zp.numel() > 0:
            v = v - zp.reshape(bshape)
        v = v * scale.reshape(bshape)
    return v.reshape(shape).to(like.dtype).contiguous()
)JIT";

bool is_tq_attr(const std::string& n) {
  return n.rfind(kPrefix, 0) == 0;
}

// getstate/setstate for one module type, carrying every attribute.
std::string state_source(const c10::ClassTypePtr& type) {
  std::vector<std::string> names, annots, nones;
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const auto& n = type->getAttributeName(i);
    if (is_tq_attr(n)) continue;
    auto t = type->getAttribute(i);
    if (t->kind() == c10::TypeKind::NoneType) {
      nones.push_back(n);
      continue;
    }
    names.push_back(n);
    annots.push_back(t->annotation_str());
  }
  const std::vector<std::string> extra = {"_tq_codes", "_tq_scale", "_tq_zp", "_tq_lut",
                                          "_tq_meta"};
  const std::vector<std::string> extra_types = {"Tensor", "Tensor", "Tensor", "Tensor",
                                                "List[int]"};
  std::ostringstream g, s;
  g << "def __getstate__(self):\n    return (";
  s << "def __setstate__(self, state: Tuple[";
  size_t k = 0;
  for (size_t i = 0; i < names.size(); ++i, ++k) {
    g << (k ? ", " : "") << (names[i] == "weight" ? "self._tq_saved_weight()" : "self." + names[i]);
    s << (k ? ", " : "") << annots[i];
  }
  for (size_t i = 0; i < extra.size(); ++i, ++k) {
    g << (k ? ", " : "") << "self." << extra[i];
    s << (k ? ", " : "") << extra_types[i];
  }
  g << ")\n\n";
  s << "]):\n";
  size_t weight_index = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "weight") {
      weight_index = i;
      continue;
    }
    s << "    self." << names[i] << " = state[" << i << "]\n";
  }
  for (const auto& n : nones) s << "    self." << n << " = None\n";
  for (size_t i = 0; i < extra.size(); ++i)
    s << "    self." << extra[i] << " = state[" << names.size() + i << "]\n";
  s << "    w = state[" << weight_index << "]\n"
    << "    if len(self._tq_meta) > 0:\n"
    << "        w = self._tq_decode(self._tq_codes, self._tq_scale, self._tq_zp, self._tq_lut, "
       "self._tq_meta, w)\n"
    << "    self.weight = w\n";
  std::string saved =
      "def _tq_saved_weight(self) -> Tensor:\n"
      "    if len(self._tq_meta) > 0:\n"
      "        return self.weight.new_empty([0])\n"
      "    return self.weight\n\n";
  return saved + g.str() + s.str();
}

at::Tensor to_tensor_u8(const std::vector<uint8_t>& v) {
  auto t = torch::empty({static_cast<int64_t>(v.size())}, torch::kUInt8);
  if (!v.empty()) std::memcpy(t.data_ptr<uint8_t>(), v.data(), v.size());
  return t;
}

at::Tensor to_tensor_f32(const std::vector<float>& v) {
  auto t = torch::empty({static_cast<int64_t>(v.size())}, torch::kFloat);
  if (!v.empty()) std::memcpy(t.data_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

void set_tq_attrs(torch::jit::Module& m, const wformat::QuantizedWeight* q) {
  c10::List<int64_t> meta;
  at::Tensor codes = torch::empty({0}, torch::kUInt8), scale = torch::empty({0}),
             zp = torch::empty({0}), lut = torch::empty({0});
  if (q) {
    int bits = q->format.dtype == DType::kInt4 ? 4 : 8;
    int gran = q->format.granularity == Granularity::kPerTensor    ? 0
               : q->format.granularity == Granularity::kPerChannel ? 1
                                                                   : 2;
    meta = c10::List<int64_t>({bits, gran, q->format.axis, q->group_size, q->groups_per_row});
    for (auto d : q->shape) meta.push_back(d);
    codes = to_tensor_u8(q->codes);
    scale = to_tensor_f32(q->scales);
    zp = to_tensor_f32(q->zero_points);
    lut = to_tensor_f32(q->lut);
  }
  m.register_attribute("_tq_codes", c10::TensorType::get(), codes, false, true);
  m.register_attribute("_tq_scale", c10::TensorType::get(), scale, false, true);
  m.register_attribute("_tq_zp", c10::TensorType::get(), zp, false, true);
  m.register_attribute("_tq_lut", c10::TensorType::get(), lut, false, true);
  m.register_attribute("_tq_meta", c10::ListType::ofInts(), meta);
}

}  // namespace

std::string compact_blocker(const torch::jit::Module& model, const std::string& layer_name) {
  auto m = find_submodule(model, layer_name);
  const auto& type = m.type();
  if (type->findMethod("__getstate__") && !type->findMethod("_tq_decode"))
    return "module type defines its own __getstate__";
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    auto t = type->getAttribute(i);
    if (t->kind() == c10::TypeKind::ClassType)
      return "module has submodule or object attribute '" + type->getAttributeName(i) + "'";
  }
  return "";
}

size_t install_compact_weight(torch::jit::Module& model, const std::string& layer_name,
                              const wformat::QuantizedWeight& q) {
  auto target = find_submodule(model, layer_name);
  c10::ClassType* type = target.type().get();
  // Types are shared between instances: the first time a type is patched,
  // every instance gets the attributes (empty = not quantized) and the type
  // gets the decode and state methods.
  if (!type->hasAttribute("_tq_meta")) {
    for (auto& inst : jit::module_instances(model))
      if (inst.module.type().get() == type) set_tq_attrs(inst.module, nullptr);
  }
  if (!type->findMethod("_tq_decode")) {
    target.define(kDecodeSource);
    target.define(state_source(target.type()));
  }
  set_tq_attrs(target, &q);
  set_weight_values(target, q.dequant);
  return q.bytes() + q.lut.size() * sizeof(float);
}

}  // namespace tq::libtorch
