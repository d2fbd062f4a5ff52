// TensorRT's explicit-quantization rules, checked on an ONNX file read with
// ONNX's own protobuf types (see tensorrt_rules.h).
#include "tensorrt_rules.h"

#include "onnx_test_util.h"

#include <onnx/onnx_pb.h>

#include <catch2/catch.hpp>

namespace tq::test {

std::vector<std::string> tensorrt_rule_violations(const std::string& path) {
  const auto m = read_model(path);
  const GraphIndex g(m.graph());
  const auto& init = g.initializer;
  auto op_of = [&](const std::string& v) { return g.op_of(v); };
  std::vector<std::string> bad;
  auto int8_zero = [&](const onnx::NodeProto& n) {
    if (n.input_size() < 3) return bad.push_back(n.name() + ": no zero point (uint8 default)");
    const auto* z = init.count(n.input(2)) ? init.at(n.input(2)) : nullptr;
    if (!z || z->data_type() != onnx::TensorProto::INT8)
      return bad.push_back(n.name() + ": zero point not an int8 initializer");
    for (char c : z->raw_data())
      if (c != 0) return bad.push_back(n.name() + ": zero point not 0");
  };
  for (const auto& n : m.graph().node()) {
    const std::string& op = n.op_type();
    if (op == "QuantizeLinear" || op == "DequantizeLinear") int8_zero(n);
    if (op == "DequantizeLinear" && init.count(n.input(0))) {  // a weight
      const auto* w = init.at(n.input(0));
      int64_t axis = 1;
      for (const auto& a : n.attribute())
        if (a.name() == "axis") axis = a.i();
      if (w->dims_size() > 1 && axis != 0) bad.push_back(n.name() + ": weight axis not 0");
      for (char c : w->raw_data())
        if (static_cast<int8_t>(c) < -127) bad.push_back(n.name() + ": weight code -128");
    }
    if (op == "Conv" || op == "Gemm" || op == "MatMul") {
      const bool qw = op_of(n.input(1)) == "DequantizeLinear";
      if (qw && op_of(n.input(0)) != "DequantizeLinear")
        bad.push_back(n.name() + ": quantized weight, float input");
      if (n.input_size() > 2 && op_of(n.input(2)) == "DequantizeLinear")
        bad.push_back(n.name() + ": quantized bias");
    }
    if (op == "Add" && !init.count(n.input(0)) && !init.count(n.input(1))) {
      auto from_layer = [&](const std::string& v) {
        const std::string o = op_of(v);
        return o == "Conv" || o == "Gemm";
      };
      const bool la = from_layer(n.input(0)), lb = from_layer(n.input(1));
      const std::string residual = la && !lb ? n.input(1) : lb && !la ? n.input(0) : "";
      if (la != lb && op_of(residual) != "DequantizeLinear")
        bad.push_back(n.name() + ": residual input not quantized");
    }
    if (op == "QuantizeLinear") {  // no Q/DQ between a Conv and its BatchNorm / ReLU
      const std::string from = op_of(n.input(0));
      for (const auto* dq : g.readers_of(n.output(0)))
        for (const auto* r : g.readers_of(dq->output(0)))
          if ((from == "Conv" || from == "BatchNormalization") &&
              (r->op_type() == "BatchNormalization" || r->op_type() == "Relu"))
            bad.push_back(n.name() + ": Q/DQ between " + from + " and " + r->op_type());
    }
  }
  return bad;
}

}  // namespace tq::test
