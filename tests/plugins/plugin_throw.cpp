// Test plugin whose stages throw on request: backend_kwargs.fail_in names
// the stage (prepare, calibrate, quantize, save_model; default quantize).
// save_model first writes half a file, to check that no partial artifact is
// left behind.
#include <fstream>
#include <stdexcept>

#include "taoquant/backend.h"
#include "taoquant/plugin.h"

TAOQUANT_PLUGIN();

namespace {

class ThrowBackend : public tq::QuantizerBase, public tq::Calibratable {
 public:
  void prepare(tq::QuantizeContext& ctx) override {
    fail_in_ = ctx.options().get_string("fail_in");
    maybe_throw("prepare");
  }
  void calibrate(tq::QuantizeContext&, tq::CalibrationData&) override { maybe_throw("calibrate"); }
  void quantize(tq::QuantizeContext&) override { maybe_throw("quantize"); }
  void save_model(tq::QuantizeContext& ctx, const std::string& path) override {
    if (fail_in_ == "save_model") {
      std::ofstream(path, std::ios::binary) << "PK\x03\x04 half an archive";
      if (!std::ifstream(path)) throw std::runtime_error("plugin_throw: could not write " + path);
      maybe_throw("save_model");
    }
    QuantizerBase::save_model(ctx, path);
  }

 private:
  void maybe_throw(const char* stage) const {
    if (fail_in_ == stage)
      throw std::runtime_error(std::string("plugin_throw: deliberate failure in ") + stage);
  }
  std::string fail_in_;
};

tq::BackendInfo info() {
  tq::BackendInfo b;
  b.name = "plugin_throw";
  b.description = "test plugin: throws in the stage named by backend_kwargs.fail_in";
  b.caps.modes = {tq::Mode::kWeightOnly, tq::Mode::kStatic};
  b.caps.weight_dtypes = {tq::DType::kInt8};
  b.caps.activation_dtypes = {tq::DType::kInt8};
  b.caps.granularities = {tq::Granularity::kPerTensor, tq::Granularity::kPerChannel};
  b.caps.layer_kinds = {tq::LayerKind::kLinear, tq::LayerKind::kConv2d};
  b.caps.options = {{"fail_in",
                     tq::OptionType::kString,
                     "quantize",
                     {"prepare", "calibrate", "quantize", "save_model", "none"},
                     std::nullopt,
                     "the stage that throws",
                     {}}};
  return b;
}

}  // namespace

TAOQUANT_REGISTER_BACKEND(ThrowBackend, info);
