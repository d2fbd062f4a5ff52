// Entry points of the spec parser: read -> overrides -> interpolation ->
// validation, and the checks commands run for values a spec may leave unset.
#include "taoquant/spec.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "spec/passes.h"

namespace tq {

using spec_detail::kMissingText;
using spec_detail::Node;

SourceLoc Spec::loc(const std::string& dotted) const {
  auto it = locs.find(dotted);
  return it != locs.end() ? it->second : SourceLoc{path, 0, 0};
}

std::string Spec::effective_results_dir() const {
  return quantize.results_dir.empty() ? results_dir : quantize.results_dir;
}

namespace {

// Records where every key is and which ones are `???`.
void index_tree(const Node& n, const std::string& path, Spec& spec) {
  auto visit = [&](const std::string& p, const Node& child) {
    spec.locs[p] = child.loc;
    if (child.is_missing()) spec.missing.insert(p);
    index_tree(child, p, spec);
  };
  for (size_t i = 0; i < n.items.size(); ++i)
    visit(spec_detail::join_path(path, std::to_string(i)), *n.items[i]);
  for (const auto& e : n.entries) visit(spec_detail::join_path(path, e.key), *e.value);
}

// `key` is unset: say whether it is `???`, empty or absent, and how to set it.
[[noreturn]] void throw_unset(const Spec& spec, const std::string& key, const std::string& how,
                              const std::string& what) {
  if (spec.missing.count(key))
    throw SpecError(spec.loc(key), key + " is '" + kMissingText +
                                       "' (a value you must fill in): " + what + "; " + how);
  if (spec.locs.count(key)) throw SpecError(spec.loc(key), key + " is empty: " + what + "; " + how);
  const std::string section = key.substr(0, key.find('.'));
  SourceLoc loc = section != key && spec.locs.count(section) ? spec.loc(section) : spec.loc("");
  throw SpecError(loc, key + " is not set: " + what + "; " + how);
}

// Whether the spec names an activation dtype anywhere (the default, or a
// layer rule's activations).
bool activations_set(const Spec& spec) {
  if (spec.locs.count("quantize.default_activation_dtype")) return true;
  for (const auto& rule : spec.quantize.layers)
    if (rule.activations && rule.activations->dtype) return true;
  return false;
}

// static_ptq with no activation dtype anywhere: fp8 weights get fp8
// activations (ModelOpt's FP8 recipe), everything else int8, the dtype
// static int8 kernels take (LibTorch runs it as uint8). A rule of the
// library, so that the CLI and tq::run_quantize plan a spec alike.
void apply_static_activation_default(Spec& spec) {
  auto& q = spec.quantize;
  if (q.mode != Mode::kStatic || activations_set(spec)) return;
  const bool fp8 =
      q.default_layer_dtype == DType::kFp8E4M3 || q.default_layer_dtype == DType::kFp8E5M2;
  q.default_activation_dtype = fp8 ? q.default_layer_dtype : DType::kInt8;
  const std::string name(to_string(q.default_activation_dtype));
  spec.resolved["quantize"]["default_activation_dtype"] = name;
  spec.notes.push_back("static_ptq with no activation dtype in the spec: activations default to " +
                       name + " (set quantize.default_activation_dtype to choose)");
}

}  // namespace

Spec parse_spec_text(const std::string& text, const std::string& name,
                     const std::vector<std::string>& overrides) {
  spec_detail::NodePtr root = spec_detail::parse_yaml(text, name);
  if (root->is_null()) {  // an empty file: everything may come from overrides
    root = spec_detail::make_map({name, 1, 1});
  } else if (!root->is_map()) {
    throw SpecError(root->loc,
                    "the spec must be a map of sections (results_dir, quantize, "
                    "dataset, evaluate, ...), found " +
                        spec_detail::describe(*root));
  }
  for (const auto& arg : overrides) spec_detail::apply_override(*root, arg);
  const std::set<std::string> referenced = spec_detail::resolve_interpolations(
      *root, [](const std::string& p) { return !spec_detail::is_read_path(p); });

  Spec spec;
  spec.path = name;
  spec.resolved = spec_detail::to_json(*root);
  index_tree(*root, "", spec);
  spec_detail::read_sections(*root, referenced, spec);
  if (spec.quantize.results_dir.empty()) spec.quantize.results_dir = spec.results_dir;
  apply_static_activation_default(spec);
  return spec;
}

Spec load_spec(const std::string& path, const std::vector<std::string>& overrides) {
  const SourceLoc where{path, 0, 0};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw SpecError(where, "cannot read the spec file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw SpecError(where, std::string("cannot read the spec file: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw SpecError(where, std::string("cannot read the spec file: ") + std::strerror(errno));
  return parse_spec_text(text.str(), path, overrides);
}

void require_model_path(const Spec& spec) {
  if (!spec.quantize.model_path.empty()) return;
  throw_unset(spec, "quantize.model_path", "set it in the spec or pass quantize.model_path=PATH",
              "the model to quantize (a TorchScript .pt file)");
}

nlohmann::json artifact_spec(const Spec& spec) {
  nlohmann::json j = spec.resolved;
  if (!j.is_object()) return j;
  j.erase("results_dir");
  j.erase("evaluate");
  if (j.contains("quantize") && j["quantize"].is_object()) {
    j["quantize"].erase("results_dir");
    j["quantize"].erase("export");
  }
  return j;
}

namespace {

// Why `dir` cannot be made a results folder: it, or a folder above it, is a
// file ("" when it is a folder or can be made one).
std::string results_dir_problem(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty(); p = p.parent_path()) {
    const auto st = fs::status(p, ec);
    if (fs::exists(st) && !fs::is_directory(st))
      return "'" + dir + "' cannot be a folder: " +
             (p == fs::path(dir).lexically_normal() ? std::string("it is a file")
                                                    : "'" + p.string() + "' is a file");
    if (fs::exists(st) || p == p.parent_path()) break;
  }
  return "";
}

}  // namespace

void require_results_dir(const Spec& spec) {
  if (const std::string dir = spec.effective_results_dir(); !dir.empty()) {
    const std::string problem = results_dir_problem(dir);
    const std::string key =
        spec.locs.count("quantize.results_dir") ? "quantize.results_dir" : "results_dir";
    if (!problem.empty())
      throw SpecError(spec.loc(key), key + ": " + problem + " (results go into this folder)");
    return;
  }
  // Name the key to fill in: a `???` one (top-level first), else the one present.
  const bool top_missing = spec.missing.count("results_dir") > 0;
  const bool q_missing = spec.missing.count("quantize.results_dir") > 0;
  const bool q_only = spec.locs.count("quantize.results_dir") && !spec.locs.count("results_dir");
  const std::string key =
      !top_missing && (q_missing || q_only) ? "quantize.results_dir" : "results_dir";
  throw_unset(spec, key,
              "set results_dir (or quantize.results_dir) in the spec or pass " + key + "=DIR",
              "the directory results are written to");
}

namespace {

// Which setting needs calibration data ("" when none does).
std::string calibration_user(const Spec& spec) {
  const auto& q = spec.quantize;
  if (q.mode == Mode::kStatic) return "quantize.mode static_ptq";
  for (const auto& p : algorithm_passes())
    if (p.needs_data && p.on(q.algorithms)) return p.setting(q.algorithms);
  for (size_t i = 0; i < q.layers.size(); ++i) {
    const auto& w = q.layers[i].weights;
    if (w && w->rounding && *w->rounding != Rounding::kNearest)
      return "quantize.layers." + std::to_string(i) + ".weights.rounding " +
             std::string(to_string(*w->rounding));
  }
  return "";
}

}  // namespace

void require_calibration(const Spec& spec) {
  const std::string user = calibration_user(spec);
  if (user.empty()) return;
  const auto& cal = spec.dataset.quant_calibration_dataset;
  if (cal && !cal->empty()) return;
  const std::string section = "dataset.quant_calibration_dataset";
  const std::string how = "set " + section + ".images_dir (an image folder) or " + section +
                          ".data_file (.npz/.npy/.pt) in the spec or pass " + section +
                          ".images_dir=DIR";
  const std::string what = user + " needs calibration data";
  for (const std::string& key : {section, section + ".images_dir", section + ".data_file"})
    if (spec.missing.count(key)) throw_unset(spec, key, how, what);
  SourceLoc loc = spec.locs.count(section) ? spec.loc(section) : spec.loc("quantize.mode");
  throw SpecError(loc, what + " and " + section + " " +
                           (cal ? "has neither images_dir nor data_file" : "is not set") + ": " +
                           how);
}

}  // namespace tq
