#include "taoquant/timing_cache.h"

#include <fstream>
#include <sstream>

#include "taoquant/batch.h"

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

TimingCache TimingCache::load(const std::string& path, const TimingEnv& here,
                              const SourceLoc& loc) {
  const std::string who = "timing cache '" + path + "'";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(loc, who + " cannot be read (missing or not readable)");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat)
    throw SpecError(loc, who +
                             " is not a timing cache (write one with `tao-quant profile` or "
                             "take the timing_cache.json that quantize writes)");
  TimingEnv env;
  try {
    const auto& m = j.at("machine");
    env.schema = j.at("schema").get<int>();
    env.libtorch = m.at("libtorch").get<std::string>();
    env.cpu = m.at("cpu").get<std::string>();
    env.isa = m.at("isa").get<std::string>();
    env.threads = m.at("threads").get<int>();
    TimingCache c(env);
    c.engine_ = j.at("engine").get<std::string>();
    for (const auto& [k, v] : j.at("entries").items()) {
      if (!v.is_number() || v.get<double>() < 0)
        throw SpecError(loc, who + ": entry '" + k + "' is not a time in ms");
      c.entries_[k] = v.get<double>();
    }
    const std::string diff = env.differences(here);
    if (!diff.empty())
      throw SpecError(loc, who + " was measured elsewhere and does not hold here (" + diff +
                               "); profile this machine with `tao-quant profile`");
    c.path_ = path;
    c.loc_ = loc;
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw SpecError(loc, who + " is damaged: " + e.what());
  }
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
