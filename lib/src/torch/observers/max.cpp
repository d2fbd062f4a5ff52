// `max`: absolute max (amax) calibration, as TensorRT/ModelOpt's `max`
// calibrator. The clip is [-amax, amax], or [0, amax] when nothing negative
// was seen (an unsigned tensor, e.g. after ReLU), so a uint8 affine config
// gets zero point 0 and the full range; symmetric configs are unaffected.
#include <algorithm>

#include "common.h"

namespace tq {
namespace {

class MaxObserver : public obs::RunningRangeObserver {
 public:
  explicit MaxObserver(const ObserverConfig& cfg) : RunningRangeObserver(cfg, "max") {}

  QParams finalize() override {
    obs::Range clip = range_;
    for (size_t c = 0; c < clip.size(); ++c) {
      float amax = std::max(-range_.lo[c], range_.hi[c]);
      clip.lo[c] = range_.lo[c] < 0 ? -amax : 0.0f;
      clip.hi[c] = amax;
    }
    return obs::qparams_for_clip(range_, clip, cfg_);
  }
};

}  // namespace

TAOQUANT_REGISTER_OBSERVER(MaxObserver, "max", "absolute max (amax) of the observed values");

}  // namespace tq
