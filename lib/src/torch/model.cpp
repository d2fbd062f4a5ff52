#include "taoquant/model.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/script.h>

#include "core/messages.h"
#include "taoquant/jit.h"
#include "taoquant/result_files.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

struct KindName {
  const char* class_name;
  LayerKind kind;
  size_t rank;
};

// Class names that map to a layer kind (nn.MultiheadAttention's out_proj is a
// NonDynamicallyQuantizableLinear), with the weight rank we expect.
constexpr KindName kKinds[] = {
    {"Linear", LayerKind::kLinear, 2},
    {"NonDynamicallyQuantizableLinear", LayerKind::kLinear, 2},
    {"Conv1d", LayerKind::kConv1d, 3},
    {"Conv2d", LayerKind::kConv2d, 4},
    {"Conv3d", LayerKind::kConv3d, 5},
    {"ConvTranspose1d", LayerKind::kConvTranspose1d, 3},
    {"ConvTranspose2d", LayerKind::kConvTranspose2d, 4},
    {"ConvTranspose3d", LayerKind::kConvTranspose3d, 5},
};

// One OpenBLAS thread per caller, as the launcher sets it (launcher.cpp)
// unless OPENBLAS_NUM_THREADS is set: LibTorch's OpenMP threads each call
// BLAS, and a pool of OpenBLAS's own would split one float matmul another
// way, so that a program calling the library and the CLI computed
// different low bits from the same inputs (its ZEN kernels, at 2 threads:
// the Fashion-MNIST CNN's bias correction and SQNR, and so the artifact's
// bytes). Looked up at run time: LibTorch reaches BLAS through libblas.so.3,
// which need not be OpenBLAS.
void one_blas_thread_per_caller() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_NUM_THREADS")) return;
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      set(1);
  });
}

}  // namespace

torch::jit::Module load_model(const std::string& path, const SourceLoc& from, bool verbose) {
  one_blas_thread_per_caller();
  std::string origin = from.file.empty() ? "" : " (from " + from.str() + ")";
  if (path.empty()) throw RuntimeError("no model path given" + origin);
  // Only a regular file: a FIFO would block the read below until a writer comes.
  const std::string problem = file_problem(path);
  if (!problem.empty())
    throw RuntimeError("model file " + quote_value(path) + " " + problem + origin +
                       "; expected a TorchScript file");
  {
    std::ifstream f(path, std::ios::binary);
    if (!f)
      throw RuntimeError("cannot read model file '" + path + "': " + std::strerror(errno) + origin);
    char magic[4] = {0, 0, 0, 0};
    f.read(magic, 4);
    if (f.gcount() < 4 || !(magic[0] == 'P' && magic[1] == 'K'))
      throw RuntimeError("model file '" + path + "' is not a TorchScript archive (not a zip file)" +
                         origin + "; export the model with torch.jit.script(model).save(path)");
  }
  try {
    auto m = torch::jit::load(path, torch::kCPU);
    m.eval();
    return m;
  } catch (const c10::Error& e) {
    std::string msg = verbose ? e.what() : first_line(e.what_without_backtrace());
    throw RuntimeError("cannot load model '" + path + "' as TorchScript: " + msg + origin +
                       " (is the file truncated or not saved with torch.jit.save?)");
  } catch (const std::exception& e) {
    throw RuntimeError("cannot load model '" + path + "' as TorchScript: " + first_line(e.what()) +
                       origin);
  }
}

std::string module_class_name(const torch::jit::Module& m) {
  auto name = m.type()->name();
  return name ? name->name() : "Module";
}

std::vector<LayerInfo> discover_layers(const torch::jit::Module& model) {
  std::vector<LayerInfo> out;
  for (const auto& inst : jit::module_instances(model)) {
    const torch::jit::Module& m = inst.module;
    std::string cls = module_class_name(m);
    for (const auto& k : kKinds) {
      if (cls != k.class_name) continue;
      if (!m.hasattr("weight")) break;
      auto w = m.attr("weight");
      if (!w.isTensor()) break;
      auto t = w.toTensor();
      if (static_cast<size_t>(t.dim()) != k.rank || !t.is_floating_point()) break;
      LayerInfo li;
      li.name = inst.path;
      li.class_name = cls;
      li.kind = k.kind;
      li.weight_shape = t.sizes().vec();
      li.has_bias = m.hasattr("bias") && m.attr("bias").isTensor();
      out.push_back(std::move(li));
      break;
    }
  }
  return out;
}

