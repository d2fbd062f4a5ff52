// The batch manifest: YAML (read with the spec parser's located node tree and
// interpolation) into a list of jobs with stable ids.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/messages.h"
#include "spec/passes.h"
#include "taoquant/batch.h"

namespace tq {

namespace fs = std::filesystem;
using spec_detail::Node;

namespace {

const std::vector<std::string> kTopKeys = {"jobs", "defaults"};
const std::vector<std::string> kDefaultsKeys = {"overrides", "timeout", "evaluate"};
const std::vector<std::string> kJobKeys = {"id",        "spec",     "template", "models",
                                           "overrides", "evaluate", "timeout"};

[[noreturn]] void fail(const SourceLoc& loc, const std::string& path, const std::string& msg) {
  throw SpecError(loc, path + ": " + msg);
}

[[noreturn]] void type_error(const Node& n, const std::string& path, const std::string& expected) {
  fail(n.loc, path, "expected " + expected + ", found " + spec_detail::describe(n));
}

// Unknown keys of a map are errors, with a suggestion.
void only(const Node& map, const std::string& path, const std::vector<std::string>& allowed,
          const std::set<std::string>& also_ok = {}) {
  for (const auto& e : map.entries) {
    if (std::find(allowed.begin(), allowed.end(), e.key) != allowed.end() || also_ok.count(e.key))
      continue;
    std::string names;
    for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
    fail(e.key_loc, spec_detail::join_path(path, e.key),
         "unknown key" + did_you_mean(e.key, allowed) + "; expected one of: " + names);
  }
}

std::string to_str(const Node& n, const std::string& path) {
  if (!n.is_scalar() || n.text.empty()) type_error(n, path, "a non-empty string");
  return n.text;
}

bool to_bool(const Node& n, const std::string& path) {
  auto b = n.is_scalar() ? spec_detail::parse_bool(n.text) : std::nullopt;
  if (!b) type_error(n, path, "true or false");
  return *b;
}

double to_timeout(const Node& n, const std::string& path) {
  auto v = n.is_scalar() ? spec_detail::parse_float(n.text) : std::nullopt;
  if (!v || !(*v > 0)) type_error(n, path, "a number of seconds > 0");
  return *v;
}

// A string, or a list of strings.
std::vector<std::string> to_strings(const Node& n, const std::string& path) {
  if (n.is_scalar()) return {to_str(n, path)};
  if (!n.is_list()) type_error(n, path, "a string or a list of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < n.items.size(); ++i)
    out.push_back(to_str(*n.items[i], spec_detail::join_path(path, std::to_string(i))));
  return out;
}

std::vector<std::string> to_overrides(const Node& n, const std::string& path) {
  if (!n.is_list()) type_error(n, path, "a list of KEY=VALUE strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < n.items.size(); ++i) {
    const Node& item = *n.items[i];
    const std::string p = spec_detail::join_path(path, std::to_string(i));
    if (!item.is_scalar())
      type_error(item, p,
                 "a KEY=VALUE string (quote an override whose value contains ': ', e.g. "
                 "\"quantize.layers.0.weights={dtype: int4}\")");
    const size_t eq = item.text.find('=');
    if (eq == std::string::npos || spec_detail::trim(item.text.substr(0, eq)).empty())
      fail(item.loc, p,
           "expected KEY=VALUE (e.g. quantize.mode=static_ptq), found " + quote_value(item.text));
    out.push_back(item.text);
  }
  return out;
}

const Node* get(const Node& map, const std::string& key) {
  const auto* e = map.find(key);
  return e ? e->value.get() : nullptr;
}

std::string stem_of(const std::string& path) {
  return fs::path(path).stem().string();
}

bool id_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
         c == '+';
}

std::string sanitize(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (!id_char(c)) c = '_';
  return out;
}

void check_id(const std::string& id, const SourceLoc& loc, const std::string& path) {
  bool ok = !id.empty() && id != "." && id != "..";
  for (char c : id) ok = ok && id_char(c);
  if (!ok)
    fail(loc, path,
         quote_value(id) +
             " is not a valid job id: use letters, digits and . _ - + (it names the job's "
             "directory)");
}

// The value of `key=...` among overrides (the last one wins), or "".
std::string override_value(const std::vector<std::string>& overrides, const std::string& key) {
  std::string v;
  for (const auto& o : overrides) {
    const size_t eq = o.find('=');
    std::string k = spec_detail::trim(o.substr(0, eq));
    while (!k.empty() && k[0] == '+') k.erase(0, 1);
    if (k == key) v = spec_detail::trim(o.substr(eq + 1));
  }
  return v;
}

// "<spec stem>[-<model stem>][-<mode>]": the model when the job names one,
// the mode when an override sets it.
std::string derived_id(const std::string& spec, const std::string& model,
                       const std::vector<std::string>& overrides) {
  std::string id = stem_of(spec);
  std::string m = model.empty() ? override_value(overrides, "quantize.model_path") : model;
  if (!m.empty()) id += "-" + stem_of(m);
  const std::string mode = override_value(overrides, "quantize.mode");
  if (!mode.empty()) id += "-" + mode;
  return sanitize(id);
}

// "{stem}" and "{spec}" in a template's id.
std::string expand_id(const std::string& pattern, const std::string& spec, const std::string& model,
                      const SourceLoc& loc, const std::string& path) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      out += pattern[i];
      continue;
    }
    const size_t close = pattern.find('}', i);
    const std::string name = close == std::string::npos ? "" : pattern.substr(i + 1, close - i - 1);
    if (name == "stem")
      out += sanitize(stem_of(model));
    else if (name == "spec")
      out += sanitize(stem_of(spec));
    else
      fail(loc, path,
           "unknown placeholder in " + quote_value(pattern) + did_you_mean(name, {"stem", "spec"}) +
               "; a template's id may use {stem} (the model file's name without extension) and "
               "{spec}");
    i = close;
  }
  return out;
}

