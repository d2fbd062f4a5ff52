// make_data_loader (dispatch on the data source) and check_input_fits.
#include <torch/script.h>

#include "data_impl.h"
#include "taoquant/calibration.h"
#include "taoquant/model.h"

namespace tq {

namespace {

// The useful line of a LibTorch error: TorchScript wraps the operator's
// message ("RuntimeError: Given groups=1, weight of size ...") after a
// traceback; eager errors put it first.
std::string libtorch_message(const std::string& what) {
  std::string best;
  size_t pos = 0;
  while (pos < what.size()) {
    size_t nl = what.find('\n', pos);
    std::string line = what.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    for (const char* tag : {"RuntimeError: ", "ValueError: ", "IndexError: ", "TypeError: "})
      if (line.rfind(tag, 0) == 0) best = line.substr(std::string(tag).size());
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  if (!best.empty()) return best;
  auto nl = what.find('\n');
  return nl == std::string::npos ? what : what.substr(0, nl);
}

// The first quantizable layer and the input it takes: features of a
// Linear's last dimension, or channels at dimension 1 of a conv's batched
// input (`dims`: 3, 4 or 5; 0 for a Linear).
struct FirstLayer {
  std::string text;  // "first layer 'features.conv1' Conv2d expects 1 input channels"
  int64_t inputs = -1, dims = 0;
};

FirstLayer first_layer(const torch::jit::Module& model) {
  std::vector<LayerInfo> layers = discover_layers(model);
  if (layers.empty()) return {"the model has no Linear/Conv layer to name"};
  const LayerInfo& l = layers[0];
  const std::string what = "first layer '" + l.name + "' " + l.class_name + " expects ";
  const auto& w = l.weight_shape;
  switch (l.kind) {
    case LayerKind::kLinear:
      return {what + std::to_string(w[1]) + " input features", w[1], 0};
    case LayerKind::kConv1d:
    case LayerKind::kConv2d:
    case LayerKind::kConv3d: {
      int64_t groups = 1;
      try {
        auto m = find_submodule(model, l.name);
        if (m.hasattr("groups") && m.attr("groups").isInt()) groups = m.attr("groups").toInt();
      } catch (const std::exception&) {
      }
      return {what + std::to_string(w[1] * groups) + " input channels", w[1] * groups,
              static_cast<int64_t>(w.size())};
    }
    default:
      return {what + std::to_string(w[0]) + " input channels"};
  }
}

// Whether the first input is what the first layer takes (shape and a
// floating dtype): then a failed forward is the model's own error.
bool fits_first_layer(const FirstLayer& f, const Batch& b) {
  if (f.inputs < 0 || b.inputs.empty() || !b.inputs[0].defined()) return false;
  const at::Tensor& x = b.inputs[0];
  if (!x.is_floating_point() || x.dim() < 1) return false;
  if (f.dims == 0) return x.size(-1) == f.inputs;
  return x.dim() == f.dims && x.size(1) == f.inputs;
}

// The error the forward raised: what follows TorchScript's traceback (the
// "<--- HERE" marker and the rest of the code line it marks, which is
// indented), whole (a few lines at most), else LibTorch's message.
std::string model_error(const std::string& what) {
  const auto here = what.rfind("<--- HERE");
  if (here != std::string::npos) {
    auto nl = what.find('\n', here);
    while (nl != std::string::npos && nl + 1 < what.size() &&
           (what[nl + 1] == ' ' || what[nl + 1] == '\t'))
      nl = what.find('\n', nl + 1);
    std::string rest = nl == std::string::npos ? "" : what.substr(nl + 1);
    while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.pop_back();
    if (!rest.empty()) return rest.size() > 2000 ? rest.substr(0, 2000) + " ..." : rest;
  }
  return libtorch_message(what);
}

}  // namespace

std::unique_ptr<DataLoader> make_data_loader(const Spec& spec, const DataSourceSpec& src,
                                             const std::string& key, bool want_labels) {
  if (src.empty())
    throw SpecError(spec.loc(key),
                    key + ": set images_dir (an image folder) or data_file (.npz/.npy/.pt)");
  if (!src.images_dir.empty()) return data::make_image_loader(spec, src, key, want_labels);
  return data::make_tensor_loader(spec, src, key, want_labels);
}

namespace {
std::string first_sample_shapes(const Batch& b) {
  std::string shapes;
  for (const auto& t : b.inputs) {
    at::Tensor one = t.dim() > 0 && t.size(0) > 1 ? t.narrow(0, 0, 1) : t;
    shapes += (shapes.empty() ? "" : ", ") + data::shape_str(one.sizes());
  }
  return shapes;
}
}  // namespace

void throw_input_mismatch(const torch::jit::Module& model, const Batch& b, const std::string& what,
                          const std::string& libtorch_error) {
  const FirstLayer f = first_layer(model);
  const std::string head =
      "the model's forward failed on the " + what + " (shape " + first_sample_shapes(b);
  // The model's own error, whole, always: the first-layer guess is wrong
  // whenever the forward reshapes its input before that layer.
  if (fits_first_layer(f, b))
    throw RuntimeError(head + ", which its " + f.text + " takes): " + model_error(libtorch_error));
  std::string hint;
  const at::Tensor& x = b.inputs.at(0);
  if (x.defined() && !x.is_floating_point())
    hint = std::string("\nhint: the data's dtype (") + at::toString(x.scalar_type()) +
           ") does not fit the model's input, which takes floating-point values";
  else if (f.text.rfind("first layer", 0) == 0)
    hint = "\nhint: the data's shape does not fit the model's input: its " + f.text +
           " (unless the forward reshapes its input before that layer)";
  throw RuntimeError(head + "): " + model_error(libtorch_error) + hint);
}

void check_input_fits(const torch::jit::Module& model, const Batch& b, const std::string& what) {
  if (b.inputs.empty()) throw RuntimeError(what + ": a batch with no inputs");
  // Two samples where there are two: a forward that holds for one sample
  // only (an `assert x.size(0) == 1`) fails here, not in an artifact that
  // branch specialization freed of the assert.
  std::vector<c10::IValue> args;
  for (const auto& t : b.inputs)
    args.emplace_back(t.dim() > 0 && t.size(0) > 2 ? t.narrow(0, 0, 2) : t);
  torch::jit::Module m = model;  // shares the module; forward is not const
  try {
    torch::NoGradGuard no_grad;
    // One call: the optimizing executor's first (profiling) call of a large
    // graph costs 0.1-0.25 s more than the call itself (ShuffleNetV2 at
    // batch 1: 0.27 s against 0.05 s).
    NoGraphOptimization no_opt;
    m.forward(args);
  } catch (const c10::Error& e) {
    throw_input_mismatch(model, b, what, e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw_input_mismatch(model, b, what, e.what());
  }
}

}  // namespace tq
