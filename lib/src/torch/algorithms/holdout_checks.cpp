// The algorithms' held-out checks (issue 30): each algorithm measures the
// layer's output on the held-out calibration batch with and without its
// change, and a change that made it worse is not applied.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "taoquant/backend.h"
#include "torch/algorithms/pair_ops.h"

namespace tq {

CaptureOptions detail::holdout_capture() {
  CaptureOptions o;
  o.samples = [](const std::string&, const at::Tensor& x) {
    const int64_t n = x.dim() > 0 ? x.size(0) : 1;
    const int64_t per = std::max<int64_t>(1, x.numel() / std::max<int64_t>(n, 1));
    return std::clamp<int64_t>((int64_t{1} << 17) / per, 1, n);
  };
  return o;
}

namespace {

std::string db_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "exact" : "-inf dB";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f dB", v);
  return buf;
}

}  // namespace

bool detail::holdout_verdict(nlohmann::json& facts, double before, double after,
                             const char* algorithm) {
  facts["holdout_output_sqnr_db"] = {{"before", before}, {"after", after}};
  if (after >= before) return true;
  facts["rejected"] = std::string("on the held-out batch, the layer's output SQNR went from ") +
                      db_text(before) + " to " + db_text(after) + " with " + algorithm +
                      "; not applied to this layer";
  return false;
}

}  // namespace tq
