// The quantize job: the pipeline (pipeline.cpp), with the sensitivity table
// (tune/sensitivity.cpp) as its report stage. It sits above both, so that
// neither includes the other: tune runs this job for its candidates, and
// the pipeline knows no tune code.
#include <algorithm>
#include <memory>

#include "taoquant/pipeline.h"
#include "taoquant/tune.h"

namespace tq {

namespace {

// The sensitivity table: automatic (opts.sensitivity_by_default) or asked
// for (quantize.sensitivity), measured on the run's plan and record once
// the artifact is saved and checked.
ReportStage sensitivity_stage(const Spec& spec, SensitivityOptions so) {
  auto options = std::make_shared<SensitivityOptions>(std::move(so));
  return {"sensitivity",
          [](const Spec& s) {
            // An explicit table's evaluation data must be set before any work.
            if (auto asked = sensitivity_request(s)) evaluation_source(s, asked->data);
          },
          [&spec, options](const InspectOutcome& run, const QuantizeOutcome& out,
                           const QuantRecord& record) {
            SensitivityStage stage(spec, *options, run);
            const auto quantized =
                std::count_if(out.plan.layers.begin(), out.plan.layers.end(),
                              [](const LayerPlan& lp) { return lp.quantized(); });
            return stage.measure(record, static_cast<size_t>(quantized),
                                 out.calibration.value("samples", size_t{0}));
          }};
}

}  // namespace

QuantizeOutcome run_quantize(const Spec& spec, const QuantizeOptions& opts) {
  std::vector<ReportStage> stages;
  if (auto so = sensitivity_request(spec, opts.sensitivity_by_default)) {
    so->on_progress = opts.on_progress;
    stages.push_back(sensitivity_stage(spec, std::move(*so)));
  }
  return run_quantize_stages(spec, opts, stages);
}

}  // namespace tq
