// The quantized engine of the libtorch backend, and the activation range
// its int8 kernels can compute exactly on this CPU.
#include <ATen/Context.h>

#include <algorithm>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "static_ptq.h"
#include "taoquant/error.h"
#include "taoquant/options.h"
#include "taoquant/strings.h"

namespace tq::libtorch {

std::string select_engine(const QuantizeContext& ctx) {
  const auto& opts = ctx.options();
#if defined(__aarch64__) || defined(__arm__)
  std::string engine = "qnnpack";
#else
  std::string engine = "onednn";
#endif
  if (opts.has("engine")) engine = opts.get_string("engine");
  const std::vector<std::pair<std::string, at::QEngine>> engines = {
      {"onednn", at::QEngine::ONEDNN},
      {"qnnpack", at::QEngine::QNNPACK},
      {"fbgemm", at::QEngine::FBGEMM}};
  const auto& sup = at::globalContext().supportedQEngines();
  std::vector<std::string> supported;
  for (const auto& [name, e] : engines) {
    if (std::find(sup.begin(), sup.end(), e) == sup.end()) continue;
    supported.push_back(name);
    if (name == engine) {
      at::globalContext().setQEngine(e);
      return engine;
    }
  }
  throw SpecError(opts.loc("engine"), BackendOptions::key("engine") + ": '" + engine +
                                          "' is not available in this LibTorch (available: " +
                                          join(supported) + ")" + did_you_mean(engine, supported));
}

bool cpu_has_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  // AVX512_VNNI: leaf 7 sub-leaf 0, ECX bit 11. AVX_VNNI: leaf 7 sub-leaf 1, EAX bit 4.
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11))) return true;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4))) return true;
  return false;
#else
  return true;  // not an x86 kernel question
#endif
}

ActivationRange activation_range(const QuantizeContext& ctx, const std::string& engine) {
  const std::string v = ctx.options().get_string("activation_range");
  if (v == "full") return {false, false, "full: 8-bit uint8 (backend_kwargs.activation_range)"};
  if (v == "reduced")
    return {true, false, "reduced: 7-bit uint8 (backend_kwargs.activation_range)"};
#if defined(__x86_64__) || defined(__i386__)
  // oneDNN and FBGEMM multiply uint8 activations by int8 weights with
  // vpmaddubsw where the CPU has no VNNI: pairs of products are summed in
  // int16 with saturation, so 8-bit activations overflow and the artifact
  // is silently wrong (the EfficientNet-style net: 87.43 -> 86.33 top-1 on
  // an AVX2 EPYC; with 7-bit activations 87.13). PyTorch's x86 qconfig uses
  // reduce_range for the same reason.
  if ((engine == "onednn" || engine == "fbgemm") && !cpu_has_vnni())
    return {true, true,
            "reduced: 7-bit uint8 (auto: this CPU has no VNNI, where " + engine +
                "'s uint8 x int8 kernels saturate 8-bit activations)"};
#endif
  return {false, true, "full: 8-bit uint8 (auto: " + engine + "'s int8 kernels are exact here)"};
}

}  // namespace tq::libtorch
