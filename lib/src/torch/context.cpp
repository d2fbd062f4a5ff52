#include <torch/script.h>

#include "taoquant/backend.h"
#include "taoquant/model.h"

namespace tq {

QuantizeContext::QuantizeContext(const Spec& s, const Plan& p, torch::jit::Module& m,
                                 std::string requested, std::string resolved)
    : spec(s),
      plan(p),
      model(m),
      requested_backend(std::move(requested)),
      resolved_backend(std::move(resolved)) {}

QuantizeContext::~QuantizeContext() = default;

void QuantizeContext::add_layer_result(LayerResult r) {
  results_.push_back(std::move(r));
  if (on_layer) on_layer(results_.back(), results_.size() - 1);
}

void QuantizeContext::warn(const std::string& msg) {
  warnings_.push_back(msg);
}

void QuantizerBase::save_model(QuantizeContext& ctx, const std::string& path) {
  save_module_atomic(ctx.model, path, ctx.extra_files);
}

}  // namespace tq
