#include "charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tq::charts {

using nlohmann::json;

namespace {

constexpr double kCharW = 7.6;  // monospace 11px is 0.6em (6.6 px) a character; fallbacks are wider

double round1(double v) {
  return std::round(v * 10.0) / 10.0;
}

// Keeps the tail of a long label ("…layer4.1.conv2"): the tail tells layers apart.
std::string clip_label(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  return "\u2026" + s.substr(s.size() - (max_chars - 1));
}

// Keeps the head of a long note ("kept float: int8 slower than…").
std::string clip_tail(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  return s.substr(0, max_chars - 1) + "\u2026";
}

struct Scale {
  double d0, d1, r0, r1;
  double operator()(double v) const {
    if (d1 == d0) return r0;
    return round1(r0 + (v - d0) / (d1 - d0) * (r1 - r0));
  }
};

// The domain [lo, hi] widened to nice ticks; returns the ticks.
std::vector<double> nice_domain(double& lo, double& hi, int target) {
  if (!(hi > lo)) hi = lo + 1.0;
  auto ticks = nice_ticks(lo, hi, target);
  lo = std::min(lo, ticks.front());
  hi = std::max(hi, ticks.back());
  return ticks;
}

json axis_ticks_x(const std::vector<double>& ticks, const Scale& sx, double y0, double y1) {
  json out = json::array();
  for (double t : ticks)
    out.push_back(
        {{"x", sx(t)}, {"y1", y0}, {"y2", y1}, {"ty", y1 + 12}, {"label", short_number(t)}});
  return out;
}

json axis_ticks_y(const std::vector<double>& ticks, const Scale& sy, double x0, double x1) {
  json out = json::array();
  for (double t : ticks)
    out.push_back({{"y", sy(t)},
                   {"x1", x0},
                   {"x2", x1},
                   {"tx", x0 - 4},
                   {"ty", sy(t) + 4},
                   {"label", short_number(t)}});
  return out;
}

}  // namespace

std::string short_number(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (v == 0)
    return "0";
  else if (a >= 1e5 || a < 1e-3)
    std::snprintf(buf, sizeof buf, "%.2g", v);
  else if (a >= 100)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 1)
    std::snprintf(buf, sizeof buf, "%.2f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3f", v);
  std::string s = buf;
  // "20.0" -> "20", "0.500" -> "0.5"
  if (s.find('.') != std::string::npos && s.find('e') == std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  const double first = std::floor(lo / step) * step;
  // From the tick at or below lo to the first at or above hi.
  for (double t = first; out.size() < 50; t += step) {
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return out;
}

json horizontal_bars(const std::vector<BarRow>& rows, const std::string& unit) {
  size_t chars = 8;
  double lo = 0, hi = 10;
  for (const auto& r : rows) {
    chars = std::max(chars, std::min<size_t>(r.label.size(), 36));
    for (const auto& v : {r.value, r.marker})
      if (v) lo = std::min(lo, *v), hi = std::max(hi, *v);
  }
  const auto ticks = nice_domain(lo, hi, 6);
  const double row_h = 18, top = 8, left = std::ceil(double(chars) * kCharW) + 12;
  const double plot_w = 420, note_w = 370;  // notes: at most 56 characters
  const double bottom = top + row_h * double(rows.size());
  const Scale sx{lo, hi, left, left + plot_w};
  json out_rows = json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double y = top + row_h * double(i);
    json row{{"label", clip_label(r.label, 36)},
             {"title", r.label},
             {"lx", left - 6},
             {"ly", y + 13},
             {"css", r.css.empty() ? "q" : r.css},
             {"note", clip_tail(r.note, 56)},
             {"full_note", r.note}};
    const double x0 = sx(std::max(lo, 0.0));
    const double x1 = r.value ? sx(*r.value) : sx(hi);
    row["x"] = std::min(x0, x1);
    row["y"] = y + 3;
    row["w"] = round1(std::abs(x1 - x0));
    row["h"] = row_h - 6;
    row["value"] = r.value ? short_number(*r.value) + " " + unit : "";
    row["tx"] = (r.value ? std::max(x0, x1) : left + plot_w) + 4;
    if (r.marker) row["marker"] = {{"cx", sx(*r.marker)}, {"cy", y + row_h / 2}};
    out_rows.push_back(std::move(row));
  }
  return {{"width", left + plot_w + note_w},
          {"height", bottom + 34},
          {"rows", out_rows},
          {"ticks", axis_ticks_x(ticks, sx, top, bottom + 4)},
          {"axis_label", unit},
          {"ax", left + plot_w / 2},
          {"ay", bottom + 30}};
}

