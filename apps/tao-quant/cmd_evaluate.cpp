// `tao-quant evaluate`: accuracy, fidelity against float, latency and
// quality gates (exit code 3 when a gate fails).
#include <iostream>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "option_table.h"
#include "taoquant/evaluate.h"
#include "taoquant/spec.h"

namespace tqcli {

void setup_evaluate(CLI::App& app, Options& o) {
  add_spec_options(app, o);
  add_options(app, o,
              {{Arg::kFlag, "--is-quantized", &Options::is_quantized,
                "Evaluate the quantized artifact (evaluate.checkpoint, else "
                "<results_dir>/quantized_model_<backend>.pth)"},
               {Arg::kOption, "--checkpoint", &Options::checkpoint,
                "The model to evaluate (wins over evaluate.checkpoint)", "PATH"},
               {Arg::kFlag, "--compare", &Options::compare,
                "Evaluate the float model (quantize.model_path) and the quantized one side by "
                "side: drop, fidelity, speedup, size ratio"},
               {Arg::kFlag, "--json", &Options::json,
                "Print the report as JSON on stdout instead of the table"}});
}

int run_evaluate(Options& o) {
  auto spec = tq::load_spec(o.spec, o.overrides);
  tq::EvaluateOptions eo;
  eo.is_quantized = o.is_quantized;
  eo.checkpoint = o.checkpoint;
  eo.compare = o.compare;
  eo.verbose = o.verbosity > 0;
  eo.on_progress = tty_progress(o);
  auto out = tq::run_evaluate(spec, eo);
  const std::string html = write_html(o, HtmlKind::kEvaluate, out.report, out.report_path);
  if (o.json)
    std::cout << out.report.dump(2) << "\n";
  else
    std::cout << tq::format_evaluate_table(out) << (html.empty() ? "" : "html: " + html + "\n")
              << std::flush;
  tq::throw_if_gates_failed(out);
  return 0;
}

}  // namespace tqcli
