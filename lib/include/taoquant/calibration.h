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
#include <set>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "taoquant/backend.h"
#include "taoquant/observer.h"

namespace tq {

struct ObserverTemplate {
  std::string observer;  // registered observer name
  ObserverConfig cfg;
  SourceLoc loc;  // spec location of the setting (for errors)
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

  // A slot without an observer module, for backends that insert
  // `taoquant::observe(x, id)` calls into a graph themselves. Returns the id.
  int64_t add_slot(int template_id, const std::string& label);

  void observe(int64_t id, const at::Tensor& x);
  // The slot of the observer module at `path`, or with `label` (nullptr if none).
  const ObserverSlot* find_path(const std::string& path) const;
  const ObserverSlot* find_label(const std::string& label) const;
  const QParams& qparams(int64_t id);
  const std::vector<std::unique_ptr<ObserverSlot>>& slots() const { return slots_; }
  const std::vector<ObserverTemplate>& templates() const { return templates_; }

  static ObserverTable* active();

 private:
  std::vector<ObserverTemplate> templates_;
  std::vector<std::unique_ptr<ObserverSlot>> slots_;
  QParamConstraints constraints_;
  struct Scope;  // makes this table the custom ops' context while it lives
  std::unique_ptr<Scope> scope_;
};

// Applies a backend's declared qparam constraints (power-of-two scales,
// minimum scale, ranges) to computed qparams (implemented in constraints.cpp).
QParams apply_constraints(const QParams& q, const QParamConstraints& c);

// A linear whose weight LibTorch quantizes though no planned layer owns it
// (aten::linear on a module attribute that is not a Linear's `weight`:
// nn.MultiheadAttention's in_proj): the observers (module paths) of its input
// and of its weight, and its bias's attribute path
// ("encoder.layers.0.self_attn.in_proj_bias").
struct UnplannedLinear {
  std::string input, weight, bias;
};

// What an observed model's graph says about its linears, read in one walk of
// its inlined forward. The graph is fixed once the observers are in, so one
// reading serves every later pass over the same observed model.
struct ObservedLinears {
  // For each conv/linear layer (by module path), the module path of the
  // observer that quantizes its input: the one on its input value, or on the
  // value its input is derived from through ops that carry quantization
  // (pooling, flatten, reshape, relu, ...). A layer called twice: its first
  // observed call.
  std::map<std::string, std::string> layer_inputs;
  // The unplanned linears, first call each.
  std::vector<UnplannedLinear> unplanned;
};
ObservedLinears observed_linears(const torch::jit::Module& observed);

// 10 log10(sum ref^2 / sum (ref - x)^2), in double; +inf when equal.
double tensor_sqnr_db(const at::Tensor& ref, const at::Tensor& x);

// The report's per-layer "activation" entry: observer, observed range, clip,
// scale and zero point.
nlohmann::json activation_stats(const QParams& q, const std::string& observer);

// A compact histogram of activation values `x` (e.g. a layer's captured
// held-out input) over a range that covers both the values and the clip
// range of `q`: {"min", "max", "counts" (bins <= 128), "samples"}. For the
// HTML report; works for every observer, with or without a histogram.
nlohmann::json activation_histogram(const at::Tensor& x, const QParams& q, int64_t bins = 64);

// One pass of `model` over `inputs` with a tap at each conv/linear layer
// (its first call), by module path. The model itself is not modified, and
// may be an observed model: then the pass also calibrates.
struct LayerCapture {
  std::map<std::string, at::Tensor> inputs;   // each layer's input (leading samples)
  std::map<std::string, at::Tensor> outputs;  // its output on those samples (if asked)
  c10::IValue model_output;                   // the model's output
};
struct CaptureOptions {
  bool outputs = false;
  // How many leading samples (dim 0) of a layer's input to keep, given the
  // layer and its whole input; unset: all.
  std::function<int64_t(const std::string& layer, const at::Tensor& input)> samples;
};
LayerCapture capture_layers(const torch::jit::Module& model, const std::vector<at::Tensor>& inputs,
                            const CaptureOptions& opts = {});

// Streams each conv/linear layer's input through `fn`, at every call of the
// layer, while `model` (not modified) runs on batches; nothing is kept, so
// statistics over a whole dataset take bounded memory.
using LayerInputFn = std::function<void(const std::string& layer, const at::Tensor& x)>;
class LayerInputStream {
 public:
  explicit LayerInputStream(const torch::jit::Module& model);
  ~LayerInputStream();
  LayerInputStream(const LayerInputStream&) = delete;
  LayerInputStream& operator=(const LayerInputStream&) = delete;
  void run(const std::vector<at::Tensor>& inputs, const LayerInputFn& fn);
  // Runs until every call of `layers` has been seen, then stops the model:
  // cheaper when they come early. Where that point is not known before
  // running (a call inside a loop or a branch), the model runs to its end.
  void run_until(const std::vector<at::Tensor>& inputs, const LayerInputFn& fn,
                 const std::set<std::string>& layers);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A model's forward in pieces, cut before the op of each of `layers`
// (sequential GPTQ): values(k) are the values that cross cut k, the
// layer order()[k]'s input among them; start() gives the values before the
// first piece, advance(k, v) runs piece k on the values at cut k - 1 (or
// start()) and leaves those at cut k. Attributes are read inside each piece,
// so weights set on model() between runs take effect in later pieces.
// why() says why the model cannot be cut ("" when it can): every layer must
// be called once, at the top level of forward (not in a loop or a branch).
class ForwardPieces {
 public:
  ForwardPieces(const torch::jit::Module& model, const std::set<std::string>& layers);
  ~ForwardPieces();
  ForwardPieces(const ForwardPieces&) = delete;
  ForwardPieces& operator=(const ForwardPieces&) = delete;
  const std::string& why() const { return why_; }
  const std::vector<std::string>& order() const { return order_; }
  size_t input_index(size_t k) const { return input_index_.at(k); }
  torch::jit::Module& model();  // the copy the pieces run on
  std::vector<c10::IValue> start(const std::vector<at::Tensor>& inputs) const;
  void advance(size_t k, std::vector<c10::IValue>& values) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string why_;
  std::vector<std::string> order_;
  std::vector<size_t> input_index_;
};

// capture_layers(...).inputs, and the model's output into `output` if given.
std::map<std::string, at::Tensor> capture_layer_inputs(const torch::jit::Module& model,
                                                       const std::vector<at::Tensor>& inputs,
                                                       c10::IValue* output = nullptr);

// While alive, TorchScript runs without the graph executor's optimizing
// passes (profiling, specialization, fusion). Calibration runs each graph a
// handful of times, so that compile time would dominate; the outputs are the
// same. Latency measurements must not use it.
class NoGraphOptimization {
 public:
  NoGraphOptimization();
  ~NoGraphOptimization();
  NoGraphOptimization(const NoGraphOptimization&) = delete;
  NoGraphOptimization& operator=(const NoGraphOptimization&) = delete;