json histogram(const std::vector<double>& counts, double lo, double hi, double clip_lo,
               double clip_hi) {
  const double w = 260, h = 96, pad = 6, plot_h = 72;
  const Scale sx{lo, hi, pad, w - pad};
  double cmax = 0;
  for (double c : counts) cmax = std::max(cmax, c);
  const double lmax = std::log1p(cmax);
  json bars = json::array();
  const double bw = counts.empty() ? 0 : (w - 2 * pad) / double(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] <= 0) continue;
    const double bh = lmax > 0 ? std::max(1.0, std::log1p(counts[i]) / lmax * plot_h) : 0;
    bars.push_back({{"x", round1(pad + bw * double(i))},
                    {"y", round1(pad + plot_h - bh)},
                    {"w", round1(std::max(bw - 0.5, 0.5))},
                    {"h", round1(bh)}});
  }
  const double cl = sx(std::clamp(clip_lo, lo, hi)), ch = sx(std::clamp(clip_hi, lo, hi));
  json ticks = json::array({{{"x", pad}, {"anchor", "start"}, {"label", short_number(lo)}},
                            {{"x", w - pad}, {"anchor", "end"}, {"label", short_number(hi)}}});
  const double zx = sx(0.0);
  if (lo < 0 && hi > 0 && zx - pad > 40 && w - pad - zx > 40)
    ticks.push_back({{"x", zx}, {"anchor", "middle"}, {"label", "0"}});
  return {{"width", w},
          {"height", h},
          {"bars", bars},
          {"base", pad + plot_h},
          {"ty", h - 4},
          {"ticks", ticks},
          {"clip_lo", cl},
          {"clip_hi", ch},
          {"left", pad},
          {"right", w - pad},
          {"top", pad},
          {"clip_w_lo", round1(cl - pad)},
          {"clip_w_hi", round1(w - pad - ch)},
          {"plot_h", plot_h}};
}

json grouped_bars(const std::vector<BarGroup>& groups, const std::vector<std::string>& series,
                  const std::string& unit) {
  double hi = 0;
  for (const auto& g : groups)
    for (const auto& v : g.values)
      if (v) hi = std::max(hi, *v);
  double lo = 0;
  const auto ticks = nice_domain(lo, hi, 5);
  const double left = 56, top = 36, plot_h = 170, bar_w = 34, gap = 26;
  const double group_w = bar_w * double(series.size()) + gap;
  const double width = left + std::max(240.0, group_w * double(groups.size())) + 16;
  const Scale sy{0, hi, top + plot_h, top};
  json out = json::array();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double gx = left + gap / 2 + group_w * double(g);
    json bars = json::array();
    for (size_t s = 0; s < series.size() && s < groups[g].values.size(); ++s) {
      const auto& v = groups[g].values[s];
      if (!v) continue;
      const double y = sy(*v);
      bars.push_back({{"x", gx + bar_w * double(s)},
                      {"y", y},
                      {"w", bar_w - 4},
                      {"h", round1(top + plot_h - y)},
                      {"css", "s" + std::to_string(s)},
                      {"tx", gx + bar_w * double(s) + (bar_w - 4) / 2},
                      {"ty", y - 3},
                      {"label", short_number(*v)},
                      {"title", series[s] + ": " + short_number(*v) + " " + unit}});
    }
    out.push_back({{"bars", bars},
                   {"label", groups[g].label},
                   {"sublabel", groups[g].sublabel},
                   {"lx", gx + bar_w * double(series.size()) / 2},
                   {"ly", top + plot_h + 16},
                   {"sy", top + plot_h + 30}});
  }
  json legend = json::array();
  for (size_t s = 0; s < series.size(); ++s)
    legend.push_back({{"label", series[s]},
                      {"css", "s" + std::to_string(s)},
                      {"x", left + 120.0 * double(s)},
                      {"tx", left + 120.0 * double(s) + 14}});
  return {{"width", width},
          {"height", top + plot_h + 54},
          {"groups", out},
          {"ticks", axis_ticks_y(ticks, sy, left, width - 16)},
          {"legend", legend},
          {"unit", unit},
          {"unit_y", top + plot_h + 48},
          {"base", top + plot_h},
          {"left", left},
          {"right", width - 16}};
}

json scatter(const std::vector<Point>& points, const std::string& x_label,
             const std::string& y_label) {
  double x0 = 0, x1 = 2, y0 = 0, y1 = 1;
  for (const auto& p : points)
    x0 = std::min(x0, p.x), x1 = std::max(x1, p.x), y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
  const auto xt = nice_domain(x0, x1, 6), yt = nice_domain(y0, y1, 5);
  const double left = 60, top = 14, w = 460, h = 260;
  const Scale sx{x0, x1, left, left + w}, sy{y0, y1, top + h, top};
  json pts = json::array();
  std::vector<std::pair<double, double>> placed;  // label positions so far
  for (const auto& p : points) {
    const double tx = sx(p.x) + 7, lw = double(p.label.size()) * kCharW;
    double ty = sy(p.y) + 4;
    // Move a label down until it overlaps none placed before it.
    for (int tries = 0; tries < 8; ++tries) {
      bool clash = false;
      for (const auto& [px, py] : placed)
        clash = clash || (std::abs(py - ty) < 12 && std::abs(px - tx) < lw + 4);
      if (!clash) break;
      ty += 12;
    }
    placed.emplace_back(tx, ty);
    pts.push_back({{"cx", sx(p.x)},
                   {"cy", sy(p.y)},
                   {"label", p.label},
                   {"css", p.css},
                   {"tx", tx},
                   {"ty", ty},
                   {"title", p.label + ": " + short_number(p.x) + ", " + short_number(p.y)}});
  }
  return {{"width", left + w + 20},
          {"height", top + h + 44},
          {"points", pts},
          {"xticks", axis_ticks_x(xt, sx, top, top + h + 4)},
          {"yticks", axis_ticks_y(yt, sy, left, left + w)},
          {"x_label", x_label},
          {"y_label", y_label},
          {"xl_x", left + w / 2},
          {"xl_y", top + h + 38},
          {"yl_x", 14},
          {"yl_y", top + h / 2},
          {"one_x", x0 <= 1 && 1 <= x1 ? json(sx(1.0)) : json(nullptr)},
          {"zero_y", sy(0.0)},
          {"top", top},
          {"bottom", top + h},
          {"left", left},
          {"right", left + w}};
}

}  // namespace tq::charts
