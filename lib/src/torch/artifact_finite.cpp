// The last checks before a result is published: no artifact with a
// non-finite weight, bias, scale, or output on the held-out batch (issue
// 30); whether it survives a batch-size change (issue 31).
#include <filesystem>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include "artifact_checks.h"
#include "taoquant/model.h"
#include "taoquant/strings.h"

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

// The first non-finite tensor the module holds (parameters, buffers,
// attributes, packed params' weights and scales), as a problem; "" when none.
std::string held_value_problem(const torch::jit::Module& m) {
  for (const auto& a : m.named_attributes(/*recurse=*/true)) {
    if (a.value.isObject() && a.value.toObjectRef().type()->is_module()) continue;
    // A code table (`*_lut`: fp8's holds NaN codes by design) is not a
    // value the model computes with; the weights decoded from it are.
    const auto& n = a.name;
    if (n.size() >= 4 && n.compare(n.size() - 4, 4, "_lut") == 0) continue;
    const Found f = first_non_finite(a.value, a.name);
    if (!f.kind.empty()) return "has a non-finite value: tensor '" + f.name + "' holds " + f.kind;
  }
  return "";
}

// A non-finite value in the output on the held-out batch, as a problem.
std::string output_problem(const c10::IValue& out) {
  const Found f = first_non_finite(out, "output");
  if (f.kind.empty()) return "";
  return "has a non-finite value: its " + f.name + " on the held-out calibration batch holds " +
         f.kind;
}

c10::IValue run_full(torch::jit::Module& m, const std::vector<at::Tensor>& holdout) {
  m.eval();
  torch::NoGradGuard no_grad;
  return m.forward(std::vector<c10::IValue>(holdout.begin(), holdout.end()));
}

std::string artifact_problem(const std::string& path, const std::vector<at::Tensor>& holdout) {
  torch::jit::Module m = torch::jit::load(path, torch::kCPU);
  const std::string held = held_value_problem(m);
  if (!held.empty() || holdout.empty()) return held;
  return output_problem(run_full(m, holdout));
}

// The useful line of a LibTorch error: TorchScript puts the operator's
// message ("RuntimeError: could not create a primitive ...") after its
// traceback, on the first unindented line after the last "<--- HERE".
std::string error_line(const std::string& what) {
  const auto here = what.rfind("<--- HERE");
  if (here == std::string::npos) return first_line(what);
  std::istringstream rest(what.substr(here));
  std::string line;
  std::getline(rest, line);  // the marked code line
  while (std::getline(rest, line))
    if (!line.empty() && line[0] != ' ' && line[0] != '\t') return line;
  return first_line(what);
}

}  // namespace

namespace {

// What to do, after each kind of refusal.
const char* const kFiniteAdvice =
    "; a float model or data that is already non-finite there gives this too";
const char* const kBatchChangeAdvice =
    "; a LibTorch 1.13 onednn defect that tao-quant's per-layer probe did not find: keep the "
    "layer of that line float with skip_names, or use backend_kwargs.engine: qnnpack; "
    "docs/reliability.md#batch-size-changes";

// Removes the unpublished artifact and says why.
[[noreturn]] void refuse_artifact(const std::string& path, const std::string& backend,
                                  const std::string& problem, const std::string& advice) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  throw RuntimeError("the artifact written by backend '" + backend + "' " + problem +
                     "; it was not published (the earlier result, if any, is kept" + advice + ")");
}

// The artifact's code line a TorchScript error points at (the line above
// the first "<--- HERE" marker), trimmed; "" when there is none.
std::string error_site(const std::string& what) {
  const auto here = what.find("<--- HERE");
  if (here == std::string::npos) return "";
  const auto marker_line = what.rfind('\n', here);
  if (marker_line == std::string::npos || marker_line == 0) return "";
  const auto start = what.rfind('\n', marker_line - 1);
  std::string line = what.substr(start == std::string::npos ? 0 : start + 1,
                                 marker_line - (start == std::string::npos ? 0 : start + 1));
  line.erase(0, line.find_first_not_of(" \t"));
  return line.size() > 160 ? line.substr(0, 157) + "..." : line;
}

}  // namespace

