// Test plugin stamped with plugin ABI 99: the loader must refuse it from its
// stamp, before running any of its code (so this registration never runs).
#include "taoquant/backend.h"
#include "taoquant/plugin.h"

TQ_PLUGIN_DECLARE_ABI_(99)

namespace {
class BadAbiBackend : public tq::QuantizerBase {
 public:
  void quantize(tq::QuantizeContext&) override {}
};
tq::BackendInfo info() {
  tq::BackendInfo b;
  b.name = "plugin_badabi";
  b.caps.modes = {tq::Mode::kWeightOnly};
  return b;
}
}  // namespace

TAOQUANT_REGISTER_BACKEND(BadAbiBackend, info);
