// The last check before a result is published (issue 30): no artifact with
// a non-finite weight, bias, scale, or output on the held-out batch.
#include <filesystem>

#include <ATen/ATen.h>
#include <torch/script.h>

#include "taoquant/model.h"

namespace tq {

namespace {

// "NaN" or "inf" when `t` (any dtype) holds a non-finite value, else "".
std::string non_finite(const at::Tensor& t) {
  if (!t.defined()) return "";
  if (t.is_quantized()) {
    const at::Tensor scales =
        t.qscheme() == c10::kPerTensorAffine || t.qscheme() == c10::kPerTensorSymmetric
            ? at::full({1}, t.q_scale(), at::kDouble)
            : t.q_per_channel_scales();
    return non_finite(scales);
  }
  if (!t.is_floating_point() || t.isfinite().all().item<bool>()) return "";
  return t.isnan().any().item<bool>() ? "NaN" : "inf";
}

// Where a non-finite value is: the tensor's name and what it holds.
struct Found {
  std::string name, kind;  // kind empty: nothing found
};

// The first non-finite tensor in `v`: tensors, containers, and packed int8
// params through their `unpack` method (weight and bias).
Found first_non_finite(const c10::IValue& v, const std::string& name) {
  if (v.isTensor()) return {name, non_finite(v.toTensor())};
  std::vector<c10::IValue> items;
  if (v.isTuple()) items = v.toTupleRef().elements().vec();
  if (v.isList()) items = v.toListRef().vec();
  if (v.isGenericDict())
    for (const auto& e : v.toGenericDict()) items.push_back(e.value());
  if (v.isObject() && !v.toObjectRef().type()->is_module()) {
    torch::jit::Object obj(v.toObject());
    if (obj.find_method("unpack")) items.push_back(obj.run_method("unpack"));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string part = items.size() > 1 ? "[" + std::to_string(i) + "]" : "";
    Found f = first_non_finite(items[i], name + part);
    if (!f.kind.empty()) return f;
  }
  return {};
}

std::string artifact_problem(const std::string& path, const std::vector<at::Tensor>& holdout) {
  torch::jit::Module m = torch::jit::load(path, torch::kCPU);
  for (const auto& a : m.named_attributes(/*recurse=*/true)) {
    if (a.value.isObject() && a.value.toObjectRef().type()->is_module()) continue;
    // A code table (`*_lut`: fp8's holds NaN codes by design) is not a
    // value the model computes with; the weights decoded from it are.
    const auto& n = a.name;
    if (n.size() >= 4 && n.compare(n.size() - 4, 4, "_lut") == 0) continue;
    const Found f = first_non_finite(a.value, a.name);
    if (!f.kind.empty()) return "tensor '" + f.name + "' holds " + f.kind;
  }
  if (holdout.empty()) return "";
  m.eval();
  torch::NoGradGuard no_grad;
  const Found f = first_non_finite(
      m.forward(std::vector<c10::IValue>(holdout.begin(), holdout.end())), "output");
  if (f.kind.empty()) return "";
  return "its " + f.name + " on the held-out calibration batch holds " + f.kind;
}

}  // namespace

void check_artifact_finite(const std::string& path, const std::vector<at::Tensor>& holdout,
                           const std::string& backend) {
  const std::string problem = artifact_problem(path, holdout);
  if (problem.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path, ec);
  throw RuntimeError("the artifact written by backend '" + backend +
                     "' has a non-finite value: " + problem +
                     "; it was not published (the earlier result, if any, is kept; a float "
                     "model or data that is already non-finite there gives this too)");
}

}  // namespace tq
