// This machine's facts for the timing cache: CPU model, the SIMD flags the
// int8 kernels dispatch on, intra-op threads, LibTorch version.
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "taoquant/strings.h"
#include "taoquant/timing_cache.h"

namespace tq {

namespace {

// The flags that select the quantized kernels (x86: fbgemm/oneDNN; ARM:
// qnnpack/XNNPACK). Other flags (virtualization, security) do not change
// timings and would make a cache needlessly foreign.
bool kernel_flag(const std::string& f) {
  static const std::set<std::string> kFlags = {
      "sse4_1",   "sse4_2",   "avx",      "avx2",     "fma",         "f16c",        "avx512f",
      "avx512bw", "avx512vl", "avx512dq", "avx_vnni", "avx512_vnni", "avx512_bf16", "amx_int8",
      "amx_bf16", "asimd",    "asimddp",  "i8mm",     "sve",         "sve2",        "bf16"};
  return kFlags.count(f) > 0;
}

std::string after_colon(const std::string& line) {
  auto p = line.find(':');
  if (p == std::string::npos) return "";
  std::string v = line.substr(p + 1);
  v.erase(0, v.find_first_not_of(" \t"));
  return v;
}

}  // namespace

TimingEnv TimingEnv::this_machine() {
  TimingEnv e;
  e.libtorch = TORCH_VERSION;
  e.threads = at::get_num_threads();
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    const bool is_model = line.rfind("model name", 0) == 0 || line.rfind("Hardware", 0) == 0;
    const bool is_flags = line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0;
    if (is_model && model.empty()) model = after_colon(line);
    if (is_flags && flags.empty()) flags = after_colon(line);
    if (!model.empty() && !flags.empty()) break;
  }
  e.cpu = model.empty() ? "unknown" : model;
  std::set<std::string> kept;
  std::istringstream fs(flags);
  for (std::string f; fs >> f;)
    if (kernel_flag(f)) kept.insert(f);
  e.isa = join(std::vector<std::string>(kept.begin(), kept.end()), " ");
  return e;
}

}  // namespace tq
