// The artifact's embedded metadata and the run's timing cache (run_files.h).
#include "run_files.h"

#include "taoquant/latency.h"
#include "taoquant/report.h"

namespace tq {

namespace {

// `j` without wall-clock timings ("seconds" keys): the artifact embeds the
// facts of a run, and the same inputs must give the same bytes; timings go
// to the report only.
nlohmann::json without_timings(nlohmann::json j) {
  if (j.is_object()) {
    j.erase("seconds");
    for (auto& [k, v] : j.items()) v = without_timings(v);
  } else if (j.is_array()) {
    for (auto& v : j) v = without_timings(v);
  }
  return j;
}

// Backend facts as embedded: without wall-clock timings, nor the latency
// measurements or how their float side was made (the report has them; with
// a timing cache the decisions they led to are in the layers' reasons, and
// a rerun that measures nothing makes no float model to time: the same
// bytes either way).
nlohmann::json embedded_backend_meta(const nlohmann::json& meta) {
  nlohmann::json j = without_timings(meta);
  if (j.is_object()) {
    j.erase("latency_check");
    j.erase("float_baseline");
  }
  return j;
}

}  // namespace

void embed_metadata(const Spec& spec, const QuantizeOutcome& out, QuantizeContext& ctx) {
  ctx.extra_files["tao_quant_spec.json"] = artifact_spec(spec).dump(2);
  ctx.extra_files["tao_quant_layers.json"] =
      without_timings(layers_to_json(out.plan, out.layers)).dump(2);
  nlohmann::json meta{
      {"tool", tool_info()},
      {"backend", {{"requested", out.requested_backend}, {"resolved", out.resolved_backend}}},
      {"mode", std::string(to_string(out.plan.mode))},
      {"backend_meta", embedded_backend_meta(ctx.backend_meta)},
      {"calibration", without_timings(ctx.calibration)}};
  ctx.extra_files["tao_quant_meta.json"] = meta.dump(2);
}

TimingCache open_timing_cache(const Spec& spec) {
  const std::string& path = spec.quantize.timing_cache;
  if (path.empty()) return TimingCache(TimingEnv::this_machine());
  return TimingCache::load(path, TimingEnv::this_machine(), spec.loc("quantize.timing_cache"));
}

nlohmann::json close_timing_cache(const TimingCache& cache,
                                  const std::filesystem::path& results_dir, QuantizeContext& ctx,
                                  std::string& written, bool extend, long contended) {
  nlohmann::json j{{"given", cache.given() ? nlohmann::json(cache.path()) : nlohmann::json()},
                   {"entries_read", cache.read_count()},
                   {"entries_measured", cache.measured_count()},
                   {"measurements_contended", contended}};
  std::string busy = cache.measured_count() > 0 ? machine_busy() : std::string();
  if (contended > 0)
    busy = std::to_string(contended) +
           " measurement(s) stayed contended after retries (other processes took this "
           "machine's CPUs: each round's CPU time against its wall time, and how long its "
           "threads waited for a CPU)" +
           (busy.empty() ? "" : "; " + busy);
  if (!busy.empty())
    ctx.warn("latency was measured while " + busy +
             ": the never-slower decisions may be off; measure on an idle machine "
             "(tao-quant profile) and pass quantize.timing_cache");
  if (cache.measured_count() == 0) return j;
  extend = extend && cache.given();
  written = extend ? cache.path() : (results_dir / "timing_cache.json").string();
  cache.save(written);
  j["written"] = written;
  if (cache.given() && !extend)
    ctx.warn("timing cache '" + cache.path() + "' lacked " +
             std::to_string(cache.measured_count()) +
             " timings this run needed; they were measured on this machine now, so the "
             "latency decisions may differ between runs; rerun with quantize.timing_cache=" +
             written);
  return j;
}

}  // namespace tq