 private:
  bool previous_;
};

// Specializes a module for inference on inputs like `sample`: function calls
// are inlined into the methods; `if`s whose condition is known without data
// (constants, `self.training` of a module in eval mode) are decided first,
// then the asserts every call passes through (an `if` one of whose sides
// raises, at the top level of forward or of a method it always calls); if
// any remain, the model runs once with branch recording (grad enabled, so
// fused inference fast paths that bypass Linear modules are not taken), and
// every `if` that always took the same branch is replaced by that branch.
struct BranchSpecialization {
  size_t removed = 0;  // ifs replaced by one of their branches
  size_t kept = 0;     // data-dependent, or never reached by the sample
  bool ran = false;    // whether the model ran on `sample`
};
BranchSpecialization specialize_branches(torch::jit::Module& model,
                                         const std::vector<at::Tensor>& sample);

// Without data (dynamic PTQ): the inference fast paths of
// nn.TransformerEncoderLayer and nn.MultiheadAttention
// (aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention)
// read the Linear layers' float weights directly, so a quantized Linear would
// be bypassed whenever the fast path runs (eval, no grad: every inference).
// Each `if` with such a fused op on one side only is replaced by its other
// side, the module-by-module path (calls are not inlined). Returns
// how many ifs were replaced. (The Fashion-MNIST ViT, nn.TransformerEncoder,
// torchvision vit_b_16.)
size_t drop_fused_fast_paths(torch::jit::Module& model);

}  // namespace tq