torch::jit::Module find_submodule(const torch::jit::Module& model, const std::string& dotted) {
  torch::jit::Module cur = model;
  std::stringstream ss(dotted);
  std::string part;
  while (std::getline(ss, part, '.')) {
    auto v = cur.attr(part, c10::IValue());
    if (!v.isModule()) throw RuntimeError("model has no submodule '" + dotted + "'");
    cur = v.toModule();
  }
  return cur;
}

std::string forward_return_type(const torch::jit::Module& m) {
  const auto& returns = m.get_method("forward").function().getSchema().returns();
  std::string s;
  for (const auto& r : returns) s += (s.empty() ? "" : ", ") + r.type()->annotation_str();
  // "___torch_mangle_<digits>." removed wherever it occurs.
  static const std::string mangle = "___torch_mangle_";
  for (size_t at = s.find(mangle); at != std::string::npos; at = s.find(mangle, at)) {
    size_t end = at + mangle.size();
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
    if (end < s.size() && s[end] == '.' && end > at + mangle.size())
      s.erase(at, end + 1 - at);
    else
      at = end;
  }
  return s;
}

torch::jit::Module load_artifact_checked(const std::string& path, const std::string& expected,
                                         const std::string& backend) {
  const std::string what = "the artifact '" + path + "' written by backend '" + backend + "'";
  torch::jit::Module m;
  try {
    m = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    throw RuntimeError(what + " does not load in LibTorch: " +
                       first_line(e.what_without_backtrace()) + "; it was not published");
  }
  const std::string got = forward_return_type(m);
  if (got != expected)
    throw RuntimeError(what + " returns " + got + " where the float model returns " + expected +
                       "; it was not published");
  return m;
}

void check_artifact_loads(const std::string& path, const std::string& expected,
                          const std::string& backend) {
  (void)load_artifact_checked(path, expected, backend);
}

namespace {

class OnceWarningHandler : public c10::WarningHandler {
 public:
  void process(const c10::SourceLocation&, const std::string& msg, const bool) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (seen_.insert(msg).second) spdlog::warn("LibTorch: {}", first_line(msg));
  }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
};

}  // namespace

void log_torch_warnings_once() {
  static OnceWarningHandler handler;
  c10::Warning::set_warning_handler(&handler);
}

size_t model_tensor_bytes(const torch::jit::Module& model) {
  size_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel() * p.element_size();
  for (const auto& b : model.buffers()) n += b.numel() * b.element_size();
  return n;
}

// One implementation of the atomic write (unique temporary name, EINTR,
// fsync of the file and of its directory): the torch-free one.
void write_file_atomic(const std::string& path, const std::string& data) {
  write_text_atomic(path, data);
}

void save_module_atomic(const torch::jit::Module& model, const std::string& path,
                        std::map<std::string, std::string> extra_files) {
  // Streamed straight into the temporary file, as Module::save(ostream)
  // writes it (the archive's root folder is "archive"; a save to a file
  // path would name it after the temporary file, and artifacts would differ
  // between runs), without a copy of the whole file in memory: a 60 MB
  // record took 0.3 s more through a string. The extra files are moved, not
  // copied: one more copy of ResNet-50's 25 MB of record codes cost about
  // 0.05 s, its fresh pages faulting in.
  torch::jit::ExtraFilesMap extra;
  for (auto& [k, v] : extra_files) extra.emplace(k, std::move(v));
  torch::jit::Module m = model;   // a handle: its graphs are the model's
  jit::exact_float_constants(m);  // else the saved code may not compile
  write_streamed_atomic(path, [&](const ByteSink& sink) {
    try {
      torch::jit::ExportModule(
          m,
          [&](const void* data, size_t n) -> size_t {
            sink(data, n);
            return n;
          },
          extra);
    } catch (const c10::Error& e) {
      throw RuntimeError("cannot save model to '" + path +
                         "': " + first_line(e.what_without_backtrace()));
    }
  });
}

}  // namespace tq