std::string join_dir(const std::string& dir, const std::string& p) {
  if (dir.empty() || fs::path(p).is_absolute()) return fs::path(p).lexically_normal().string();
  return (fs::path(dir) / p).lexically_normal().string();
}

// The path as written relative to the manifest's directory (for the hash).
std::string rel_to(const std::string& dir, const std::string& p) {
  if (dir.empty() || !fs::path(p).is_absolute()) return p;
  const fs::path r = fs::path(p).lexically_relative(fs::path(dir).lexically_normal());
  return r.empty() ? p : r.string();
}

void require_file(const std::string& path, const std::string& written, const std::string& dir,
                  const Node& n, const std::string& key) {
  std::error_code ec;
  const std::string rel = dir.empty() ? "" : " (relative to the manifest's directory " + dir + ")";
  const std::string problem = path_problem(path);
  if (!problem.empty()) fail(n.loc, key, quote_value(written) + " " + problem + rel);
  if (fs::is_directory(path, ec))
    fail(n.loc, key, quote_value(written) + " is a directory, expected a spec file" + rel);
}

// A pattern expands to at most this many (`{a,b}{c,d}...` doubles each
// time), through at most kMaxBraceDepth groups.
constexpr size_t kMaxBraceExpansions = 1000;
constexpr int kMaxBraceDepth = 32;

// "a{b,c{d,e}}f" -> {"abf", "acdf", "acef"}; text without a complete brace
// group is kept as written. Past the limits, returns kMaxBraceExpansions + 1
// results (the caller reports that).
std::vector<std::string> expand_braces(const std::string& s, int level = 0) {
  size_t open = std::string::npos, close = std::string::npos;
  std::vector<size_t> commas;
  int depth = 0;
  for (size_t i = 0; i < s.size() && close == std::string::npos; ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '{') {
      if (depth++ == 0) {
        open = i;
        commas.clear();
      }
    } else if (s[i] == ',' && depth == 1) {
      commas.push_back(i);
    } else if (s[i] == '}' && depth > 0 && --depth == 0) {
      if (commas.empty()) continue;  // "{x}" is not a group
      close = i;
    }
  }
  if (close == std::string::npos) return {s};
  if (level >= kMaxBraceDepth) return std::vector<std::string>(kMaxBraceExpansions + 1);
  std::vector<std::string> out;
  size_t start = open + 1;
  commas.push_back(close);
  for (size_t c : commas) {
    const std::string alt = s.substr(0, open) + s.substr(start, c - start) + s.substr(close + 1);
    for (auto& x : expand_braces(alt, level + 1)) {
      out.push_back(std::move(x));
      if (out.size() > kMaxBraceExpansions) return out;
    }
    start = c + 1;
  }
  return out;
}

