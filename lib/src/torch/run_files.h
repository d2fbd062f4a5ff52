// What a quantize run writes besides the model's weights: the metadata the
// artifact embeds (the same inputs give the same bytes: no paths, no
// timings), and the run's timing cache. Read by pipeline.cpp.
#pragma once

#include <filesystem>
#include <string>

#include "taoquant/json.h"

#include "taoquant/backend.h"
#include "taoquant/pipeline.h"
#include "taoquant/timing_cache.h"

namespace tq {

// The files embedded next to the model: the resolved spec (without where
// results go: artifact_spec), the layers, and the tool/backend facts.
void embed_metadata(const Spec& spec, const QuantizeOutcome& out, QuantizeContext& ctx);

// The run's timing cache: the spec's (checked against this machine), else
// an empty one for this machine.
TimingCache open_timing_cache(const Spec& spec);

// Writes what this run measured next to the artifact (timing_cache.json),
// warns when a given cache lacked entries, the machine was busy, or
// `contended` measurements of this run stayed contended after retries
// (taoquant/latency.h), and returns the facts for the report.
nlohmann::json close_timing_cache(const TimingCache& cache,
                                  const std::filesystem::path& results_dir, QuantizeContext& ctx,
                                  std::string& written, bool extend, long contended);

}  // namespace tq
