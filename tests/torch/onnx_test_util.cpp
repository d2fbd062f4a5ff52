#include "onnx_test_util.h"

#include <onnx/onnx_pb.h>
#include <torch/script.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "taoquant/data.h"
#include "taoquant/spec.h"
#include "test_data_util.h"

namespace tq::test {

namespace fs = std::filesystem;

namespace {

std::string runner() {
  return std::string(TQ_SOURCE_DIR) + "/scripts/ort/run.js";
}

std::string shape_text(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i)
    s += std::to_string(t.size(i)) + (t.dim() == 1 ? "," : i + 1 < t.dim() ? ", " : "");
  return s + ")";
}

}  // namespace

bool ort_available() {
  return fs::exists(std::string(TQ_SOURCE_DIR) +
                    "/third_party/ort/node_modules/onnxruntime-node/package.json") &&
         tqtest_data::run_cmd("node --version").status == 0;
}

void write_npy(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const char* descr = c.scalar_type() == at::kLong ? "<i8" : "<f4";
  REQUIRE((c.scalar_type() == at::kLong || c.scalar_type() == at::kFloat));
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape_text(c) + ", }";
  const size_t pad = 64 - (10 + header.size() + 1) % 64;
  header += std::string(pad % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  const uint16_t n = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&n), 2);
  out << header;
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  REQUIRE(out.good());
}

at::Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(all.compare(1, 5, "NUMPY") == 0);
  const uint16_t hlen =
      static_cast<uint16_t>(static_cast<uint8_t>(all[8]) | (static_cast<uint8_t>(all[9]) << 8));
  const std::string header = all.substr(10, hlen);
  const bool i64 = header.find("<i8") != std::string::npos;
  REQUIRE((i64 || header.find("<f4") != std::string::npos));
  const auto open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  std::vector<int64_t> shape;
  std::stringstream dims(header.substr(open + 1, close - open - 1));
  for (std::string d; std::getline(dims, d, ',');)
    if (d.find_first_not_of(' ') != std::string::npos) shape.push_back(std::stoll(d));
  at::Tensor t = at::empty(shape, i64 ? at::kLong : at::kFloat);
  REQUIRE(all.size() - 10 - hlen == t.nbytes());
  std::memcpy(t.data_ptr(), all.data() + 10 + hlen, t.nbytes());
  return t;
}

std::vector<at::Tensor> ort_run(const std::string& model, const std::vector<at::Tensor>& inputs,
                                int64_t batch, const std::string& optimized, bool as_written) {
  const std::string dir = tqtest_data::temp_dir("ort");
  std::string cmd = "node " + runner() + " " + model + " --output-dir " + dir;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string p = dir + "/input_" + std::to_string(i) + ".npy";
    write_npy(p, inputs[i]);
    cmd += " --input " + p;
  }
  if (batch > 0) cmd += " --batch " + std::to_string(batch);
  if (!optimized.empty()) cmd += " --optimized " + optimized;
  if (as_written) cmd += " --no-optimize";
  const auto r = tqtest_data::run_cmd(cmd);
  INFO(cmd << "\n" << r.out);
  REQUIRE(r.status == 0);
  std::vector<at::Tensor> out;
  for (int k = 0; fs::exists(dir + "/output_" + std::to_string(k) + ".npy"); ++k)
    out.push_back(read_npy(dir + "/output_" + std::to_string(k) + ".npy"));
  fs::remove_all(dir);
  return out;
}

onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto m;
  REQUIRE(m.ParseFromIstream(&in));
  return m;
}

std::vector<std::string> onnx_op_types(const std::string& path) {
  std::vector<std::string> out;
  const onnx::ModelProto m = read_model(path);
  for (const auto& n : m.graph().node())
    out.push_back(n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type()
                                                                : n.domain() + ":" + n.op_type());
  return out;
}

std::vector<std::string> onnx_value_names(const std::string& path) {
  const auto m = read_model(path);
  std::vector<std::string> out;
  for (const auto& v : m.graph().input()) out.push_back(v.name());
  for (const auto& v : m.graph().output()) out.push_back(v.name());
  for (const auto& v : m.graph().initializer()) out.push_back(v.name());
  for (const auto& n : m.graph().node())
    for (const auto& o : n.output()) out.push_back(o);
  return out;
}