void check_artifact_finite(const std::string& path, const std::vector<at::Tensor>& holdout,
                           const std::string& backend) {
  const std::string problem = artifact_problem(path, holdout);
  if (problem.empty()) return;
  refuse_artifact(path, backend, problem,
                  problem.rfind("has a non-finite", 0) == 0 ? kFiniteAdvice : "");
}

void check_batch_change(const std::string& path, const std::vector<at::Tensor>& holdout,
                        const std::string& backend) {
  const std::string problem = batch_change_problem(path, holdout);
  if (problem.empty()) return;
  refuse_artifact(path, backend, problem, kBatchChangeAdvice);
}

namespace {

// Whether the held-out batch can be cut to batch 1: batched inputs, all of
// the same batch size, at least 2 (else nothing changes in deployment).
bool batch_changes(const std::vector<at::Tensor>& holdout) {
  if (holdout.empty()) return false;
  const at::Tensor& x0 = holdout.front();
  if (x0.dim() == 0 || x0.size(0) < 2) return false;
  for (const auto& t : holdout)
    if (t.dim() == 0 || t.size(0) != x0.size(0)) return false;  // not all batched alike
  return true;
}

// Batch 1, the held-out batch, then 1 again on `m` (fresh: its first call
// is batch 1) at two or more threads. Returns the batch-change problem ("":
// none, or the model does not take batch 1); the held-out batch's output
// goes to `full_output` when that call ran.
std::string run_batch_sequence(torch::jit::Module& m, const std::vector<at::Tensor>& holdout,
                               c10::IValue& full_output) {
  const std::vector<c10::IValue> full(holdout.begin(), holdout.end());
  std::vector<c10::IValue> one;
  for (const auto& t : holdout) one.emplace_back(t.narrow(0, 0, 1));
  // At least two threads, as a server runs it: onednn's choice of weight
  // layout depends on the thread count (one thread never showed it).
  const int threads = at::get_num_threads();
  if (threads < 2) at::set_num_threads(2);
  struct Restore {
    int n;
    ~Restore() {
      if (at::get_num_threads() != n) at::set_num_threads(n);
    }
  } restore{threads};
  m.eval();
  torch::NoGradGuard no_grad;
  try {
    m.forward(one);
  } catch (const std::exception&) {
    return "";
  }
  int64_t at_batch = holdout.front().size(0);
  try {
    full_output = m.forward(full);
    at_batch = 1;
    m.forward(one);
  } catch (const std::exception& e) {
    const std::string site = error_site(e.what());
    return "fails when the batch size changes (batch 1, " +
           std::to_string(holdout.front().size(0)) +
           ", then 1 in one process, as a deployment runs it; it failed at batch " +
           std::to_string(at_batch) + (site.empty() ? "" : ", in `" + site + "`") +
           "): " + error_line(e.what());
  }
  return "";
}

}  // namespace

// See artifact_checks.h.
std::string batch_change_problem(const std::string& path, const std::vector<at::Tensor>& holdout) {
  if (!batch_changes(holdout)) return "";
  torch::jit::Module m = torch::jit::load(path, torch::kCPU);
  c10::IValue full_output;
  return run_batch_sequence(m, holdout, full_output);
}

at::Tensor check_saved_artifact(const std::string& path, const std::string& return_type,
                                const std::vector<at::Tensor>& holdout,
                                const std::string& backend) {
  torch::jit::Module m;
  try {
    m = load_artifact_checked(path, return_type, backend);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw;
  }
  // The sequence first, on the fresh module; then what it holds and gave.
  c10::IValue full_output;
  const std::string changed =
      batch_changes(holdout) ? run_batch_sequence(m, holdout, full_output) : "";
  const std::string held = held_value_problem(m);
  if (!held.empty()) refuse_artifact(path, backend, held, kFiniteAdvice);
  if (!holdout.empty() && full_output.isNone()) full_output = run_full(m, holdout);
  const std::string out = holdout.empty() ? "" : output_problem(full_output);
  if (!out.empty()) refuse_artifact(path, backend, out, kFiniteAdvice);
  if (!changed.empty()) refuse_artifact(path, backend, changed, kBatchChangeAdvice);
  return full_output.isTensor() ? full_output.toTensor() : at::Tensor();
}

}  // namespace tq
