// `moving_average_minmax`: PyTorch's MovingAverageMinMaxObserver and
// MovingAveragePerChannelMinMaxObserver. The first batch sets the range; each
// later batch moves it by averaging_constant * (batch range - range), in
// float32 as PyTorch does, so the qparams are bit-identical.
#include "common.h"

namespace tq {
namespace {

class MovingAverageMinMaxObserver : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(const ObserverConfig& cfg) : cfg_(cfg) {
    obs::Kwargs kw(name(), cfg.kwargs);
    // PyTorch keeps the constant as a Python float; the tensor op uses it as float32.
    c_ = float(kw.number("averaging_constant", 0.01, 0.0, 1.0, true, false));
    kw.finish();
    obs::check_config(cfg, name());
  }

  void observe(const at::Tensor& x) override {
    if (x.numel() == 0) return;
    at::Tensor xf = obs::as_float(x, name());
    obs::Range cur = obs::tensor_range(xf, cfg_.per_channel, cfg_.axis, name());
    obs::check_channels(range_, cur, name());
    if (range_.empty()) {
      range_ = cur;
      return;
    }
    for (size_t c = 0; c < cur.size(); ++c) {
      // Three separately rounded float32 operations (no fused multiply-add).
      float dlo = cur.lo[c] - range_.lo[c];
      float dhi = cur.hi[c] - range_.hi[c];
      float slo = c_ * dlo;
      float shi = c_ * dhi;
      range_.lo[c] = range_.lo[c] + slo;
      range_.hi[c] = range_.hi[c] + shi;
    }
  }

  QParams finalize() override { return obs::qparams_for_clip(range_, range_, cfg_); }

  std::string name() const override { return "moving_average_minmax"; }

 private:
  ObserverConfig cfg_;
  float c_ = 0.01f;
  obs::Range range_;
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(MovingAverageMinMaxObserver, "moving_average_minmax",
                           "moving average of the batch min/max (averaging_constant, default "
                           "0.01); as PyTorch's MovingAverageMinMaxObserver");

}  // namespace tq
