// The calibration loop that every calibrating backend shares.
#include <ATen/ATen.h>

#include "taoquant/data.h"
#include "taoquant/error.h"
#include "taoquant/interrupt.h"

namespace tq {

namespace {
const char* const kWhat = "calibration data dataset.quant_calibration_dataset";
}  // namespace

CalibrationData::CalibrationData(DataLoader& loader, Progress progress)
    : loader_(loader), progress_(std::move(progress)) {}

const Batch& CalibrationData::first() {
  if (!have_first_) {
    loader_.reset();
    if (!loader_.next(first_)) throw RuntimeError("calibration data is empty: " + describe());
    check_finite(first_, loader_, kWhat);
    have_first_ = true;
  }
  return first_;
}

void CalibrationData::pass(const BatchFn& fn) {
  const bool show = passes_++ == 0 && progress_;
  samples_ = batches_ = 0;
  auto run = [&](const std::vector<at::Tensor>& in, bool also_holdout) {
    fn(in, also_holdout);
    samples_ += in.empty() ? 0 : static_cast<size_t>(in[0].size(0));
    ++batches_;
  };
  loader_.reset();
  const size_t total = loader_.num_batches();
  Batch b;
  std::vector<at::Tensor> prev;
  size_t done = 0;
  while (loader_.next(b)) {
    throw_if_interrupted();
    check_finite(b, loader_, kWhat);
    if (!prev.empty()) run(prev, false);
    prev = std::move(b.inputs);
    if (show) progress_("calibrate", ++done, total);
  }
  if (prev.empty()) throw RuntimeError("calibration data is empty: " + describe());
  if (batches_ == 0) run(prev, true);
  holdout_ = std::move(prev);
}

nlohmann::json CalibrationData::facts() const {
  return {{"samples", samples_},
          {"batches", batches_},
          {"holdout_samples", holdout_.empty() ? 0 : holdout_[0].size(0)},
          {"data", describe()}};
}

}  // namespace tq
