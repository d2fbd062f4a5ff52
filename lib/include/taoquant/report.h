// Reports: the quantize report JSON (schema_version 1) and the console lines
// and tables people read.
#pragma once

#include <string>
#include <vector>

#include "taoquant/json.h"

#include "taoquant/backend.h"
#include "taoquant/plan.h"

namespace tq {

struct QuantizeOutcome;

constexpr int kQuantizeReportSchema = 1;

struct QuantizeReportInput {
  const Spec& spec;
  const QuantizeOutcome& outcome;
  const nlohmann::json& backend_meta;
  const std::string& backend_origin;
  nlohmann::json timings;
};

nlohmann::json layers_to_json(const Plan& plan, const std::vector<LayerResult>& layers);
nlohmann::json make_quantize_report(const QuantizeReportInput& in);

// Tool and LibTorch versions, for reports and artifacts.
nlohmann::json tool_info();

// A finite double, or null for +-inf/NaN (JSON has no infinities).
nlohmann::json json_number(double v);

// "144.0 KiB"
std::string format_bytes(double bytes);
// "[ 3/21] layer1.0.conv1  Conv2d [64,64,3,3]  fp32 -> int8/per_channel  144.0 KiB -> 36.1 KiB
// SQNR 38.2 dB"
std::string format_layer_line(const LayerResult& r, size_t index, size_t total, size_t name_width);
// The end-of-run summary (sizes before/after, ratio, wall time, warnings).
std::string format_quantize_summary(const QuantizeOutcome& out);
// The plan as a table (inspect).
std::string format_plan_table(const Plan& plan);

// A simple left/right-aligned text table.
std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right_align = {});

}  // namespace tq
