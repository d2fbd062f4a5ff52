// The one SQNR of tao-quant: signal and noise energy in double,
// 10 log10(signal / noise) dB, +inf when the two agree exactly. Weights,
// layer outputs, model outputs and evaluate all accumulate into this.
// Torch-free.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace tq {

struct SqnrEnergy {
  double signal = 0;
  double noise = 0;
  void add(float ref, float x) {
    const double r = ref;
    const double d = r - static_cast<double>(x);
    signal += r * r;
    noise += d * d;
  }
  // Adds energies summed elsewhere (e.g. by a tensor reduction).
  void add_sums(double signal_sum, double noise_sum) {
    signal += signal_sum;
    noise += noise_sum;
  }
  double db() const {
    if (noise == 0) return std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(signal / std::max(noise, 1e-300));
  }
};

// SQNR of x against ref over n values.
inline double sqnr_db(const float* ref, const float* x, size_t n) {
  SqnrEnergy e;
  for (size_t i = 0; i < n; ++i) e.add(ref[i], x[i]);
  return e.db();
}

}  // namespace tq
