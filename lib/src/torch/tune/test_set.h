// Honest selection (issue 30): tune selects on the validation data when
// there is some, and the final artifact is then measured on the test set,
// reported beside the selection figures. Not installed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include "taoquant/json.h"

#include "session.h"

namespace tq::tune {

// The outputs of the artifact at `path` (loaded as plain LibTorch loads
// it, with the quantized engine it names) on `batches`, concatenated.
at::Tensor artifact_outputs(const std::string& path,
                            const std::vector<std::vector<at::Tensor>>& batches);

// The figures of one side of the report: {data, samples, float_top1,
// top1, top1_drop, sqnr_db, top1_agreement} (null where not measured).
nlohmann::json side_json(const std::string& data, size_t samples, const Metrics& m,
                         std::optional<double> float_top1);

// The warning for selection data that is the test set (`key`, the
// selection source, is dataset.test_dataset, or names the test set's
// files), else "".
std::string test_set_selection_warning(const Spec& spec, const std::string& key);

// The float model and the artifact on the first `max_samples` samples of
// dataset.test_dataset (side_json), when the selection data `key` is
// other data; null when there is no test set or it was the selection data.
nlohmann::json test_set_report(const Spec& spec, const std::string& key, size_t max_samples,
                               const std::string& artifact);

}  // namespace tq::tune