// Each pattern (after brace expansion) must match at least one file, so that
// a model missing from a list is an error, not a silently dropped job.
std::vector<std::string> expand_models(const Node& n, const std::string& path,
                                       const std::string& dir) {
  std::vector<std::string> out;
  const std::vector<std::string> written = to_strings(n, path);
  const std::string rel = dir.empty() ? "" : " (relative to the manifest's directory " + dir + ")";
  for (size_t i = 0; i < written.size(); ++i) {
    const Node& at = n.is_list() ? *n.items[i] : n;
    const std::vector<std::string> patterns = expand_braces(written[i]);
    if (patterns.size() > kMaxBraceExpansions)
      fail(at.loc, path,
           quote_value(written[i]) + " expands to more than " +
               std::to_string(kMaxBraceExpansions) + " patterns (or nests more than " +
               std::to_string(kMaxBraceDepth) + " brace groups); list the models instead");
    for (const std::string& one : patterns) {
      const std::string pattern = join_dir(dir, one);
      glob_t g{};
      const int rc = ::glob(pattern.c_str(), GLOB_TILDE, nullptr, &g);
      std::vector<std::string> found;
      if (rc == 0)
        for (size_t k = 0; k < g.gl_pathc; ++k) {
          struct stat st {};
          if (::stat(g.gl_pathv[k], &st) == 0 && !S_ISDIR(st.st_mode))
            found.emplace_back(g.gl_pathv[k]);
        }
      ::globfree(&g);
      if (rc != 0 && rc != GLOB_NOMATCH)
        fail(at.loc, path, "cannot expand " + quote_value(one) + ": " + std::strerror(errno));
      if (found.empty())
        fail(at.loc, path,
             quote_value(one) +
                 (one == written[i] ? "" : " (from " + quote_value(written[i]) + ")") +
                 " matches no model file" + rel +
                 "; build the models first (e.g. scripts/zoo/build.sh)");
      out.insert(out.end(), found.begin(), found.end());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

struct Defaults {
  std::vector<std::string> overrides;
  bool evaluate = false;
};

// A job is a spec: alone, or a template: with models:.
void check_job_shape(const Node& n, const std::string& path) {
  if (!n.is_map())
    type_error(n, path,
               "a job: a map with spec: (plus id, overrides, evaluate, timeout) or template: and "
               "models:");
  only(n, path, kJobKeys);
  const Node* spec = get(n, "spec");
  const Node* tmpl = get(n, "template");
  const Node* models = get(n, "models");
  if (spec && tmpl) fail(n.loc, path, "set spec: or template:, not both");
  if (!spec && !tmpl)
    fail(n.loc, path,
         "a job needs spec: (a spec file) or template: (a spec) with models: (a glob)");
  if (tmpl && !models)
    fail(tmpl->loc, path + ".models", "a template job needs models: (a glob or a list of globs)");
  if (spec && models)
    fail(models->loc, path + ".models", "models: goes with template:, not spec: (use template:)");
}

void read_job(const Node& n, size_t i, const std::string& dir, const Defaults& d,
              std::vector<BatchJob>& out) {
  const std::string path = "jobs." + std::to_string(i);
  check_job_shape(n, path);
  const Node* spec = get(n, "spec");
  const Node* tmpl = get(n, "template");
  const Node* models = get(n, "models");
  BatchJob base;
  base.loc = n.loc;
  base.evaluate = d.evaluate;
  base.overrides = d.overrides;
  if (const Node* o = get(n, "overrides")) {
    auto own = to_overrides(*o, path + ".overrides");
    base.overrides.insert(base.overrides.end(), own.begin(), own.end());
  }
  if (const Node* e = get(n, "evaluate")) base.evaluate = to_bool(*e, path + ".evaluate");
  if (const Node* t = get(n, "timeout")) base.timeout_s = to_timeout(*t, path + ".timeout");
  const Node* id = get(n, "id");
  const std::string id_text = id ? to_str(*id, path + ".id") : "";

  const Node& spec_node = spec ? *spec : *tmpl;
  const std::string key = path + (spec ? ".spec" : ".template");
  const std::string written = to_str(spec_node, key);
  base.spec = join_dir(dir, written);
  require_file(base.spec, written, dir, spec_node, key);

  if (spec) {
    base.id = id ? id_text : derived_id(base.spec, "", base.overrides);
    check_id(base.id, id ? id->loc : n.loc, id ? path + ".id" : path);
    out.push_back(base);
    return;
  }
  const auto files = expand_models(*models, path + ".models", dir);
  for (const auto& f : files) {
    BatchJob job = base;
    job.model = fs::path(f).lexically_normal().string();
    job.overrides.push_back("quantize.model_path=" + job.model);
    if (id) {
      job.id = expand_id(id_text, base.spec, job.model, id->loc, path + ".id");
      if (files.size() > 1 && id_text.find("{stem}") == std::string::npos)
        fail(id->loc, path + ".id",
             "'" + id_text + "' would name all " + std::to_string(files.size()) +
                 " models' jobs the same; use {stem} (the model file's name), e.g. '" + id_text +
                 "-{stem}'");
    } else {
      job.id = derived_id(base.spec, job.model, base.overrides);
    }
    check_id(job.id, id ? id->loc : n.loc, id ? path + ".id" : path);
    out.push_back(std::move(job));
  }
}

std::string manifest_hash(const Manifest& m) {
  Hash64 h;
  auto field = [&](const std::string& s) { h.update(s).update("\0", 1); };
  for (const auto& j : m.jobs) {
    field(j.id);
    field(rel_to(m.dir, j.spec));
    field(j.model.empty() ? "" : rel_to(m.dir, j.model));
    // The template's own model_path override is machine-specific; the model is hashed above.
    const size_t n = j.overrides.size() - (j.model.empty() ? 0 : 1);
    for (size_t i = 0; i < n; ++i) {
      // Paths resolved against the manifest's directory hash as written.
      std::string o = j.overrides[i];
      if (!m.dir.empty())
        for (size_t p; (p = o.find(m.dir + "/")) != std::string::npos;)
          o.erase(p, m.dir.size() + 1);
      field(o);
    }
    field(j.evaluate ? "evaluate" : "quantize");
    field(j.timeout_s ? std::to_string(*j.timeout_s) : "");
    h.update("\n", 1);
  }
  field(m.default_timeout_s ? std::to_string(*m.default_timeout_s) : "");
  return h.hex();
}

}  // namespace

Manifest parse_manifest_text(const std::string& text, const std::string& name,
                             const std::string& dir) {
  spec_detail::NodePtr root = spec_detail::parse_yaml(text, name);
  if (root->is_null())
    throw SpecError({name, 1, 1}, "the manifest is empty: it needs a jobs: list");
  if (!root->is_map())
    throw SpecError(root->loc, "the manifest must be a map with jobs: (and defaults:), found " +
                                   spec_detail::describe(*root));
  const std::set<std::string> referenced =
      spec_detail::resolve_interpolations(*root, [](const std::string&) { return false; });
  only(*root, "manifest", kTopKeys, referenced);

  Manifest m;
  m.path = name;
  m.name = stem_of(name);
  m.dir = dir;
  Defaults d;
  if (const Node* def = get(*root, "defaults")) {
    if (!def->is_map()) type_error(*def, "defaults", "a map (overrides, timeout, evaluate)");
    only(*def, "defaults", kDefaultsKeys);
    if (const Node* o = get(*def, "overrides"))
      d.overrides = to_overrides(*o, "defaults.overrides");
    if (const Node* e = get(*def, "evaluate")) d.evaluate = to_bool(*e, "defaults.evaluate");
    if (const Node* t = get(*def, "timeout"))
      m.default_timeout_s = to_timeout(*t, "defaults.timeout");
  }
  const Node* jobs = get(*root, "jobs");
  if (!jobs) throw SpecError(root->loc, "the manifest has no jobs: list");
  if (!jobs->is_list()) type_error(*jobs, "jobs", "a list of jobs");
  if (jobs->items.empty()) fail(jobs->loc, "jobs", "the list is empty");
  for (size_t i = 0; i < jobs->items.size(); ++i) read_job(*jobs->items[i], i, dir, d, m.jobs);

  std::map<std::string, const BatchJob*> seen;
  for (size_t i = 0; i < m.jobs.size(); ++i) {
    BatchJob& j = m.jobs[i];
    j.index = i;
    auto [it, fresh] = seen.emplace(j.id, &j);
    if (fresh) continue;
    const BatchJob& first = *it->second;
    auto what = [](const BatchJob& x) {
      return x.loc.str() + (x.model.empty() ? "" : " (model " + x.model + ")");
    };
    throw SpecError(j.loc, "job id '" + j.id + "' is used twice: by the job at " + what(first) +
                               " and by the job at " + what(j) +
                               "; give one of them an explicit, different id:");
  }
  m.hash = manifest_hash(m);
  return m;
}

Manifest load_manifest(const std::string& path) {
  const SourceLoc where{path, 0, 0};
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw SpecError(where, "cannot read the manifest: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(where, std::string("cannot read the manifest: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_manifest_text(text.str(), path, fs::path(path).parent_path().string());
}

Shard parse_shard(const std::string& text) {
  const std::string usage =
      "--shard " + quote_value(text) + ": expected i/N with 1 <= i <= N (e.g. 2/4)";
  const size_t slash = text.find('/');
  if (slash == std::string::npos) throw UsageError(usage);
  auto num = [&](const std::string& s) {
    auto v = spec_detail::parse_int(spec_detail::trim(s));
    if (!v || *v < 1 || *v > 1000000) throw UsageError(usage);
    return static_cast<int>(*v);
  };
  Shard s{num(text.substr(0, slash)), num(text.substr(slash + 1))};
  if (s.index > s.count)
    throw UsageError("--shard " + quote_value(text) + ": shard " + std::to_string(s.index) +
                     " does not exist with " + std::to_string(s.count) +
                     " shards (shards are numbered 1.." + std::to_string(s.count) + ")");
  return s;
}

}  // namespace tq
