// The timing cache: measured latencies, keyed by what decides them (engine,
// op, shapes, batch size), with the machine and software they hold for. A
// run given a cache measures nothing it holds, so its never-slower decisions
// do not depend on machine load; a cache from another machine, LibTorch,
// engine or schema is refused, naming what differs. Torch-free (the
// machine's facts come from TimingEnv::this_machine, in the torch part).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "taoquant/json.h"

#include "taoquant/error.h"

namespace tq {

// Bumped when the keys or the meaning of an entry change.
constexpr int kTimingCacheSchema = 1;
// The largest cache file read: a cache holds a few entries per layer and
// batch size (kilobytes); a larger file is not one.
constexpr size_t kMaxTimingCacheBytes = size_t{64} << 20;

// What a measurement holds for. A cache whose fields differ from this
// machine's is refused.
struct TimingEnv {
  int schema = kTimingCacheSchema;
  std::string libtorch;             // LibTorch version
  std::string cpu;                  // CPU model name
  std::string isa;                  // the SIMD flags the int8 kernels dispatch on, sorted
  int threads = 0;                  // intra-op threads
  static TimingEnv this_machine();  // lib/src/torch/timing_env.cpp
  nlohmann::json to_json() const;
  // "cpu: 'A' in the cache, 'B' here; threads: 2 in the cache, 1 here" ("" when equal).
  std::string differences(const TimingEnv& here) const;
};

class TimingCache {
 public:
  explicit TimingCache(TimingEnv env) : env_(std::move(env)) {}
  // Reads a cache file for this machine (`here`). Throws SpecError at `loc`
  // (exit 2) when it cannot be read (only a regular file of at most
  // kMaxTimingCacheBytes is), is not a timing cache, holds what the schema
  // does not allow (naming the field), or was measured elsewhere (each
  // differing field, the cache's value and this machine's).
  static TimingCache load(const std::string& path, const TimingEnv& here, const SourceLoc& loc);
  // The same for the file's text (`path` names it in messages).
  static TimingCache parse(const std::string& text, const std::string& path, const TimingEnv& here,
                           const SourceLoc& loc);

  const TimingEnv& env() const { return env_; }
  const std::string& path() const { return path_; }  // "" unless loaded
  bool given() const { return !path_.empty(); }

  // The int8 engine the entries were measured with. The first call binds a
  // fresh cache; a loaded cache of another engine throws SpecError.
  void bind_engine(const std::string& engine);
  const std::string& engine() const { return engine_; }

  // Milliseconds per call under `key`, counted as read when found.
  std::optional<double> find(const std::string& key);
  // Records a measurement (counted as measured).
  void put(const std::string& key, double ms);
  size_t read_count() const { return read_; }
  size_t measured_count() const { return measured_; }
  size_t size() const { return entries_.size(); }

  // `profile`: time every layer and the whole model, not only when the
  // int8 model is slower than float.
  bool profile_all = false;

  // The file's JSON: entries sorted by key, so the same entries give the
  // same bytes.
  nlohmann::json to_json() const;
  void save(const std::string& path) const;  // through a temporary file

 private:
  TimingEnv env_;
  std::string path_;
  std::string engine_;
  SourceLoc loc_;
  std::map<std::string, double> entries_;
  size_t read_ = 0, measured_ = 0;
};

}  // namespace tq
