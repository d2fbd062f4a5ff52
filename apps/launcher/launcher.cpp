// tao-quant launcher: sets up the process environment that must be in place
// before the dynamic loader and the C library initialise, then runs the
// tool itself (libexec/tao-quant-core). It links no LibTorch, so it costs
// about a millisecond.
//
// What it sets, each only when the user has not set it:
//   GLIBC_TUNABLES += glibc.malloc.hugetlb=1, only with TQ_HUGEPAGES=1:
//       transparent huge pages for the heap. On a VM whose memory has been
//       touched before, it saves page faults (a ResNet-18 quantize: ~110,000
//       -> ~8,000; 25-35% faster on the first development VM). On a VM whose
//       host takes free memory back (virtio-balloon free page reporting, as
//       on Firecracker), a huge page is memory the host must fault in again:
//       there a ResNet-50 quantize used 11.1-14.3 s of CPU with it against
//       10.8-11.8 s without, and a ResNet-18 one 11.2 s once against 4.5-4.8
//       (docs/benchmarks.md). Off by default: 4 KiB pages cost the same on
//       every machine.
//   OPENBLAS_NUM_THREADS=1   LibTorch's intra-op threads are OpenMP's, and
//       each of them calls OpenBLAS for float convolutions and matmuls;
//       Debian's OpenBLAS (pthread build) starts a pool of its own on the
//       same cores, whose idle threads spin in sched_yield (13% of a
//       ResNet-50 quantize's CPU samples). One BLAS thread per caller: a
//       ResNet-50 quantize took 6.3 s instead of 8.1, the Fashion-MNIST CNN
//       1.29 s instead of 1.49 (medians of 4, interleaved; benchmarks.md).
//       OpenBLAS reads it when it loads, before main.
//   OMP_NUM_THREADS = TQ_NUM_THREADS, when that is a thread count (1-4096;
//       the tool itself refuses any other value): the OpenMP runtime then
//       starts with the count the tool would set, so the tool need not call
//       at::set_num_threads, each call of which rebuilds LibTorch's caffe2
//       thread pool, then again on every new thread's first parallel op,
//       and each new pool's worker spins on a core the OpenMP threads want
//       (a Fashion-MNIST CNN quantize: 7% of its CPU samples;
//       docs/benchmarks.md). TQ_NUM_THREADS is tao-quant's own knob and
//       decides LibTorch's count anyway, so it wins over an inherited
//       OMP_NUM_THREADS (`tao-quant batch` gives each job its share).
// TQ_LAUNCHER names this launcher, so that `tao-quant batch` starts its jobs the same way.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../thread_count.h"

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

void add_tunable(const char* setting, const char* key) {
  const char* cur = std::getenv("GLIBC_TUNABLES");
  if (cur && std::strstr(cur, key)) return;  // the user's choice wins
  std::string v = cur && *cur ? std::string(cur) + ":" + setting : std::string(setting);
  ::setenv("GLIBC_TUNABLES", v.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  (void)argc;
  const char* hp = std::getenv("TQ_HUGEPAGES");
  if (hp && std::strcmp(hp, "1") == 0)
    add_tunable("glibc.malloc.hugetlb=1", "glibc.malloc.hugetlb");
  ::setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/0);
  const char* threads = std::getenv("TQ_NUM_THREADS");
  if (tqcli::parse_thread_count(threads) > 0) ::setenv("OMP_NUM_THREADS", threads, /*overwrite=*/1);
  const std::string self = self_exe();
  const auto slash = self.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : self.substr(0, slash);
  const std::string core = dir + "/../" TQ_CORE_RELPATH;
  // `tao-quant batch` runs its jobs through the launcher too.
  if (!self.empty()) ::setenv("TQ_LAUNCHER", self.c_str(), 1);
  ::execv(core.c_str(), argv);
  std::fprintf(stderr, "tao-quant: error: cannot run %s: %s\n", core.c_str(), std::strerror(errno));
  return 1;
}
