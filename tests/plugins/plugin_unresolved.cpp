// Test plugin that needs a symbol nobody defines: dlopen (RTLD_NOW) fails and
// the loader reports dlerror's text.
#include "taoquant/backend.h"
#include "taoquant/plugin.h"

TAOQUANT_PLUGIN();

extern "C" int tq_test_symbol_nobody_defines(int);

namespace {
class UnresolvedBackend : public tq::QuantizerBase {
 public:
  void quantize(tq::QuantizeContext&) override { (void)tq_test_symbol_nobody_defines(1); }
};
tq::BackendInfo info() {
  tq::BackendInfo b;
  b.name = "plugin_unresolved";
  b.caps.modes = {tq::Mode::kWeightOnly};
  return b;
}
}  // namespace

TAOQUANT_REGISTER_BACKEND(UnresolvedBackend, info);
