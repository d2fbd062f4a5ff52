// The shell the built-in backends share: calibrate() makes the backend's
// static-PTQ session with its `Calibrate` function; the subclass's quantize()
// takes that session and converts with it.
#pragma once

#include <memory>
#include <string>

#include "taoquant/backend.h"

namespace tq {

template <class Session, std::shared_ptr<Session> (*Calibrate)(QuantizeContext&, CalibrationData&)>
class StagedBackend : public QuantizerBase, public Calibratable {
 public:
  void calibrate(QuantizeContext& ctx, CalibrationData& data) override {
    session_ = Calibrate(ctx, data);
  }

 protected:
  // The calibrated session; convert consumes it (its memory goes with it).
  std::shared_ptr<Session> take_session(const std::string& who) {
    if (!session_) throw RuntimeError(who + ": quantize called before calibrate");
    return std::move(session_);
  }

 private:
  std::shared_ptr<Session> session_;
};

}  // namespace tq
