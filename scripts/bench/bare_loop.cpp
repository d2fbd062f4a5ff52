// tq_bench_bare_loop: the baseline for scripts/bench/evaluate_overhead.sh.
// Top-1 of a TorchScript model with nothing but LibTorch: the inputs and
// labels are read into memory first (untimed), then a plain loop of forward +
// argmax + count is timed.
//
// Usage: tq_bench_bare_loop MODEL.pt X.npy Y.npy [--batch 64] [--threads 2]
// Prints one JSON object: {"loop_s", "load_s", "correct", "num_samples",
// "batch", "threads", "throughput"}.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/script.h>

namespace {

// A little-endian, C-order .npy with dtype `want` ("<f4" or "<i8").
torch::Tensor read_npy(const std::string& path, const std::string& want) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  char pre[8];
  f.read(pre, 8);
  if (!f || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path + ": not an .npy file");
  uint32_t hlen = 0;
  unsigned char lb[4] = {0, 0, 0, 0};
  f.read(reinterpret_cast<char*>(lb), pre[6] == 1 ? 2 : 4);
  hlen = lb[0] | (lb[1] << 8) | (lb[2] << 16) | (static_cast<uint32_t>(lb[3]) << 24);
  std::string h(hlen, '\0');
  f.read(h.data(), hlen);
  if (h.find("'descr': '" + want + "'") == std::string::npos ||
      h.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path + ": expected dtype " + want + " in C order, header: " + h);
  auto open = h.find('(', h.find("'shape'"));
  auto close = h.find(')', open);
  std::vector<int64_t> shape;
  std::string dims = h.substr(open + 1, close - open - 1);
  for (char* p = dims.data(); *p;) {
    char* e = nullptr;
    long long v = std::strtoll(p, &e, 10);
    if (e == p) {
      ++p;
      continue;
    }
    shape.push_back(v);
    p = e;
  }
  auto t = torch::empty(shape, want == "<f4" ? torch::kFloat : torch::kLong);
  f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!f) throw std::runtime_error(path + ": truncated");
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: tq_bench_bare_loop MODEL.pt X.npy Y.npy [--batch 64] [--threads 2]\n";
    return 2;
  }
  int64_t batch = 64;
  int threads = 0;
  for (int i = 4; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--batch")
      batch = std::atoll(argv[i + 1]);
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  if (threads > 0) at::set_num_threads(threads);
  using Clock = std::chrono::steady_clock;
  try {
    auto t0 = Clock::now();
    auto model = torch::jit::load(argv[1], torch::kCPU);
    model.eval();
    torch::Tensor x = read_npy(argv[2], "<f4");
    torch::Tensor y = read_npy(argv[3], "<i8");
    double load_s = std::chrono::duration<double>(Clock::now() - t0).count();

    c10::InferenceMode guard;
    const int64_t n = x.size(0);
    int64_t correct = 0;
    auto t1 = Clock::now();
    for (int64_t i = 0; i < n; i += batch) {
      const int64_t len = std::min(batch, n - i);
      auto out = model.forward({x.narrow(0, i, len)}).toTensor();
      correct += out.argmax(1).eq(y.narrow(0, i, len)).sum().item<int64_t>();
    }
    double loop_s = std::chrono::duration<double>(Clock::now() - t1).count();
    std::printf(
        "{\"loop_s\": %.6f, \"load_s\": %.6f, \"correct\": %lld, \"num_samples\": %lld, \"batch\": "
        "%lld, "
        "\"threads\": %d, \"throughput\": %.1f}\n",
        loop_s, load_s, static_cast<long long>(correct), static_cast<long long>(n),
        static_cast<long long>(batch), at::get_num_threads(), static_cast<double>(n) / loop_s);
  } catch (const std::exception& e) {
    std::cerr << "tq_bench_bare_loop: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
