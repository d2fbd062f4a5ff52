// Test plugin that registers a fresh name and then the built-in name
// 'fakequant': the loader must refuse it, naming both origins, and register
// neither (all or nothing).
#include "taoquant/backend.h"
#include "taoquant/plugin.h"

TAOQUANT_PLUGIN();

namespace {
class DupBackend : public tq::QuantizerBase {
 public:
  void quantize(tq::QuantizeContext&) override {}
};
tq::BackendInfo first() {
  tq::BackendInfo b;
  b.name = "plugin_dup_first";
  b.caps.modes = {tq::Mode::kWeightOnly};
  return b;
}
tq::BackendInfo clash() {
  tq::BackendInfo b;
  b.name = "fakequant";
  b.caps.modes = {tq::Mode::kWeightOnly};
  return b;
}
}  // namespace

TAOQUANT_REGISTER_BACKEND(DupBackend, first);
TAOQUANT_REGISTER_BACKEND(DupBackend, clash);
