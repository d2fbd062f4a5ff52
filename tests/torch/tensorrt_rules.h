// TensorRT's explicit-quantization rules, written from its developer guide
// and the onnx-tensorrt operator notes (not from the exporter): int8 Q/DQ
// only, zero points 0, weights per channel on axis 0 in [-127, 127], Q/DQ
// on the inputs of Conv/Gemm/MatMul and on the residual input of Add, none
// between Conv, BatchNorm and ReLU, float biases.
#pragma once

#include <string>
#include <vector>

namespace tq::test {

// The rules an ONNX file breaks, one line each (empty: none).
std::vector<std::string> tensorrt_rule_violations(const std::string& path);

}  // namespace tq::test
