// The "pot_mse" observer (see pot_observer.h).
#include "pot_observer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace pot_int8 {

namespace {

[[noreturn]] void config_error(const std::string& msg) {
  // No location: ObserverRegistry::create() adds the spec location.
  throw tq::SpecError({}, "observer 'pot_mse': " + msg);
}

int int_kwarg(const nlohmann::json& v, const std::string& key, int lo, int hi) {
  const bool integral = v.is_number_integer() ||
                        (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (!integral)
    config_error(key + ": expected an integer in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "], got " + v.dump());
  const double d = v.get<double>();
  if (d < lo || d > hi)
    config_error(key + ": " + v.dump() + " is outside [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]");
  return static_cast<int>(d);
}

// Integral from 0 to x of the squared error of rounding to multiples of s,
// with values above `clip` = qlim * s clamped to it.
double error_integral(double x, double s, int qlim) {
  const double clip = qlim * s;
  if (x > clip) {
    const double d = x - clip;
    return qlim * s * s * s / 12.0 + d * d * d / 3.0;
  }
  const double m = std::nearbyint(x / s);
  const double r = x - m * s;
  return m * s * s * s / 12.0 + r * r * r / 3.0;
}

double point_error(double x, double s, int qlim) {
  const double q = std::min(std::nearbyint(x / s), static_cast<double>(qlim)) * s;
  return (x - q) * (x - q);
}

}  // namespace

PotMseObserver::PotMseObserver(const tq::ObserverConfig& cfg) : cfg_(cfg) {
  const auto traits = tq::dtype_traits(cfg.dtype);
  if (!traits.is_integer || !traits.is_signed)
    config_error("needs a signed integer dtype (int8, int4), got '" +
                 std::string(tq::to_string(cfg.dtype)) + "'");
  if (!cfg.symmetric) config_error("is symmetric only (power-of-two scales with zero point 0)");
  tq::quant_range(cfg.dtype, cfg.reduce_range, qmin_, qmax_);
  const int dtype_min = qmin_, dtype_max = qmax_;
  if (!cfg.kwargs.is_null() && !cfg.kwargs.is_object()) config_error("kwargs must be a map");
  for (const auto& [key, v] : cfg.kwargs.items()) {
    if (key == "search")
      search_ = int_kwarg(v, key, 0, 8);
    else if (key == "bins_per_octave")
      bins_per_octave_ = int_kwarg(v, key, 4, 64);
    else if (key == "quant_min")
      qmin_ = int_kwarg(v, key, dtype_min, -1);
    else if (key == "quant_max")
      qmax_ = int_kwarg(v, key, 1, dtype_max);
    else
      config_error("unknown kwarg '" + key +
                   "' (accepted: search, bins_per_octave, quant_min, quant_max)");
  }
}

double PotMseObserver::edge(size_t i) const {
  return std::exp2(kMinExp + static_cast<double>(i) / bins_per_octave_);
}

void PotMseObserver::observe(const at::Tensor& x) {
  if (x.numel() == 0) return;
  at::Tensor xf = x.detach().to(at::kCPU, at::kFloat);
  if (!at::isfinite(xf).all().item<bool>())
    throw tq::RuntimeError("observer 'pot_mse': the observed tensor has NaN or infinite values");
  at::Tensor xc;
  if (cfg_.per_channel) {
    const int64_t dim = xf.dim();
    int64_t axis = cfg_.axis < 0 ? cfg_.axis + dim : cfg_.axis;
    if (axis < 0 || axis >= dim)
      throw tq::RuntimeError("observer 'pot_mse': channel axis " + std::to_string(cfg_.axis) +
                             " is out of range for a tensor of " + std::to_string(dim) +
                             " dimensions");
    xc = xf.transpose(0, axis).reshape({xf.size(axis), -1});
  } else {
    xc = xf.reshape({1, -1});
  }
  const auto c = static_cast<size_t>(xc.size(0));
  if (channels_ == 0) {
    channels_ = c;
    hist_.assign(c * 2 * bins(), 0.0);
    amax_.assign(c, 0.0);
    min_.assign(c, std::numeric_limits<double>::infinity());
    max_.assign(c, -std::numeric_limits<double>::infinity());
  } else if (c != channels_) {
    throw tq::RuntimeError("observer 'pot_mse': saw " + std::to_string(c) + " channels, earlier " +
                           std::to_string(channels_));
  }
  at::Tensor a = xc.abs();
  auto amax = a.amax(1).to(at::kDouble).contiguous();
  auto mn = xc.amin(1).to(at::kDouble).contiguous();
  auto mx = xc.amax(1).to(at::kDouble).contiguous();
  for (size_t i = 0; i < c; ++i) {
    amax_[i] = std::max(amax_[i], amax.data_ptr<double>()[i]);
    min_[i] = std::min(min_[i], mn.data_ptr<double>()[i]);
    max_[i] = std::max(max_[i], mx.data_ptr<double>()[i]);
  }
  // Bin index of every |x| >= 2^kMinExp; smaller values count as exact zeros.
  const double tiny = std::exp2(kMinExp);
  const int64_t nb = static_cast<int64_t>(bins());
  at::Tensor bin = ((a.clamp_min(tiny).log2() - kMinExp) * bins_per_octave_)
                       .floor()
                       .clamp(0, nb - 1)
                       .to(at::kLong);
  at::Tensor row = at::arange(static_cast<int64_t>(c), at::kLong).unsqueeze(1).expand_as(bin);
  at::Tensor flat = (row * 2 + xc.lt(0).to(at::kLong)) * nb + bin;
  flat = flat.masked_select(a.ge(tiny));
  at::Tensor counts =
      at::bincount(flat, {}, static_cast<int64_t>(c) * 2 * nb).to(at::kDouble).contiguous();
  const double* p = counts.data_ptr<double>();
  for (size_t i = 0; i < hist_.size(); ++i) hist_[i] += p[i];
}

double PotMseObserver::expected_error(size_t channel, int k) const {
  const double s = std::ldexp(1.0, k);
  const size_t nb = bins();
  double err = 0;
  for (int neg = 0; neg < 2; ++neg) {
    const int qlim = neg ? -qmin_ : qmax_;
    const double* h = hist_.data() + (channel * 2 + static_cast<size_t>(neg)) * nb;
    for (size_t i = 0; i < nb; ++i) {
      if (h[i] == 0) continue;
      const double lo = edge(i);
      const double hi = std::min(edge(i + 1), std::max(amax_[channel], lo));
      if (hi - lo <= lo * 1e-12) {
        err += h[i] * point_error(lo, s, qlim);
        continue;
      }
      err += h[i] * (error_integral(hi, s, qlim) - error_integral(lo, s, qlim)) / (hi - lo);
    }
  }
  return err;
}

tq::QParams PotMseObserver::finalize() {
  if (channels_ == 0) throw tq::RuntimeError("observer 'pot_mse': finalize() before any observe()");
  tq::QParams q;
  q.dtype = cfg_.dtype;
  q.per_channel = cfg_.per_channel;
  q.axis = cfg_.axis;
  q.quant_min = qmin_;
  q.quant_max = qmax_;
  q.scale.resize(channels_);
  q.zero_point.assign(channels_, 0);
  q.min_val = *std::min_element(min_.begin(), min_.end());
  q.max_val = *std::max_element(max_.begin(), max_.end());
  q.clip_min = std::numeric_limits<double>::infinity();
  q.clip_max = -std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < channels_; ++c) {
    int best = 0;
    if (amax_[c] > 0) {
      // The smallest k with qmax * 2^k >= amax (no clipping).
      int e = 0;
      const double m = std::frexp(amax_[c] / qmax_, &e);
      int k = m == 0.5 ? e - 1 : e;
      while (qmax_ * std::ldexp(1.0, k) < amax_[c]) ++k;
      best = k;
      double best_err = expected_error(c, k);
      for (int j = 1; j <= search_; ++j) {
        const double err = expected_error(c, k - j);
        if (err < best_err) {
          best_err = err;
          best = k - j;
        }
      }
    }
    const double s = std::ldexp(1.0, best);
    q.scale[c] = static_cast<float>(s);
    q.clip_min = std::min(q.clip_min, std::max(min_[c], qmin_ * s));
    q.clip_max = std::max(q.clip_max, std::min(max_[c], qmax_ * s));
  }
  return q;
}

}  // namespace pot_int8

TAOQUANT_REGISTER_OBSERVER(
    pot_int8::PotMseObserver, "pot_mse",
    "power-of-two scale with the least expected squared error (pot_int8 example)");
