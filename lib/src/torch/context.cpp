#include <torch/script.h>

#include "taoquant/backend.h"
#include "taoquant/model.h"
#include "taoquant/record.h"

namespace tq {

QuantizeContext::QuantizeContext(const Plan& p, torch::jit::Module& m)
    : plan(p), model(m), record_(std::make_unique<QuantRecord>()) {
  record_->mode = p.mode;
  record_->backend = p.backend_resolved;
}

QuantizeContext::~QuantizeContext() = default;

LayerResult layer_result(const LayerPlan& lp) {
  LayerResult r;
  r.name = lp.info.name;
  r.class_name = lp.info.class_name;
  r.weight_shape = lp.info.weight_shape;
  return r;
}

LayerResult kept_float_result(const LayerPlan& lp, size_t weight_bytes, std::string reason) {
  LayerResult r = layer_result(lp);
  r.kept_float = true;
  r.reason = reason.empty() ? lp.why_float() : std::move(reason);
  r.bytes_before = r.bytes_after = weight_bytes;
  return r;
}

void QuantizeContext::add_layer_result(LayerResult r) {
  // What the library's algorithm stages did to this layer.
  auto facts = algorithm_facts.find(r.name);
  if (facts != algorithm_facts.end()) r.extra["algorithms"] = facts->second;
  results_.push_back(std::move(r));
  if (on_layer) on_layer(results_.back(), results_.size() - 1);
}

void QuantizeContext::record_algorithms(const StageResult& r) {
  for (const auto& [layer, facts] : r.layers)
    for (const auto& [key, f] : facts.items()) algorithm_facts[layer][key] = f;
  for (auto& w : r.rejection_warnings()) warn(w);
}

void QuantizeContext::warn(const std::string& msg) {
  warnings_.push_back(msg);
}

void QuantizerBase::save_model(QuantizeContext& ctx, const std::string& path) {
  save_module_atomic(ctx.model, path, ctx.extra_files);
}

}  // namespace tq
