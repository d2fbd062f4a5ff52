// The record on disk: a TorchScript archive of the record's model, with the
// record itself (tao_quant_record.json) and the weight codes
// (tao_quant_record_codes.bin, each tensor's codes at its offset) as extra
// files. Plain torch.jit.load reads it too; only tao-quant knows the ops
// that mark the quantized values.
#include <torch/script.h>

#include <map>
#include <utility>

#include "taoquant/error.h"
#include "taoquant/model.h"
#include "taoquant/record.h"

namespace tq {

namespace {

constexpr int kRecordVersion = 1;
constexpr const char* kJson = "tao_quant_record.json";
constexpr const char* kCodes = "tao_quant_record_codes.bin";

nlohmann::json tensor_json(const QuantTensor& t, size_t offset) {
  return {{"role", t.role == QuantTensor::Role::kWeight ? "weight" : "activation"},
          {"name", t.name},
          {"layer", t.layer},
          {"dtype", to_string(t.dtype)},
          {"granularity", to_string(t.granularity)},
          {"axis", t.axis},
          {"group_size", t.group_size},
          {"scale", t.scale},
          {"zero_point", t.zero_point},
          {"quant_min", t.quant_min},
          {"quant_max", t.quant_max},
          {"min", t.min},
          {"max", t.max},
          {"clip_min", t.clip_min},
          {"clip_max", t.clip_max},
          {"observer", t.observer},
          {"shape", t.shape},
          {"codes", {{"offset", offset}, {"count", t.codes.size()}}},
          {"mark", t.mark}};
}

QuantTensor tensor_from(const nlohmann::json& j, const std::string& codes) {
  QuantTensor t;
  t.role = j.at("role") == "weight" ? QuantTensor::Role::kWeight : QuantTensor::Role::kActivation;
  t.name = j.at("name");
  t.layer = j.at("layer");
  t.dtype = dtype_table().parse(j.at("dtype").get<std::string>()).value();
  t.granularity = granularity_table().parse(j.at("granularity").get<std::string>()).value();
  t.axis = j.at("axis");
  t.group_size = j.at("group_size");
  t.scale = j.at("scale").get<std::vector<float>>();
  t.zero_point = j.at("zero_point").get<std::vector<int32_t>>();
  t.quant_min = j.at("quant_min");
  t.quant_max = j.at("quant_max");
  t.min = j.at("min");
  t.max = j.at("max");
  t.clip_min = j.at("clip_min");
  t.clip_max = j.at("clip_max");
  t.observer = j.at("observer");
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  const size_t off = j.at("codes").at("offset"), n = j.at("codes").at("count");
  if (off > codes.size() || n > codes.size() - off)
    throw std::out_of_range("codes of '" + t.name + "' lie outside " + kCodes);
  t.codes.assign(codes.begin() + static_cast<std::ptrdiff_t>(off),
                 codes.begin() + static_cast<std::ptrdiff_t>(off + n));
  t.mark = j.at("mark");
  return t;
}

}  // namespace

void save_record(const QuantRecord& r, const std::string& path) {
  if (!r.model) throw RuntimeError("the quantization record has no model");
  nlohmann::json tensors = nlohmann::json::array(), layers = nlohmann::json::array();
  std::string codes;  // built once, then moved: a ResNet-50's are 25 MB
  size_t code_bytes = 0;
  for (const auto& t : r.tensors) code_bytes += t.codes.size();
  codes.reserve(code_bytes);
  for (const auto& t : r.tensors) {
    tensors.push_back(tensor_json(t, codes.size()));
    codes.append(t.codes.begin(), t.codes.end());
  }
  for (const auto& l : r.layers)
    layers.push_back({{"name", l.name},
                      {"quantized", l.quantized},
                      {"reason", l.reason},
                      {"weight", l.weight},
                      {"input", l.input},
                      {"dynamic_input", l.dynamic_input}});
  const nlohmann::json j{{"record_version", kRecordVersion},
                         {"mode", to_string(r.mode)},
                         {"backend", r.backend},
                         {"tensors", tensors},
                         {"layers", layers},
                         {"notes", r.notes},
                         {"input_shapes", r.input_shapes},
                         {"input_dtypes", r.input_dtypes},
                         {"float_values", r.float_values}};
  std::map<std::string, std::string> extra;
  extra[kJson] = j.dump(1);
  extra[kCodes] = std::move(codes);
  save_module_atomic(*r.model, path, std::move(extra));
}

QuantRecord load_record(const std::string& path) {
  torch::jit::ExtraFilesMap extra{{kJson, ""}, {kCodes, ""}};
  QuantRecord r;
  try {
    r.model = std::make_shared<torch::jit::Module>(torch::jit::load(path, c10::kCPU, extra));
    const auto j = nlohmann::json::parse(extra[kJson]);
    if (j.at("record_version") != kRecordVersion)
      throw std::runtime_error("record version " + j.at("record_version").dump() +
                               ", this tao-quant reads " + std::to_string(kRecordVersion));
    r.mode = mode_table().parse(j.at("mode").get<std::string>()).value();
    r.backend = j.at("backend");
    for (const auto& t : j.at("tensors")) r.tensors.push_back(tensor_from(t, extra[kCodes]));
    for (const auto& l : j.at("layers")) {
      LayerRecord lr;
      lr.name = l.at("name");
      lr.quantized = l.at("quantized");
      lr.reason = l.at("reason");
      lr.weight = l.at("weight");
      lr.input = l.at("input");
      lr.dynamic_input = l.at("dynamic_input");
      const int n = static_cast<int>(r.tensors.size());
      if (lr.weight >= n || lr.input >= n) throw std::out_of_range("layer '" + lr.name + "'");
      r.layers.push_back(std::move(lr));
    }
    r.notes = j.at("notes").get<std::vector<std::string>>();
    r.input_shapes = j.at("input_shapes").get<std::vector<std::vector<int64_t>>>();
    r.input_dtypes = j.at("input_dtypes").get<std::vector<std::string>>();
    r.float_values = j.at("float_values").get<std::map<std::string, std::vector<float>>>();
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw RuntimeError("'" + path + "' is not a tao-quant quantization record (" +
                       what.substr(0, what.find('\n')) +
                       "); run `tao-quant quantize` again to make one");
  }
  return r;
}

}  // namespace tq
