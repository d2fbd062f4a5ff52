// The shell the built-in backends share: a backend whose calibration is its
// static-PTQ stage's (StaticPtq, StaticFakeQuant). calibrate() hands the data
// to the stage; the subclass's quantize() converts with it.
#pragma once

#include "taoquant/backend.h"

namespace tq {

template <class Stage>
class StagedBackend : public QuantizerBase, public Calibratable {
 public:
  void calibrate(QuantizeContext& ctx, CalibrationData& data) override {
    stage_.calibrate(ctx, data);
  }

 protected:
  Stage stage_;
};

}  // namespace tq
