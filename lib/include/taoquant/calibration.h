// Calibration plumbing for graph-level backends: observer modules that can be
// inserted into a TorchScript graph (e.g. by LibTorch's InsertObservers
// pass), whose forward calls the custom op `taoquant::observe` so that tao-quant's
// C++ observers see the data, and whose calculate_qparams calls
// `taoquant::qparams`. The ops exist only while tao-quant runs; observers are
// removed before the artifact is written.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/backend.h"
#include "taoquant/observer.h"

namespace tq {

struct ObserverTemplate {
  std::string observer;  // registered observer name
  ObserverConfig cfg;
  SourceLoc loc;         // spec location of the setting (for errors)
  bool weight = false;
};

struct ObserverSlot {
  int64_t id = -1;
  int template_id = -1;
  std::string path;   // module path of the observer ("layer1.0._observer_3")
  std::string label;  // what it observes: "layer1.0.conv1:input", "fc:weight", ":input"
  std::unique_ptr<Observer> obs;
  size_t calls = 0;
  std::vector<int64_t> last_shape;
  std::optional<QParams> qparams;
};

class ObserverTable {
 public:
  // Becomes the table the custom ops use until destroyed.
  explicit ObserverTable(QParamConstraints constraints = {});
  ~ObserverTable();
  ObserverTable(const ObserverTable&) = delete;
  ObserverTable& operator=(const ObserverTable&) = delete;

  int add_template(ObserverTemplate t);
  // A TorchScript observer module for a template (attributes dtype, qscheme,
  // ch_axis as LibTorch's quantization passes expect).
  torch::jit::Module make_module(int template_id) const;
  // After observers were inserted: gives each observer module instance its
  // own slot and labels it from the graph.
  void bind(torch::jit::Module& observed);

  void observe(int64_t id, const at::Tensor& x);
  // While capturing, observe() keeps a copy of each observed input instead of
  // updating the observers (used for a held-out batch).
  void set_capture(bool on);
  const at::Tensor* captured(const std::string& label) const;
  const QParams& qparams(int64_t id);
  const std::vector<std::unique_ptr<ObserverSlot>>& slots() const { return slots_; }
  const std::vector<ObserverTemplate>& templates() const { return templates_; }

  static ObserverTable* active();

 private:
  std::vector<ObserverTemplate> templates_;
  std::vector<std::unique_ptr<ObserverSlot>> slots_;
  QParamConstraints constraints_;
  bool capture_ = false;
  std::map<std::string, at::Tensor> captured_;
  ObserverTable* previous_ = nullptr;
};

// Applies a backend's declared qparam constraints (power-of-two scales,
// minimum scale, ranges) to computed qparams (implemented in constraints.cpp).
QParams apply_constraints(const QParams& q, const QParamConstraints& c);

// Specializes a module for inference on inputs like `sample`: function calls
// are inlined into the methods, the model runs once with branch recording
// (grad enabled, so fused inference fast paths that bypass Linear modules are
// not taken), and every `if` that always took the same branch is replaced by
// that branch. Returns {ifs removed, ifs kept}.
std::pair<size_t, size_t> specialize_branches(torch::jit::Module& model, const std::vector<at::Tensor>& sample);

}  // namespace tq
