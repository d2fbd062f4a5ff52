// `minmax`: running min/max, per tensor or per channel. The qparams are
// bit-identical to torch.ao.quantization.MinMaxObserver and
// PerChannelMinMaxObserver (see qparams_from_range).
#include "common.h"

namespace tq {
namespace {

class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(const ObserverConfig& cfg) : cfg_(cfg) {
    obs::Kwargs kw(name(), cfg.kwargs);
    kw.finish();
    obs::check_config(cfg, name());
  }

  void observe(const at::Tensor& x) override {
    if (x.numel() == 0) return;
    at::Tensor xf = obs::as_float(x, name());
    obs::merge_range(range_, obs::tensor_range(xf, cfg_.per_channel, cfg_.axis, name()), name());
  }

  QParams finalize() override { return obs::qparams_for_clip(range_, range_, cfg_); }

  std::string name() const override { return "minmax"; }

 private:
  ObserverConfig cfg_;
  obs::Range range_;
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(MinMaxObserver, "minmax",
                           "running min/max; qparams bit-identical to PyTorch's MinMaxObserver");

}  // namespace tq
