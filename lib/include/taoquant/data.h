// Data loaders for calibration and evaluation: image folders (OpenCV) and
// tensor files (.npz/.npy/.pt). Loaders stream: they never hold the whole
// dataset in memory.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "taoquant/json.h"

#include "taoquant/spec.h"

namespace torch::jit {
struct Module;
}

namespace tq {

struct Batch {
  std::vector<at::Tensor> inputs;  // one per model input (a tuple when > 1)
  at::Tensor labels;               // int64 [N]; undefined when the data has none
  size_t first_index = 0;          // index of the batch's first sample
};

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // Fills `out` with the next batch; false at the end.
  virtual bool next(Batch& out) = 0;
  // Back to the first batch (same order: shuffling is seeded).
  virtual void reset() = 0;
  virtual size_t num_samples() const = 0;  // after max_batches
  virtual size_t num_batches() const = 0;
  virtual bool has_labels() const = 0;
  virtual std::vector<std::string> class_names() const { return {}; }
  virtual std::string describe() const = 0;  // "npz calib.npz (512 samples, batch 32)"
  // The sample at `position` in the order batches are served (shuffling
  // included), as messages name it: "sample 37" (its index in the file),
  // "image 'dir/cls/x.png'".
  virtual std::string sample_name(size_t position) const {
    return "sample " + std::to_string(position);
  }
};

// Checks that every floating input of `b` (served by `loader`) is finite;
// a NaN or an infinity is a RuntimeError (exit 1) naming the data, the
// sample and the value: "calibration data (npz calib.npz ...): sample 37
// holds NaN (input 0); ...". Nothing may be computed from such a sample:
// one NaN makes every statistic and every output it reaches NaN.
void check_finite(const Batch& b, const DataLoader& loader, const std::string& what);

// Checks labels (int64 [N], the samples from position `first_position` on)
// against a model with `classes` outputs: a label < 0 or >= classes is a
// RuntimeError (exit 1) naming the data, the sample, the label and the
// range ("<what> (<data>): label 10 at sample 7 is out of range: the model
// has 10 outputs, so labels are 0..9 ...").
void check_labels(const at::Tensor& labels, size_t first_position, const DataLoader& loader,
                  int64_t classes, const std::string& what);

// The calibration data as the library serves it to a backend: the loop over
// the batches, the held-out batch and the facts for the report live here,
// not in each backend. Every batch but the last calibrates; the last is held
// out for fidelity measurements (with a single batch, that batch is both).
// Every batch is checked to be finite (check_finite) before any backend or
// algorithm sees it, and the loop is a safe point for SIGINT/SIGTERM
// (taoquant/interrupt.h).
class CalibrationData {
 public:
  using Progress = std::function<void(const std::string& what, size_t done, size_t total)>;
  explicit CalibrationData(DataLoader& loader, Progress progress = {});

  // The first batch, for input checks and specialization. Throws
  // RuntimeError when the data is empty.
  const Batch& first();
  // One calibration pass: `fn` sees each calibrating batch; `also_holdout` is
  // true for a single batch that is also the held-out one. Progress is shown
  // on the first pass only.
  using BatchFn = std::function<void(const std::vector<at::Tensor>& inputs, bool also_holdout)>;
  void pass(const BatchFn& fn);
  // The held-out batch (after a pass).
  const std::vector<at::Tensor>& holdout() const { return holdout_; }
  // samples and batches of the last pass, holdout samples, the data.
  nlohmann::json facts() const;
  std::string describe() const { return loader_.describe(); }

 private:
  DataLoader& loader_;
  Progress progress_;
  Batch first_;
  bool have_first_ = false;
  size_t passes_ = 0, samples_ = 0, batches_ = 0;
  std::vector<at::Tensor> holdout_;
};

// Opens a loader for a `dataset.*` section. `key` is its dotted spec key
// ("dataset.quant_calibration_dataset"), used with spec.loc() in messages.
// Errors (RuntimeError, exit 1) name the file: empty folder, unreadable
// image, missing npz key, unsupported dtype, inconsistent shapes.
std::unique_ptr<DataLoader> make_data_loader(const Spec& spec, const DataSourceSpec& src,
                                             const std::string& key, bool want_labels);

// Runs one forward pass on the first two samples of `b` (one, when the batch
// has one), as branch specialization's recording run would. When it fails,
// throws RuntimeError with the error the forward raised, as its code raised
// it (the model's own exception, or the failing op's message):
//   "the model's forward failed on the <what> (shape [1,1,28,28], which its
//    first layer ... takes): <the error>"
// and when the data does not fit the model's first layer (a Linear's input
// features, a conv's channels and rank, a floating dtype), that as a hint
// (only a guess: a forward may reshape its input before that layer):
//   "the model's forward failed on the <what> (shape [1,3,32,32]): <the
//    error>\nhint: the data's shape does not fit the model's input: its first
//    layer 'features.conv1' Conv2d expects 1 input channels (unless ...)"
void check_input_fits(const torch::jit::Module& model, const Batch& b,
                      const std::string& what = "calibration/test data");

// The error check_input_fits throws, for a forward pass on `b` that LibTorch
// rejected with `libtorch_error` (for callers whose first real pass doubles
// as the check).
[[noreturn]] void throw_input_mismatch(const torch::jit::Module& model, const Batch& b,
                                       const std::string& what, const std::string& libtorch_error);

}  // namespace tq
