#include "session.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>

#include "taoquant/calibration.h"
#include "taoquant/data.h"
#include "taoquant/error.h"
#include "taoquant/interrupt.h"
#include "taoquant/model.h"
#include "taoquant/sqnr.h"
#include "taoquant/steps.h"

namespace tq::tune {

namespace {

const DataSourceSpec& source_at(const Spec& spec, const std::string& key) {
  const auto& ds = spec.dataset;
  if (key == "dataset.validation_dataset") return *ds.validation_dataset;
  if (key == "dataset.test_dataset") return *ds.test_dataset;
  return *ds.quant_calibration_dataset;
}

// The plan's quantized weight formats, else int8.
std::vector<DType> default_formats(const Plan& plan) {
  std::vector<DType> out;
  for (const auto& lp : plan.layers)
    if (lp.quantized() && lp.weights.quantized() &&
        std::find(out.begin(), out.end(), lp.weights.dtype) == out.end())
      out.push_back(lp.weights.dtype);
  if (out.empty()) out.push_back(DType::kInt8);
  return out;
}

}  // namespace

EvalSample read_sample(const Spec& spec, const std::string& key, size_t max_samples) {
  std::shared_ptr<DataLoader> loader =
      make_data_loader(spec, source_at(spec, key), key, /*want_labels=*/true);
  EvalSample s;
  s.key = key;
  std::vector<at::Tensor> labels;
  Batch b;
  while (s.samples < max_samples && loader->next(b)) {
    throw_if_interrupted();
    check_finite(b, *loader, "evaluation data " + key);
    const auto take = static_cast<int64_t>(
        std::min<size_t>(static_cast<size_t>(b.inputs.at(0).size(0)), max_samples - s.samples));
    std::vector<at::Tensor> in;
    for (const auto& t : b.inputs) in.push_back(t.narrow(0, 0, take));
    s.batches.push_back(in);
    if (b.labels.defined()) labels.push_back(b.labels.narrow(0, 0, take));
    s.samples += static_cast<size_t>(take);
  }
  if (s.samples == 0) throw RuntimeError(key + ": no samples (" + loader->describe() + ")");
  if (labels.size() == s.batches.size()) s.labels = at::cat(labels);
  s.description =
      key + " " + loader->describe() + ", first " + std::to_string(s.samples) + " samples";
  s.loader = std::move(loader);
  return s;
}

void check_sample_labels(const EvalSample& s, int64_t classes) {
  if (s.has_labels()) check_labels(s.labels, 0, *s.loader, classes, "evaluation data " + s.key);
}

Metrics metrics_against(const at::Tensor& reference, const at::Tensor& labels,
                        const at::Tensor& out_) {
  const at::Tensor out = out_.to(at::kFloat).flatten(1);
  const at::Tensor ref = reference.narrow(0, 0, out.size(0));
  Metrics m;
  SqnrEnergy e;
  e.add_sums(ref.pow(2).sum().item<double>(), (ref - out).pow(2).sum().item<double>());
  m.sqnr_db = e.db();
  const at::Tensor pred = out.argmax(1);
  const auto n = static_cast<double>(out.size(0));
  m.top1_agreement = 100.0 * pred.eq(ref.argmax(1)).sum().item<double>() / n;
  if (labels.defined())
    m.top1 = 100.0 * pred.eq(labels.narrow(0, 0, out.size(0))).sum().item<double>() / n;
  return m;
}

}  // namespace tq::tune

namespace tq {

std::string evaluation_source(const Spec& spec, const std::string& data) {
  const auto& ds = spec.dataset;
  if (data == "validation" || (data.empty() && ds.validation_dataset)) {
    if (!ds.validation_dataset)
      throw SpecError(spec.loc("dataset"),
                      "the evaluation data is dataset.validation_dataset, which is not set; set "
                      "it, or use the test data (data: test) or the calibration data "
                      "(data: calibration)");
    return "dataset.validation_dataset";
  }
  if (data == "test" || (data.empty() && ds.test_dataset)) {
    if (!ds.test_dataset)
      throw SpecError(spec.loc("dataset"),
                      "the evaluation data is dataset.test_dataset, which is not set; set it, or "
                      "use the calibration data (data: calibration)");
    return "dataset.test_dataset";
  }
  require_calibration(spec);
  if (!ds.quant_calibration_dataset)
    throw SpecError(spec.loc("dataset"),
                    "no evaluation data: set dataset.test_dataset or "
                    "dataset.quant_calibration_dataset");
  return "dataset.quant_calibration_dataset";
}

std::vector<DType> parse_formats(const std::vector<std::string>& names, const SourceLoc& loc,
                                 const std::string& key) {
  std::vector<DType> out;
  for (const auto& n : names) {
    auto d = dtype_table().parse(n);
    if (!d)
      throw SpecError(loc, key + ": '" + n + "' is not a dtype (expected one of " +
                               dtype_table().joined() + ")" +
                               did_you_mean(n, dtype_table().names()));
    if (std::find(out.begin(), out.end(), *d) == out.end()) out.push_back(*d);
  }
  return out;
}

}  // namespace tq

