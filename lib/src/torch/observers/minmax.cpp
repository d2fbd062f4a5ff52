// `minmax`: running min/max, per tensor or per channel. The qparams are
// bit-identical to torch.ao.quantization.MinMaxObserver and
// PerChannelMinMaxObserver (see qparams_from_range).
#include "common.h"

namespace tq {
namespace {

class MinMaxObserver : public obs::RunningRangeObserver {
 public:
  explicit MinMaxObserver(const ObserverConfig& cfg) : RunningRangeObserver(cfg, "minmax") {}
  QParams finalize() override { return obs::qparams_for_clip(range_, range_, cfg_); }
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(MinMaxObserver, "minmax",
                           "running min/max; qparams bit-identical to PyTorch's MinMaxObserver");

}  // namespace tq
