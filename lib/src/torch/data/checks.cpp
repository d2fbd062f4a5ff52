// What is checked of every batch before anything is computed from it:
// finite inputs, and labels in the model's range.
#include <ATen/ATen.h>

#include "data_impl.h"
#include "taoquant/data.h"
#include "taoquant/error.h"

namespace tq {

namespace {

// "NaN", "+inf" or "-inf": what the first non-finite value of `t` is.
std::string non_finite_kind(const at::Tensor& t) {
  if (t.isnan().any().item<bool>()) return "NaN";
  return (t.isposinf().any().item<bool>() ? "+inf" : "-inf");
}

}  // namespace

void check_finite(const Batch& b, const DataLoader& loader, const std::string& what) {
  for (size_t k = 0; k < b.inputs.size(); ++k) {
    const at::Tensor& x = b.inputs[k];
    if (!x.defined() || !x.is_floating_point() || x.dim() == 0) continue;
    if (x.isfinite().all().item<bool>()) continue;
    const at::Tensor bad = x.isfinite().logical_not().reshape({x.size(0), -1}).any(1);
    const int64_t i = bad.nonzero()[0][0].item<int64_t>();
    throw RuntimeError(what + " (" + loader.describe() +
                       "): " + loader.sample_name(b.first_index + static_cast<size_t>(i)) +
                       " holds " + non_finite_kind(x[i]) + " (input " + std::to_string(k) +
                       "); nothing is computed from non-finite data (every statistic and output "
                       "it reaches would be NaN): fix or remove the sample");
  }
}

void check_labels(const at::Tensor& labels, size_t first_position, const DataLoader& loader,
                  int64_t classes, const std::string& what) {
  if (!labels.defined() || labels.numel() == 0) return;
  const at::Tensor bad = (labels < 0).logical_or(labels >= classes);
  if (!bad.any().item<bool>()) return;
  const int64_t i = bad.nonzero()[0][0].item<int64_t>();
  throw RuntimeError(what + " (" + loader.describe() + "): label " +
                     std::to_string(labels[i].item<int64_t>()) + " at " +
                     loader.sample_name(first_position + static_cast<size_t>(i)) +
                     " is out of range: the model has " + std::to_string(classes) +
                     " outputs, so labels are 0.." + std::to_string(classes - 1) +
                     " (check the label key or the classes of the data, and that the model "
                     "and the data belong together)");
}

}  // namespace tq
