// Observers: see calibration tensors, then produce quantization parameters.
// Each observer is its own registered class (one file each):
//   TAOQUANT_REGISTER_OBSERVER(MinMaxObserver, "minmax", "running min/max");
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include "taoquant/json.h"

#include "taoquant/enums.h"
#include "taoquant/error.h"
#include "taoquant/registry.h"

namespace tq {

// What the qparams are for.
struct ObserverConfig {
  DType dtype = DType::kUInt8;  // int8, uint8, int4, fp8_* (fp8: amax only)
  bool symmetric = false;
  bool per_channel = false;
  int axis = 0;                                      // channel axis when per_channel
  bool reduce_range = false;                         // 7-bit range, as PyTorch's reduce_range
  nlohmann::json kwargs = nlohmann::json::object();  // observer_or_fake_quant_kwargs
};

// Quantization parameters (PyTorch conventions: q = clamp(round(x/scale) + zp)).
struct QParams {
  std::vector<float> scale;  // 1 (per-tensor) or C (per-channel)
  std::vector<int32_t> zero_point;
  int quant_min = 0, quant_max = 255;
  bool per_channel = false;
  int axis = 0;
  DType dtype = DType::kUInt8;
  // Observed range and the chosen clip (per-tensor; per-channel: min/max over channels).
  double min_val = 0, max_val = 0, clip_min = 0, clip_max = 0;
  double amax() const { return std::max(std::abs(clip_min), std::abs(clip_max)); }
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void observe(const at::Tensor& x) = 0;
  virtual QParams finalize() = 0;
  virtual std::string name() const = 0;
};

using ObserverFactory = std::function<std::unique_ptr<Observer>(const ObserverConfig&)>;

struct ObserverInfo {
  std::string name;
  std::string help;
  ObserverFactory factory;
  std::string registered_at;
  std::string origin = "built-in";  // or the plugin path
};

class ObserverRegistry : public Registry<ObserverInfo> {
 public:
  static ObserverRegistry& instance();  // created on first use
  std::vector<std::string> names() const { return keys(); }
  // Throws SpecError (with loc, did-you-mean) for an unknown name or bad kwargs.
  std::unique_ptr<Observer> create(const std::string& name, const ObserverConfig& cfg,
                                   const SourceLoc& loc = {}) const;

 protected:
  void validate(const ObserverInfo& info) const override;
  void stamp(ObserverInfo& info, const std::string& origin) const override;

 private:
  ObserverRegistry() : Registry("observer") {}
};

// Quantization range of a dtype (PyTorch: quint8 0..255, qint8 -128..127;
// reduce_range halves it).
void quant_range(DType dtype, bool reduce_range, int& qmin, int& qmax);

// `x` in the integer codes of `q` (uint8 for DType::kUInt8, else int8; per
// channel along q.axis), the values at::quantize_per_tensor / per_channel
// store (their int_repr): zero_point + round-half-even(x * (1 / scale)) in
// float32, clamped to the type's range. LibTorch 1.13 (without FBGEMM) runs
// that as a scalar loop; this one runs the channels in parallel.
at::Tensor quantize_codes(const at::Tensor& x, const QParams& q);

// qparams from a range, bit-identical to PyTorch's
// ObserverBase._calculate_qparams (float32 arithmetic).
QParams qparams_from_range(const std::vector<float>& min_vals, const std::vector<float>& max_vals,
                           const ObserverConfig& cfg);

namespace detail {
template <class T>
bool register_observer(const char* name, const char* help, const char* file, int line) {
  ObserverInfo info;
  info.name = name;
  info.help = help;
  info.factory = [](const ObserverConfig& c) { return std::unique_ptr<Observer>(new T(c)); };
  info.registered_at = std::string(file) + ":" + std::to_string(line);
  ObserverRegistry::instance().add(std::move(info));
  return true;
}
}  // namespace detail

}  // namespace tq

#define TAOQUANT_REGISTER_OBSERVER(Class, name, help)                                   \
  static const bool TQ_OBS_CONCAT(tq_observer_registered_, __LINE__) [[maybe_unused]] = \
      ::tq::detail::register_observer<Class>(name, help, __FILE__, __LINE__)
#define TQ_OBS_CONCAT_INNER(a, b) a##b
#define TQ_OBS_CONCAT(a, b) TQ_OBS_CONCAT_INNER(a, b)