namespace tq::tune {

Session::Session(const Spec& spec, const std::vector<DType>& formats, const std::string& data,
                 size_t max_samples, const Progress& progress)
    : spec_(spec) {
  if (progress) progress("planning", 0, 1);
  inspect_ = run_inspect(spec);
  formats_ = formats.empty() ? default_formats(inspect_.plan) : formats;
  read(data, max_samples);
  start(progress);
}

Session::Session(const Spec& spec, InspectOutcome run, const std::vector<DType>& formats)
    : spec_(spec), inspect_(std::move(run)) {
  formats_ = formats.empty() ? default_formats(inspect_.plan) : formats;
}

void Session::read(const std::string& data, size_t max_samples) {
  sample_ = read_sample(spec_, evaluation_source(spec_, data), max_samples);
  if (!loaded_) model_ = load_model(spec_.quantize.model_path, spec_.loc("quantize.model_path"));
  loaded_ = true;
}

void Session::start(const Progress& progress, const InputRanges& ranges) {
  if (!sim_) {
    const auto caps = inspect_.backend.info->caps.for_mode(inspect_.plan.mode);
    sim_ = std::make_unique<Simulator>(inspect_.plan, model_, formats_, caps);
  }
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<CalibrationData> calib;
  sim_->quantize_inputs(ranges, [&]() -> CalibrationData* {
    require_calibration(spec_);
    loader = make_data_loader(spec_, *spec_.dataset.quant_calibration_dataset,
                              "dataset.quant_calibration_dataset", /*want_labels=*/false);
    calib = std::make_unique<CalibrationData>(*loader, progress);
    return calib.get();
  });
  sim_->assign({});
  std::vector<at::Tensor> outs;
  for (const auto& b : sample_.batches) {
    try {
      outs.push_back(sim_->run(b));
    } catch (const c10::Error& e) {  // the first batch: the data does not fit the model
      if (!outs.empty()) throw;
      throw_input_mismatch(model_, Batch{b, {}, 0}, "evaluation data", e.what_without_backtrace());
    }
  }
  reference_ = at::cat(outs).to(at::kFloat).flatten(1);
  check_sample_labels(sample_, reference_.size(1));
  if (sample_.has_labels()) float_top1_ = metrics_of(reference_).top1;
}

Session::~Session() = default;

InputRanges input_ranges(const QuantRecord& record) {
  InputRanges out;
  for (const auto& l : record.layers)
    if (const QuantTensor* t = l.quantized ? record.input_of(l.name) : nullptr)
      out.emplace(l.name, t->qparams());
  return out;
}

Metrics Session::metrics_of(const at::Tensor& out) const {
  return metrics_against(reference_, sample_.labels, out);
}

Metrics Session::measure(const Assignment& a, size_t limit) {
  sim_->assign(a);
  std::vector<at::Tensor> outs;
  size_t n = 0;
  for (const auto& b : sample_.batches) {
    throw_if_interrupted();
    if (limit && n >= limit) break;
    const auto size = static_cast<size_t>(b.at(0).size(0));
    if (!limit || n + size <= limit) {
      outs.push_back(sim_->run(b));
    } else {  // the leading part of this batch completes the limit
      std::vector<at::Tensor> part;
      for (const auto& t : b) part.push_back(t.narrow(0, 0, static_cast<int64_t>(limit - n)));
      outs.push_back(sim_->run(part));
    }
    n += static_cast<size_t>(outs.back().size(0));
  }
  ++forwards_;
  return metrics_of(at::cat(outs));
}

}  // namespace tq::tune
