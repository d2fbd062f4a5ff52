// What the export tests share: ONNX Runtime (npm onnxruntime-node, run by
// scripts/ort/run.js), .npy files to hand it data, the ONNX file read
// independently of the exporter (protobuf), and python3-onnx's checker.
#pragma once

#include <ATen/core/Tensor.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

namespace tq::test {

// Whether node and third_party/ort (scripts/ort/install.sh) are there.
bool ort_available();

void write_npy(const std::string& path, const at::Tensor& t);  // float32, int64
at::Tensor read_npy(const std::string& path);                  // float32, int64

// Runs `model` in ONNX Runtime on `inputs` (in batches of `batch`; 0: all
// at once); `optimized`: where ORT writes the graph it runs. `as_written`:
// graph optimizations off, so each Q/DQ pair runs in float as ONNX defines
// it (no fused int8 kernel: ONNX Runtime's u8s8 kernels on x86 CPUs without
// VNNI sum pairs of products in saturating int16, docs/deploy.md). FAILs the
// test when the runner fails.
std::vector<at::Tensor> ort_run(const std::string& model, const std::vector<at::Tensor>& inputs,
                                int64_t batch = 0, const std::string& optimized = "",
                                bool as_written = false);

// An ONNX file read with ONNX's own protobuf types (REQUIREs that it parses).
onnx::ModelProto read_model(const std::string& path);

// Who writes and who reads each value of an ONNX graph, and its initializers:
// what the structure checks of the export tests walk.
struct GraphIndex {
  explicit GraphIndex(const onnx::GraphProto& g);
  std::map<std::string, const onnx::NodeProto*> producer;
  std::map<std::string, std::vector<const onnx::NodeProto*>> readers;
  std::map<std::string, const onnx::TensorProto*> initializer;
  // The op type of the node that writes `value` ("" for inputs, initializers).
  std::string op_of(const std::string& value) const;
  // The node that writes `value` when its op type is `op`, else nullptr.
  const onnx::NodeProto* written_by(const std::string& value, const std::string& op) const;
  // The nodes that read `value` (none for a graph output nothing else reads).
  const std::vector<const onnx::NodeProto*>& readers_of(const std::string& value) const;
};

// The op types of an ONNX file's nodes ("com.microsoft:QLinearConv" for
// other domains), read with ONNX's own protobuf types.
std::vector<std::string> onnx_op_types(const std::string& path);
// Every value name of an ONNX file: inputs, outputs, initializers, node outputs.
std::vector<std::string> onnx_value_names(const std::string& path);

// The Gemm and Conv nodes of a Q/DQ file whose weight is dequantized but
// whose input is not, or whose bias is not int32 codes dequantized (scale
// s_in * s_w): a runtime that fuses them into an int8 kernel rounds such a
// float bias itself (ONNX Runtime does), off the numbers the artifact adds.
std::vector<std::string> float_bias_int8_layers(const std::string& path);

// python3-onnx's full checker on a file: "" when it passes, else its message.
std::string python_onnx_check(const std::string& path);

// The first `n` (0: all) Fashion-MNIST test images [N,1,28,28] and labels.
std::pair<at::Tensor, at::Tensor> fmnist_test_set(int64_t n = 0);

// A TorchScript model's (first) output on `x` in batches of `batch`.
at::Tensor torch_outputs(const std::string& model, const at::Tensor& x, int64_t batch = 500);

// ||a - b|| / ||b|| (Euclidean, over all elements).
double rel_error(const at::Tensor& a, const at::Tensor& b);
// max |a - b| / max |b|.
double max_rel_diff(const at::Tensor& a, const at::Tensor& b);
// Mean cosine similarity of the rows of a and b (flattened per sample).
double mean_cosine(const at::Tensor& a, const at::Tensor& b);

}  // namespace tq::test
