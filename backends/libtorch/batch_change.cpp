// The batch-change probe (issue 31): LibTorch 1.13's onednn int8 kernels
// pack a layer's weight in the blocked layout chosen for a dummy input; the
// first call caches a primitive for its batch size, and a later call at
// another batch size reorders the packed weight to the layout chosen for
// that size. oneDNN has no reorder between some pairs of blocked layouts
// ("could not create a primitive descriptor for a reorder primitive"; fixed
// upstream by PyTorch #86876, through the plain layout). Which layers fail
// depends on the layer's shape, its input's spatial size, the thread count
// and the CPU (measured on AVX-512 VNNI: 1x1 convolutions such as 64 -> 192
// channels on 13x13, 64 -> 576 on 14x14, at 2 threads; never at 1), so no
// rule predicts it: each int8 layer is run alone, packed afresh as a fresh
// load packs it, at batch 1, then each larger batch size and 1 again.
// Layers alike in everything a kernel is chosen by (op, weight shape and
// granularity, geometry, bias, input shape, whether the input has a zero
// point) share one run: ResNet-50's 53 int8 convolutions are 21 such runs.
//
// Where the failure cannot happen, nothing is run: the layout a weight is
// reordered to changes with the batch size only in oneDNN 2.6's AVX-512
// int8 kernels (brgemm convolutions and inner products pick their blocking
// by the batch). Below AVX-512 its int8 convolutions are jit_uni_x8s8s32x
// (avx2, sse41), whose weight layout is fixed by the ISA, groups and rank,
// and gemm_x8s8s32x (plain): the packed weight is never reordered
// (oneDNN v2.6.3 src/cpu/cpu_convolution_list.cpp; measured with
// scripts/diag/onednn_weight_layouts.py).
#include <dlfcn.h>

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "latency.h"
#include "layer_kernel.h"
#include "static_session.h"
#include "taoquant/latency.h"
#include "taoquant/strings.h"