GraphIndex::GraphIndex(const onnx::GraphProto& g) {
  for (const auto& t : g.initializer()) initializer[t.name()] = &t;
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) producer[o] = &n;
    for (const auto& i : n.input()) readers[i].push_back(&n);
  }
}

std::string GraphIndex::op_of(const std::string& value) const {
  auto it = producer.find(value);
  return it == producer.end() ? std::string() : it->second->op_type();
}

const onnx::NodeProto* GraphIndex::written_by(const std::string& value,
                                              const std::string& op) const {
  return op_of(value) == op ? producer.at(value) : nullptr;
}

const std::vector<const onnx::NodeProto*>& GraphIndex::readers_of(const std::string& value) const {
  static const std::vector<const onnx::NodeProto*> none;
  auto it = readers.find(value);
  return it == readers.end() ? none : it->second;
}

std::vector<std::string> float_bias_int8_layers(const std::string& path) {
  const auto m = read_model(path);
  const GraphIndex g(m.graph());
  auto dq = [&](const std::string& v) { return g.written_by(v, "DequantizeLinear"); };
  auto int32 = [&](const std::string& v) {
    auto it = g.initializer.find(v);
    return it != g.initializer.end() && it->second->data_type() == onnx::TensorProto::INT32;
  };
  std::vector<std::string> out;
  for (const auto& n : m.graph().node()) {
    if ((n.op_type() != "Gemm" && n.op_type() != "Conv") || n.input_size() < 2 || !dq(n.input(1)))
      continue;
    const onnx::NodeProto* b = n.input_size() > 2 ? dq(n.input(2)) : nullptr;
    if (!dq(n.input(0)) || (n.input_size() > 2 && !(b && int32(b->input(0)))))
      out.push_back(n.name());
  }
  return out;
}

std::string python_onnx_check(const std::string& path) {
  const auto r =
      tqtest_data::run_cmd(std::string(tqtest_data::kPython) +
                           " -c \"import onnx,sys; onnx.checker.check_model(sys.argv[1], "
                           "full_check=True); print('ok')\" " +
                           path);
  return r.status == 0 ? "" : r.out;
}

std::pair<at::Tensor, at::Tensor> fmnist_test_set(int64_t n) {
  const tq::Spec spec =
      tq::parse_spec_text(std::string("dataset:\n  test_dataset:\n    data_file: ") +
                              TQ_MODELS_DIR + "/fmnist/test.npz\n    batch_size: 1000\n",
                          "<test>");
  auto loader =
      tq::make_data_loader(spec, *spec.dataset.test_dataset, "dataset.test_dataset", true);
  std::vector<at::Tensor> xs, ys;
  tq::Batch b;
  int64_t have = 0;
  while ((n == 0 || have < n) && loader->next(b)) {
    xs.push_back(b.inputs[0]);
    ys.push_back(b.labels);
    have += b.labels.size(0);
  }
  at::Tensor x = at::cat(xs), y = at::cat(ys);
  if (n > 0) x = x.narrow(0, 0, n), y = y.narrow(0, 0, n);
  return {x.contiguous(), y.contiguous()};
}

at::Tensor torch_outputs(const std::string& model, const at::Tensor& x, int64_t batch) {
  auto m = torch::jit::load(model);
  m.eval();
  torch::NoGradGuard ng;
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < x.size(0); i += batch) {
    auto y = m.forward({x.narrow(0, i, std::min(batch, x.size(0) - i))});
    out.push_back(y.isTensor() ? y.toTensor() : y.toTuple()->elements()[0].toTensor());
  }
  return at::cat(out);
}

double rel_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
  return (x - y).norm().item<double>() / std::max(1e-300, y.norm().item<double>());
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

double mean_cosine(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.reshape({a.size(0), -1}).to(at::kDouble);
  const at::Tensor y = b.reshape({b.size(0), -1}).to(at::kDouble);
  return at::cosine_similarity(x, y, 1).mean().item<double>();
}

}  // namespace tq::test
