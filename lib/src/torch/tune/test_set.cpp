#include "test_set.h"

#include <cmath>
#include <filesystem>

#include <torch/script.h>

#include "../evaluate/eval_impl.h"
#include "taoquant/calibration.h"
#include "taoquant/interrupt.h"
#include "taoquant/model.h"

namespace tq::tune {

namespace fs = std::filesystem;

namespace {

nlohmann::json optional_json(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The files (or folder) a data source reads, made absolute and normal.
std::vector<std::string> source_files(const DataSourceSpec& src) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : src.data_files) out.push_back(fs::weakly_canonical(f, ec).string());
  if (!src.images_dir.empty()) out.push_back(fs::weakly_canonical(src.images_dir, ec).string());
  return out;
}

at::Tensor model_outputs(torch::jit::Module m, const std::string& path,
                         const std::vector<std::vector<at::Tensor>>& batches) {
  m.eval();
  torch::NoGradGuard no_grad;
  NoGraphOptimization no_opt;  // a few calls: compile time would dominate
  std::vector<at::Tensor> outs;
  for (const auto& b : batches) {
    throw_if_interrupted();
    std::vector<c10::IValue> in(b.begin(), b.end());
    outs.push_back(eval::output_tensor(m.forward(in), path));
  }
  return at::cat(outs).to(at::kFloat).flatten(1);
}

}  // namespace

at::Tensor artifact_outputs(const std::string& path,
                            const std::vector<std::vector<at::Tensor>>& batches) {
  const std::string engine = eval::read_artifact_qengine(path);
  if (!engine.empty()) eval::set_qengine(engine, path);
  return model_outputs(torch::jit::load(path), path, batches);
}

nlohmann::json side_json(const std::string& data, size_t samples, const Metrics& m,
                         std::optional<double> float_top1) {
  std::optional<double> drop;
  if (m.top1 && float_top1) drop = *float_top1 - *m.top1;
  return {{"data", data},
          {"samples", samples},
          {"float_top1", optional_json(float_top1)},
          {"top1", optional_json(m.top1)},
          {"top1_drop", optional_json(drop)},
          {"sqnr_db", optional_json(m.sqnr_db)},
          {"top1_agreement", m.top1_agreement}};
}

std::string test_set_selection_warning(const Spec& spec, const std::string& key) {
  const auto& ds = spec.dataset;
  const bool same = key == "dataset.test_dataset" ||
                    (key == "dataset.validation_dataset" && ds.test_dataset &&
                     source_files(*ds.validation_dataset) == source_files(*ds.test_dataset));
  if (!same) return "";
  return "tune selects on the test set (" + key +
         (key == "dataset.test_dataset" ? "" : " reads dataset.test_dataset's data") +
         "): its top-1 figures are optimistic by construction; set dataset.validation_dataset "
         "to data the test set does not hold, and tune selects on it and reports the test set";
}

nlohmann::json test_set_report(const Spec& spec, const std::string& key, size_t max_samples,
                               const std::string& artifact) {
  if (!spec.dataset.test_dataset || !test_set_selection_warning(spec, key).empty()) return nullptr;
  const EvalSample test = read_sample(spec, "dataset.test_dataset", max_samples);
  const at::Tensor reference =
      model_outputs(load_model(spec.quantize.model_path, spec.loc("quantize.model_path")),
                    spec.quantize.model_path, test.batches);
  check_sample_labels(test, reference.size(1));
  const Metrics float_m = metrics_against(reference, test.labels, reference);
  const Metrics m =
      metrics_against(reference, test.labels, artifact_outputs(artifact, test.batches));
  return side_json(test.description, test.samples, m, float_m.top1);
}

}  // namespace tq::tune
