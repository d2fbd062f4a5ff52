// Test plugin without TAOQUANT_PLUGIN(): refused before loading.
#include "taoquant/backend.h"

namespace {
class NoStampBackend : public tq::QuantizerBase {
 public:
  void quantize(tq::QuantizeContext&) override {}
};
tq::BackendInfo info() {
  tq::BackendInfo b;
  b.name = "plugin_nostamp";
  b.caps.modes = {tq::Mode::kWeightOnly};
  return b;
}
}  // namespace

TAOQUANT_REGISTER_BACKEND(NoStampBackend, info);