namespace tq::libtorch {

namespace {

// oneDNN as LibTorch loaded it, through its C API (no headers, no link):
// its version and the ISA it runs with (which ONEDNN_MAX_CPU_ISA may lower).
// Unknown (-1) where the symbols are not visible, e.g. a LibTorch with
// oneDNN linked in and hidden.
OnednnRuntime loaded_onednn() {
  struct Version {  // dnnl_version_t
    int major, minor, patch;
    const char* hash;
    unsigned cpu_runtime, gpu_runtime;
  };
  OnednnRuntime r;
  using VersionFn = const Version* (*)();
  using IsaFn = int (*)();
  auto version = reinterpret_cast<VersionFn>(::dlsym(RTLD_DEFAULT, "dnnl_version"));
  auto isa = reinterpret_cast<IsaFn>(::dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa"));
  if (!version || !isa) return r;
  if (const Version* v = version()) r.version = {v->major, v->minor, v->patch};
  r.isa = isa();
  return r;
}

// The thread counts a deployment is likely to run at: this run's (at least
// 2: one thread never showed the defect) and every core of this machine.
std::vector<int> probe_threads() {
  std::set<int> t = {std::max(2, at::get_num_threads())};
  t.insert(std::max(2, static_cast<int>(std::thread::hardware_concurrency())));
  return {t.begin(), t.end()};
}

// Batch 1, then each size and 1 again; "" when every call ran, else what
// failed.
std::string run_sequence(const Int8Layer& l, const LayerKernel& kernel,
                         const std::vector<int64_t>& sizes, int threads) {
  int64_t prev = 1, bs = 1;
  try {
    const at::Tensor xq = quantize_input(l.x, l.input);  // once: its codes make every size
    (void)run_quantized(kernel, resize_quantized_batch(xq, 1), l.input);
    for (int64_t n : sizes) {
      for (int64_t b : {n, int64_t{1}}) {
        bs = b;
        (void)run_quantized(kernel, resize_quantized_batch(xq, b), l.input);
        prev = b;
      }
    }
  } catch (const std::exception& e) {
    return "run alone on its " + shape_text(l.x) + " input at " + std::to_string(threads) +
           " threads, it failed at batch " + std::to_string(bs) + " after batch " +
           std::to_string(prev) + ": " + first_line(e.what());
  }
  return "";
}

// What oneDNN chooses a layer's kernel and weight layout by.
std::string kernel_signature(const Int8Layer& l) {
  const bool zero_point = !l.input.zero_point.empty() && l.input.zero_point.front() != 0;
  return l.key + "/x=" + shape_text(l.x) + (zero_point ? "/zp" : "");
}

struct RestoreThreads {
  int n = at::get_num_threads();
  ~RestoreThreads() {
    if (at::get_num_threads() != n) at::set_num_threads(n);
  }
};

// The int8 layers whose kernel fails the sequence: (layer, reason).
// `probed` gets what was run: engine, thread counts, batch sizes, and an
// empty `kept_float` for the caller to fill.
std::vector<std::pair<std::string, std::string>> batch_change_layers(QuantizeContext& ctx,
                                                                     StaticSession& s,
                                                                     nlohmann::json& probed) {
  std::set<int64_t> larger(s.latency_batch_sizes.begin(), s.latency_batch_sizes.end());
  if (!s.holdout.empty() && s.holdout.front().dim() > 0) larger.insert(s.holdout.front().size(0));
  larger.erase(larger.begin(), larger.upper_bound(1));
  const std::vector<int64_t> sizes(larger.begin(), larger.end());
  const std::vector<int> threads = probe_threads();
  probed = {{"engine", ctx.backend_meta.value("engine", "")},
            {"threads", threads},
            {"batch_sizes", sizes},
            {"kept_float", nlohmann::json::array()}};
  std::vector<std::pair<std::string, std::string>> out;
  if (sizes.empty()) return out;
  if (const std::string why_not = batch_change_impossible(loaded_onednn()); !why_not.empty()) {
    probed = {{"engine", probed["engine"]},
              {"skipped", why_not},
              {"kernel_runs", 0},
              {"kept_float", nlohmann::json::array()}};
    spdlog::debug("static_ptq: batch-change probe skipped: {}", why_not);
    return out;
  }
  RestoreThreads restore;
  std::set<std::string> failed;
  size_t runs = 0;
  for (int t : threads) {
    // Only when it changes: each call rebuilds LibTorch's caffe2 thread
    // pool, whose new worker spins on a core (apps/tao-quant/main.cpp).
    if (at::get_num_threads() != t) at::set_num_threads(t);
    std::map<std::string, std::string> seen;  // signature -> its run's failure ("": ran)
    auto probe = [&](const Int8Layer& l) {
      if (failed.count(l.name)) return;
      const std::string sig = kernel_signature(l);
      auto it = seen.find(sig);
      if (it == seen.end()) {
        // Packed only here: a layer alike one already run needs no kernel.
        const LayerKernel& kernel = l.kernel();  // Untimed: not a batch-change failure
        it = seen.emplace(sig, run_sequence(l, kernel, sizes, t)).first;
        ++runs;
      }
      const std::string& why = it->second;
      if (why.empty()) return;
      failed.insert(l.name);
      out.emplace_back(l.name,
                       "LibTorch 1.13's onednn int8 kernel of this layer fails when the batch "
                       "size changes (" +
                           why +
                           "): kept float so that the artifact runs at every batch size "
                           "(docs/reliability.md#batch-size-changes)");
    };
    for_each_int8_layer(ctx.plan, s.folded, s.linears.layer_inputs, *s.table, s.capture().inputs,
                        probe);
  }
  probed["kernel_runs"] = runs;
  return out;
}

}  // namespace

std::string batch_change_impossible(const OnednnRuntime& r) {
  // dnnl_cpu_isa_t of oneDNN 2.6 below AVX-512: sse41, avx, avx2, avx2_vnni.
  static const std::map<int, const char*> kFixedLayoutIsas = {
      {0x1, "sse41"}, {0x3, "avx"}, {0x7, "avx2"}, {0x407, "avx2_vnni"}};
  const auto it = kFixedLayoutIsas.find(r.isa);
  if (r.version[0] != 2 || r.version[1] != 6 || it == kFixedLayoutIsas.end()) return "";
  return "oneDNN " + std::to_string(r.version[0]) + "." + std::to_string(r.version[1]) + "." +
         std::to_string(r.version[2]) + " runs its " + it->second +
         " int8 kernels here, whose weight layout is the same at every batch size: no weight is "
         "reordered when the batch size changes (docs/reliability.md#batch-size-changes)";
}

// Whatever latency_check says: a crash in deployment is not a question of
// speed.
void keep_batch_change_safe(QuantizeContext& ctx, StaticSession& s) {
  nlohmann::json probed = nullptr;  // another engine: nothing to probe
  if (ctx.backend_meta.value("engine", "") == "onednn") {
    const auto failing = batch_change_layers(ctx, s, probed);
    s.steps->step("batch-change probe");
    if (!failing.empty()) {
      std::string names;
      for (const auto& [name, why] : failing) {
        s.keep_float.insert(name);
        s.reasons[name] = why;
        probed["kept_float"].push_back(name);
        names += (names.empty() ? "" : ", ") + name;
      }
      ctx.warn("static_ptq: " + std::to_string(failing.size()) + " layer(s) kept float (" + names +
               "): LibTorch 1.13's onednn int8 kernels fail them when the batch size changes in "
               "one process; the rest stays int8 (docs/reliability.md#batch-size-changes)");
      observe_and_run(ctx, s);  // re-observe without them
    }
  }
  ctx.backend_meta["batch_change"] = probed;
}

}  // namespace tq::libtorch
