#include "taoquant/timing_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/messages.h"
#include "taoquant/result_files.h"

namespace tq {

namespace {

constexpr const char* kFormat = "tao-quant timing cache";

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// "field: A in the cache, B here" when they differ.
template <class T>
void differ(std::string& out, const char* field, const T& cached, const T& here,
            std::string (*show)(const T&)) {
  if (cached == here) return;
  out += (out.empty() ? "" : "; ") + std::string(field) + ": " + show(cached) + " in the cache, " +
         show(here) + " here";
}

std::string show_int(const int& v) {
  return std::to_string(v);
}

}  // namespace

nlohmann::json TimingEnv::to_json() const {
  return {
      {"schema", schema}, {"libtorch", libtorch}, {"cpu", cpu}, {"isa", isa}, {"threads", threads}};
}

std::string TimingEnv::differences(const TimingEnv& here) const {
  std::string out;
  differ(out, "schema", schema, here.schema, show_int);
  differ(out, "libtorch", libtorch, here.libtorch, quoted);
  differ(out, "cpu", cpu, here.cpu, quoted);
  differ(out, "isa", isa, here.isa, quoted);
  differ(out, "threads", threads, here.threads, show_int);
  return out;
}

namespace {

using nlohmann::json;

// The file's fields, each checked against what the schema allows; a
// SpecError (exit 2) names the field, what was found and what is expected.
class CacheReader {
 public:
  CacheReader(std::string who, SourceLoc loc) : who_(std::move(who)), loc_(std::move(loc)) {}

  [[noreturn]] void bad(const std::string& field, const std::string& msg) const {
    throw SpecError(loc_, who_ + ": " + field + ": " + msg);
  }
  // `obj` has exactly `keys`: a missing or an unknown one is named.
  void fields(const json& obj, const std::string& prefix,
              const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!obj.contains(k)) bad(prefix + k, "is missing");
    for (const auto& [k, v] : obj.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        bad(prefix + k, "unknown field (expected: " + join(keys) + ")" + did_you_mean(k, keys));
  }
  std::string text(const json& v, const std::string& field) const {
    if (!v.is_string()) bad(field, "expected a string, found " + found(v));
    return v.get<std::string>();
  }
  int integer(const json& v, const std::string& field, int min) const {
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > INT32_MAX)
      bad(field, "expected an integer >= " + std::to_string(min) + ", found " + found(v));
    return v.get<int>();
  }
  static std::string found(const json& v) {
    if (v.is_array()) return "a list";
    if (v.is_object()) return "a map";
    return quote_value(v.dump());
  }

 private:
  std::string who_;
  SourceLoc loc_;
};

TimingEnv machine_of(const CacheReader& r, const json& m, int schema) {
  if (!m.is_object()) r.bad("machine", "expected a map, found " + CacheReader::found(m));
  r.fields(m, "machine.", {"schema", "libtorch", "cpu", "isa", "threads"});
  TimingEnv env;
  env.schema = schema;
  const int inner = r.integer(m["schema"], "machine.schema", 1);
  if (inner != schema)
    r.bad("machine.schema", std::to_string(inner) + " where the cache's schema is " +
                                std::to_string(schema) +
                                " (they are written equal; was it edited?)");
  env.libtorch = r.text(m["libtorch"], "machine.libtorch");
  env.cpu = r.text(m["cpu"], "machine.cpu");
  env.isa = r.text(m["isa"], "machine.isa");
  env.threads = r.integer(m["threads"], "machine.threads", 1);
  return env;
}

// entries: {key: milliseconds}, each a measured time (> 0).
std::map<std::string, double> entries_of(const CacheReader& r, const json& e) {
  if (!e.is_object())
    r.bad("entries", "expected a map of {key: milliseconds}, found " + CacheReader::found(e));
  std::map<std::string, double> out;
  for (const auto& [k, v] : e.items()) {
    if (k.empty()) r.bad("entries", "an entry has an empty key");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      r.bad("entries", "entry " + quote_value(k) +
                           " is not a time in ms (expected a number > 0, found " +
                           CacheReader::found(v) + ")");
    out[k] = v.get<double>();
  }
  return out;
}

}  // namespace

TimingCache TimingCache::load(const std::string& path, const TimingEnv& here,
                              const SourceLoc& loc) {
  std::string text;
  const std::string problem = read_file_capped(path, kMaxTimingCacheBytes, "timing cache", text);
  if (!problem.empty()) throw SpecError(loc, "timing cache " + quote_value(path) + " " + problem);
  return parse(text, path, here, loc);
}

TimingCache TimingCache::parse(const std::string& text, const std::string& path,
                               const TimingEnv& here, const SourceLoc& loc) {
  const std::string who = "timing cache " + quote_value(path);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != kFormat)
    throw SpecError(loc, who +
                             " is not a timing cache (write one with `tao-quant profile` or "
                             "take the timing_cache.json that quantize writes)");
  const CacheReader r(who, loc);
  if (!j.contains("schema")) r.bad("schema", "is missing");
  const int schema = r.integer(j["schema"], "schema", 1);
  if (schema != here.schema)  // another layout: nothing else in it is read
    throw SpecError(loc,
                    who + " was written for another tao-quant (schema: " + std::to_string(schema) +
                        " in the cache, " + std::to_string(here.schema) +
                        " here); profile this machine with `tao-quant profile`");
  r.fields(j, "", {"format", "schema", "machine", "engine", "entries"});
  TimingCache c(machine_of(r, j["machine"], schema));
  c.engine_ = r.text(j["engine"], "engine");
  c.entries_ = entries_of(r, j["entries"]);
  const std::string diff = c.env_.differences(here);
  if (!diff.empty())
    throw SpecError(loc, who + " was measured elsewhere and does not hold here (" + diff +
                             "); profile this machine with `tao-quant profile`");
  c.path_ = path;
  c.loc_ = loc;
  return c;
}

void TimingCache::bind_engine(const std::string& engine) {
  if (!given() || engine_.empty()) {  // a fresh cache takes the run's engine
    engine_ = engine;
    return;
  }
  if (engine_ != engine)
    throw SpecError(loc_, "timing cache '" + path_ + "' was measured with engine '" + engine_ +
                              "'; this run uses '" + engine +
                              "' (set quantize.backend_kwargs.engine, or profile this engine)");
}

std::optional<double> TimingCache::find(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  ++read_;
  return it->second;
}

void TimingCache::put(const std::string& key, double ms) {
  entries_[key] = ms;
  ++measured_;
}

nlohmann::json TimingCache::to_json() const {
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [k, v] : entries_) entries[k] = v;
  return {{"format", kFormat},
          {"schema", env_.schema},
          {"machine", env_.to_json()},
          {"engine", engine_},
          {"entries", entries}};
}

void TimingCache::save(const std::string& path) const {
  write_text_atomic(path, to_json().dump(2) + "\n");
}

}  // namespace tq
