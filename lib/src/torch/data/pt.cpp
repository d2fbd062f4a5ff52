// .pt files written by torch.save: a tensor, a list/tuple of tensors or a
// dict of tensors. torch.save's format is one pickle, so the file is read
// whole (documented in docs/evaluate.md).
#include <fstream>
#include <iterator>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include "data_impl.h"

namespace tq::data {

namespace {

std::string kind_of(const c10::IValue& v) {
  return v.tagKind();
}

}  // namespace

PtContents read_pt_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw RuntimeError("cannot open '" + path + "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 4 || bytes[0] != 'P' || bytes[1] != 'K')
    throw RuntimeError("'" + path +
                       "' is not a torch.save file (zip format; files written with "
                       "_use_new_zipfile_serialization=False are not supported)");
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw RuntimeError("cannot read '" + path +
                       "' as a torch.save file: " + first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw RuntimeError("cannot read '" + path + "' as a torch.save file: " + first_line(e.what()));
  }
  PtContents out;
  out.path = path;
  auto want_tensor = [&](const c10::IValue& x, const std::string& name) {
    if (!x.isTensor())
      throw RuntimeError(
          path + ": element " + name + " is a " + kind_of(x) +
          ", expected a tensor (save a tensor, a list/tuple of tensors or a dict of tensors)");
    return x.toTensor();
  };
  if (v.isTensor()) {
    out.is_sequence = true;
    out.named.emplace_back("0", v.toTensor());
  } else if (v.isTuple() || v.isList()) {
    out.is_sequence = true;
    std::vector<c10::IValue> items;
    if (v.isTuple())
      items = v.toTupleRef().elements().vec();
    else
      items = v.toListRef().vec();
    for (size_t i = 0; i < items.size(); ++i)
      out.named.emplace_back(std::to_string(i), want_tensor(items[i], std::to_string(i)));
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) {
      if (!kv.key().isString())
        throw RuntimeError(path + ": dict key of type " + kind_of(kv.key()) +
                           "; expected string keys");
      const std::string k = kv.key().toStringRef();
      if (kv.value().isTensor()) out.named.emplace_back(k, kv.value().toTensor());
    }
  } else {
    throw RuntimeError(path + ": holds a " + kind_of(v) +
                       "; expected a tensor, a list/tuple of tensors or a dict of tensors");
  }
  if (out.named.empty()) throw RuntimeError(path + ": holds no tensors");
  return out;
}

}  // namespace tq::data
