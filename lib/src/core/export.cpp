// The exporter registry, the export stage's loop, and the checks of
// quantize.export that need no model.
#include "taoquant/export.h"

#include <algorithm>
#include <filesystem>
#include <functional>

#include "taoquant/result_files.h"
#include "taoquant/strings.h"

namespace tq {

namespace fs = std::filesystem;

ExporterRegistry& ExporterRegistry::instance() {
  static ExporterRegistry* r = new ExporterRegistry();  // never destroyed: plugins may outlive it
  return *r;
}

void ExporterRegistry::validate(const ExporterInfo& e) const {
  auto bad = [&](const std::string& what) {
    throw Error(ExitCode::kRuntime,
                "exporter '" + e.name + "' (registered at " + e.registered_at + "): " + what);
  };
  if (e.name.empty()) bad("no format name");
  if (e.file_name.empty()) bad("no file name");
  if (!e.write) bad("no write function");
}

std::vector<const ExporterInfo*> ExporterRegistry::resolve(
    const std::vector<std::string>& formats, const std::vector<SourceLoc>& locs) const {
  std::vector<const ExporterInfo*> out;
  // Depth first: what a format needs runs before it, each format once.
  std::function<void(const std::string&, const SourceLoc&)> add = [&](const std::string& name,
                                                                      const SourceLoc& loc) {
    const ExporterInfo* e = find(name);
    if (!e)
      throw SpecError(loc, "quantize.export.formats: unknown format '" + name + "'" +
                               did_you_mean(name, keys()) + " (available: " + join(keys()) + ")");
    if (std::find(out.begin(), out.end(), e) != out.end()) return;
    for (const auto& n : e->needs) add(n, loc);
    out.push_back(e);
  };
  for (size_t i = 0; i < formats.size(); ++i)
    add(formats[i], i < locs.size() ? locs[i] : SourceLoc{});
  return out;
}

namespace detail {
bool register_exporter(ExporterInfo info, const char* file, int line) {
  info.registered_at = std::string(file) + ":" + std::to_string(line);
  ExporterRegistry::instance().add(std::move(info));
  return true;
}
}  // namespace detail

std::string export_file_name(const ExporterInfo& e, const std::string& requested_backend) {
  std::string name = e.file_name;
  const std::string key = "{backend}";
  if (auto at = name.find(key); at != std::string::npos)
    name.replace(at, key.size(), requested_backend);
  return name;
}

std::vector<ExportedFile> run_exporters(const std::vector<const ExporterInfo*>& exporters,
                                        ExportJob job, const std::string& dir) {
  std::vector<ExportedFile> files;
  try {
    for (const ExporterInfo* e : exporters) {
      ExportedFile f;
      f.format = e->name;
      f.path = (fs::path(dir) / export_file_name(*e, job.requested_backend)).string();
      f.partial = partial_path(f.path);
      files.push_back(f);
      files.back().facts = e->write(job, f.partial);
      sync_file(f.partial);
      job.earlier[e->name] = files.back().facts;
    }
  } catch (...) {
    std::error_code ec;
    for (const auto& f : files) fs::remove(f.partial, ec);
    throw;
  }
  return files;
}

nlohmann::json export_report(const std::vector<ExportedFile>& files,
                             const ExportSettings& settings) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : files) {
    nlohmann::json j = artifact_fingerprint(f.partial, fs::path(f.path).filename().string());
    j["format"] = f.format;
    j["path"] = f.path;
    j["facts"] = f.facts;
    list.push_back(std::move(j));
  }
  return {{"opset", settings.opset}, {"target", settings.target}, {"files", list}};
}

namespace {

// TensorRT's explicit quantization (quantize.export.target: tensorrt):
// int8 symmetric weights per channel (or tensor), int8 activations per
// tensor, calibrated ranges. What the spec asks for that TensorRT cannot
// take is an error at its key, before the model loads.
void check_tensorrt(const Spec& spec) {
  const QuantizeSpec& q = spec.quantize;
  const std::string target_key = "quantize.export.target";
  auto fail = [&](const std::string& key, const std::string& what) {
    const std::string at = spec.locs.count(key) ? key : target_key;
    throw SpecError(spec.loc(at), key + ": " + what + ", which TensorRT's explicit quantization (" +
                                      target_key +
                                      ": tensorrt) cannot take: it runs int8 Q/DQ only, "
                                      "symmetric, weights per channel on axis 0 (opset 13-17)");
  };
  if (q.mode != Mode::kStatic)
    fail("quantize.mode",
         std::string(to_string(q.mode)) + " (TensorRT needs the activation ranges of static_ptq)");
  auto weight_dtype = [&](DType d, const std::string& key) {
    if (d != DType::kInt8 && d != DType::kNative) fail(key, "weights " + std::string(to_string(d)));
  };
  auto act_dtype = [&](DType d, const std::string& key) {
    if (d != DType::kInt8 && d != DType::kUInt8 && d != DType::kNative)
      fail(key, "activations " + std::string(to_string(d)));
  };
  weight_dtype(q.default_layer_dtype, "quantize.default_layer_dtype");
  act_dtype(q.default_activation_dtype, "quantize.default_activation_dtype");
  for (size_t i = 0; i < q.layers.size(); ++i) {
    const std::string base = "quantize.layers." + std::to_string(i);
    if (const auto& w = q.layers[i].weights) {
      if (w->dtype) weight_dtype(*w->dtype, base + ".weights.dtype");
      if (w->granularity == Granularity::kPerGroup)
        fail(base + ".weights.granularity", "per_group weights");
    }
    if (const auto& a = q.layers[i].activations) {
      if (a->dtype) act_dtype(*a->dtype, base + ".activations.dtype");
      if (a->granularity && *a->granularity != Granularity::kPerTensor)
        fail(base + ".activations.granularity",
             std::string(to_string(*a->granularity)) + " activations");
    }
  }
}

}  // namespace

std::vector<const ExporterInfo*> check_export_spec(const Spec& spec) {
  const ExportSpec& e = spec.quantize.export_spec;
  if (e.formats.empty()) return {};
  auto exporters = ExporterRegistry::instance().resolve(e.formats, e.format_locs);
  if (e.target == "tensorrt") check_tensorrt(spec);
  const Mode mode = spec.quantize.mode;
  for (const ExporterInfo* x : exporters) {
    if (x->modes.empty() || std::find(x->modes.begin(), x->modes.end(), mode) != x->modes.end())
      continue;
    std::vector<std::string> modes;
    for (Mode m : x->modes) modes.emplace_back(to_string(m));
    throw SpecError(spec.loc("quantize.export.formats"),
                    "quantize.export.formats: '" + x->name + "' exports " + join(modes) +
                        " results (" + x->description + "); quantize.mode is " +
                        std::string(to_string(mode)));
  }
  return exporters;
}

}  // namespace tq
