// SVG chart geometry for the HTML reports. Each function returns a
// view-model (JSON) that a template partial turns into <svg> markup: the C++
// side computes positions, ticks and labels; the templates hold the markup.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

namespace tq::charts {

// "12.5", "0.031", "1.2e+05": short, readable numbers for labels.
std::string short_number(double v);

// Nice tick values covering [lo, hi] (about `target` of them).
std::vector<double> nice_ticks(double lo, double hi, int target);

// One horizontal bar per row (per layer), labels on the left. A row without
// a value is drawn as a marked placeholder with `note` (e.g. kept float).
struct BarRow {
  std::string label;
  std::optional<double> value;   // bar length
  std::optional<double> marker;  // a dot on the same row (e.g. output SQNR)
  std::string note;              // shown instead of / after the value
  std::string css;               // bar class: "q", "float", "exact"
};
nlohmann::json horizontal_bars(const std::vector<BarRow>& rows, const std::string& unit);

// A histogram of counts over [lo, hi] with the clip range [clip_lo, clip_hi]
// drawn on it (log-scaled counts).
nlohmann::json histogram(const std::vector<double>& counts, double lo, double hi, double clip_lo,
                         double clip_hi);

// Groups of bars (e.g. float vs quantized per batch size).
struct BarGroup {
  std::string label;
  std::string sublabel;                       // a second line under the label (e.g. the speed-up)
  std::vector<std::optional<double>> values;  // one per series
};
nlohmann::json grouped_bars(const std::vector<BarGroup>& groups,
                            const std::vector<std::string>& series, const std::string& unit);

// A scatter of labelled points.
struct Point {
  double x = 0, y = 0;
  std::string label, css;
};
nlohmann::json scatter(const std::vector<Point>& points, const std::string& x_label,
                       const std::string& y_label);

}  // namespace tq::charts
