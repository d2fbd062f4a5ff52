// Graph passes over TorchScript IR: one node walker, one inliner, one
// module-instance walker, one op-info table, one scoped custom-op context,
// and the named workarounds for LibTorch's graph quantization passes. Each
// workaround names the model that needed it; each pass has IR-level tests in
// tests/torch/test_jit_passes*.cpp.
#pragma once

#include <algorithm>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "taoquant/enums.h"

namespace tq::jit {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Module;
using torch::jit::Node;
using torch::jit::Value;

// ---- Node walker -----------------------------------------------------------

// Calls `f` on every node of `b` and of the blocks nested in it, each node
// after the nodes of its own sub-blocks (post-order). The next node is taken
// before `f` runs, so `f` may destroy or replace the node it is given (not
// its successors).
void for_each_node(Block* b, const std::function<void(Node*)>& f);

// The nodes of `b` and its sub-blocks that `keep` accepts, each node before
// the nodes nested in it (pre-order). A snapshot: callers may rewrite the
// graph while going through it (inner nodes first: iterate backwards).
std::vector<Node*> find_nodes(Block* b, const std::function<bool(Node*)>& keep);

// Whether any node of `b` (or nested in it) has kind `kind` ("prim::If").
bool has_node(Block* b, const std::string& kind);

// ---- Inliner ---------------------------------------------------------------

enum class Calls {
  kAll,        // prim::CallMethod and prim::CallFunction; callees' optimized graphs
  kFunctions,  // prim::CallFunction only; callees' graphs as written
};
// Inlines calls into `g` until none is left (calls inside inlined callees
// too, however deep). kAll inlines what LibTorch's own Inline pass inlines:
// each callee's optimized graph, in which constant conditions such as a
// Conv2d's `padding_mode != "zeros"` are already folded. Returns how many
// calls were inlined.
size_t inline_calls(Graph& g, Calls which = Calls::kAll);

// A copy of `m`'s method `name` with every call inlined.
std::shared_ptr<Graph> inlined_graph(const Module& m, const std::string& name = "forward");

// ---- Module instances ------------------------------------------------------

// Every submodule instance below `root` (root first, path ""), pre-order, in
// attribute order. Read by slot, so that instances of a type shared with
// others are all visited, and an instance without a value for an attribute
// its type declares (LibTorch's quantization passes add attributes to
// shared types) is skipped instead of read past its slots.
struct ModuleInstance {
  std::string path;  // "layer1.0.conv1"; "" for the root
  std::string name;  // attribute name in the parent; "" for the root
  Module module;
  int parent = -1;  // index of the parent instance; -1 for the root
  size_t slot = 0;  // attribute slot in the parent
};
std::vector<ModuleInstance> module_instances(const Module& root);
// Runs `pass` on the graph of every method of every module instance of
// `root`; the sum of what it returns (e.g. how many nodes it changed).
size_t on_every_method(Module& root, const std::function<size_t(Graph&)>& pass);

// "a.b.c" for GetAttr[c](GetAttr[b](GetAttr[a](self))); nullopt if `v` is
// not such a chain from a graph input.
std::optional<std::string> attr_path(Value* v);

// ---- Op info ---------------------------------------------------------------

enum class OpRole {
  kOther,
  kLayer,            // conv/linear with its weight at input 1: tapped and observed
  kTransposedLayer,  // conv_transpose: a layer, but not tapped (no static int8 kernel)
  kPassesRanges,     // output quantized like input 0 (shape-only, relu, pooling, ...)
};
struct OpInfo {
  OpRole role = OpRole::kOther;
  std::optional<LayerKind> kind;  // for layer ops where the op tells the kind
  // f(s * x) = s * f(x) for a positive per-channel s, channels kept in dim 1
  // (relu, pooling, dropout): cross-layer equalization may scale through it.
  bool commutes_with_channel_scale = false;
  // A range-passing op whose quantized kernel requantizes its result with
  // the input's parameters (clamp, average pooling, mean, upsampling).
  bool requantizes = false;
};
// What tao-quant knows of an op, by qualified name ("aten::conv2d").
OpInfo op_info(const std::string& qualified_name);
OpInfo op_info(const Node* n);
bool is_layer_op(const Node* n);    // role kLayer
bool passes_ranges(const Node* n);  // role kPassesRanges

// LibTorch's quantized kernels for a layer kind, called through the
// dispatcher by per-layer timing. nullopt: no static int8 kernel.
struct QuantizedOp {
  const char* prepack;
  const char* op;
  const char* overload;
};
std::optional<QuantizedOp> quantized_op(LayerKind kind);

// ---- Layer sites -----------------------------------------------------------

// The layer ops of an inlined graph with the module path of the layer each
// one belongs to (its weight's GetAttr chain, seen through an observe call),
// first call of each layer only, in graph order.
struct LayerSite {
  Node* op = nullptr;
  std::string layer;
};
std::vector<LayerSite> layer_sites(Graph& g);
// The layer of one op (any role with a weight at input 1), or nullopt.
std::optional<std::string> layer_of(Node* op);
// A layer call that no layer owns: the attribute path of a layer op's
// weight when it is a module attribute other than a layer's `weight`
// (nn.MultiheadAttention's "...self_attn.in_proj_weight", which LibTorch's
// static pass quantizes with its module's qconfig), else nullopt.
std::optional<std::string> unowned_weight(Node* op);

// ---- Call insertion --------------------------------------------------------

// Inserts `op(user.input(index), id)` before `user` and makes `user` read
// its result. Returns the new node (output typed as its input).
Node* insert_call_on_input(Node* user, size_t index, const std::string& op, int64_t id);
// Inserts `op(producer.output(), id)` after `producer` and makes every other
// reader of that output read the call's result instead.
Node* insert_call_on_output(Node* producer, const std::string& op, int64_t id);
// Removes such a call: its readers read its input again.
void remove_call(Node* call);
// Replaces such a call by the nodes of `body`, called with the call's input
// 0 and then `constants` (fakequant's quantize -> dequantize of an observed
// activation). Returns the value that replaced the call's output.
Value* replace_call_with_graph(Node* call, Graph& body, const std::vector<c10::IValue>& constants);

// ---- Scoped custom-op context ----------------------------------------------

// The context a custom op works for, without global pointers: while an
// OpScope<T> lives, OpScope<T>::current() on the same thread returns its
// context (the innermost one). Scopes may end in any order; a scope that
// ends by an exception is removed like any other.
template <class T>
class OpScope {
 public:
  explicit OpScope(T& ctx) : ctx_(&ctx) { stack().push_back(this); }
  ~OpScope() {
    auto& s = stack();
    auto it = std::find(s.rbegin(), s.rend(), this);
    if (it != s.rend()) s.erase(std::next(it).base());
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  static T* current() { return stack().empty() ? nullptr : stack().back()->ctx_; }
  static size_t depth() { return stack().size(); }

 private:
  static std::vector<OpScope*>& stack() {
    thread_local std::vector<OpScope*> s;
    return s;
  }
  T* ctx_;
};

// ---- Named passes ------------------------------------------------------------

// Replaces reads of a module's `training` flag by the constant false, for
// a model whose modules are all in eval mode (nn.TransformerEncoderLayer's
// and torchvision's EfficientNet's `if self.training` branches). Returns
// how many reads were folded.
size_t fold_training_flags(Graph& g);

// LibTorch 1.13 runs max_pool2d on an NCHW float tensor through
// max_pool2d_with_indices' NCHW kernel, 6-8x slower than its oneDNN pooling
// (the Fashion-MNIST CNN's first pool, 32x32x28x28 at 2 threads: 2.1 ms
// against 0.26 ms with the conversions; 31% of its calibration pass).
// Replaces each aten::max_pool2d by taoquant::max_pool2d, which takes the
// oneDNN kernel where its values are the same (a contiguous float input of
// 64Ki elements or more, no dilation, no NaN or infinity in it) and
// LibTorch's own otherwise. For graphs tao-quant runs in float itself
// (calibration, layer capture, the sensitivity simulator), never for a
// graph it converts or saves. Returns how many were replaced; the same on
// every method of every module instance.
size_t onednn_max_pools(Graph& g);
size_t onednn_max_pools(Module& m);

// Replaces an If node by the nodes of its block `which` (0: then, 1: else).
void inline_branch(Node* if_node, size_t which);

// Constant propagation and dead code elimination (LibTorch's passes): ifs
// with constant conditions are replaced by the branch they take.
void fold_constants(const std::shared_ptr<Graph>& g);

// LibTorch's code printer writes a float constant that is a whole number
// in [1e10, 1e17) without a point ("771358130176"), so the saved code reads
// it back as an int and does not compile (static SmoothQuant on data with
// an outlier pixel gave an activation scale of 7.7e11). Rewrites each such
// constant as an exact product c * 2^k of two constants that print with a
// point. Returns how many were rewritten; the same on every method of every
// module instance (run before a module is saved).
size_t exact_float_constants(Graph& g);
size_t exact_float_constants(Module& m);

// InsertQuantDeQuant treats a tuple built from a quantized tensor
// (nn.MultiheadAttention's `(attn_output, None)`, in ViT) as quantized and
// dequantizes the tuple itself, which TorchScript cannot run. Dequantizes its
// tensor elements instead and rebuilds the tuple. Returns how many were fixed.
size_t dequantize_tuple_elements(Graph& g);
// The same on every method of every module instance.
size_t dequantize_tuple_elements(Module& m);

// LibTorch's InsertObservers adds observer attributes to module types, and
// registers observer instances only on the instances it reaches through the
// call graph. Another instance of a shared type (DenseNet's _DenseLayer,
// reached through a ModuleDict loop) is left without a value for them, and
// later passes fail on it. Gives each such instance its own copy of a
// sibling's observer (attributes whose name `is_observer` accepts). Returns
// how many were copied.
size_t complete_shared_observers(Module& root,
                                 const std::function<bool(const std::string&)>& is_observer);

// LibTorch's InsertQuantDeQuant converts a module type once, for the
// instances it reaches first, and gives only those the new attributes
// (scales, packed weights). When whole parent modules share a type (two
// identical DenseNet blocks), the others are left incomplete, and Finalize
// would crash on them. Instances that the inlined forward does not read (a
// BatchNorm folded away) get a sibling's values; the paths of incomplete
// instances that forward reads ("<model>" for the root) are returned: they
// would run without their qparams.
std::vector<std::string> complete_unused_instances(Module& root);
// The module paths that the inlined forward graph reads.
std::vector<std::string> used_module_paths(const Module& m);

// LibTorch's (deprecated) graph-mode quantization passes, kept where they are
// used. Each names the LibTorch pass it runs.
enum class QuantMode { kStatic, kDynamic };
using QConfig = std::optional<std::tuple<Module, Module>>;  // (activation, weight) observers
using QConfigs = std::unordered_map<std::string, QConfig>;  // by module path; "" = default
// FoldConvBatchNorm: a copy of `m` with each Conv+BatchNorm pair folded into the conv.
Module fold_conv_batchnorm(const Module& m);
// InsertObservers on forward: observer modules from `qconfigs` (on `m`
// itself, or on a copy when not `inplace`).
Module insert_observers(Module& m, const QConfigs& qconfigs, QuantMode mode, bool inplace = true);
// InsertQuantDeQuant on forward: quantize/dequantize around observed values.
Module insert_quant_dequant(Module& m, QuantMode mode, bool inplace = true);
// Finalize (fusion into quantized ops, weight packing, freezing), then
// constant propagation and dead code elimination on forward.
Module finalize(Module& m, QuantMode mode);

}  // namespace tq::jit
