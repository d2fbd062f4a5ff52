// Q/DQ as TensorRT's explicit quantization takes it (target `tensorrt`):
// int8 only, symmetric (every zero point 0); activations per tensor with
// amax = max(|lo|, |hi|) of the calibrated range; weights per channel on
// axis 0, re-quantized into [-127, 127] from the record's codes (each
// layer's weight SQNR against the record's says how far that moves it);
// Q/DQ only on the inputs of weighted ops (Conv, Gemm) and on the residual
// input of an Add, never between a Conv and its BatchNorm or ReLU; float
// biases (TensorRT fuses them).
#pragma once

#include <map>
#include <set>
#include <string>

#include "taoquant/json.h"

#include "qdq.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

class TensorRtQdqPolicy : public QdqPolicy {
 public:
  std::string mark(Converter& c, const std::string& x, int64_t mark) override;
  std::string layer_input(Converter& c, const std::string& layer, const std::string& x) override;
  std::string weight(Converter& c, const std::string& layer, const at::Tensor& w,
                     bool transposed) override;
  std::string bias(Converter& c, const std::string& layer, const at::Tensor& b,
                   const std::string& input, const std::string& weight,
                   const std::function<std::string()>& as_is) override {
    (void)c, (void)layer, (void)b, (void)input, (void)weight;
    return as_is();  // TensorRT fuses a float bias
  }
  void add_inputs(Converter& c, std::string& a, std::string& b) override;
  void layer_output(const std::string& y) override { layer_outputs_.insert(y); }
  // TensorRT places Q/DQ where its rules say only: not after clamps or
  // pooling, not on the inputs of a Concat.
  std::string passed(Converter&, const std::string&, const std::string&,
                     const std::string& y) override {
    return y;
  }
  void concat_inputs(Converter&, std::vector<std::string>&) override {}
  std::optional<std::string> constant_mark(Converter&, Value*, int64_t) override {
    return std::nullopt;  // TensorRT keeps normalization parameters float
  }

  // Per layer: the weight SQNR of the [-127, 127] re-quantization against
  // the record's codes.
  const nlohmann::json& weight_facts() const { return weight_facts_; }

  // The symmetric int8 form of an activation range (scale amax / 127).
  static QuantTensor symmetric(const QuantTensor& t);
  // A weight re-quantized per channel on axis 0 into [-127, 127]; its SQNR
  // against the record's dequantized values in `sqnr_db`.
  static QuantTensor requantized(const QuantTensor& t, double& sqnr_db);

 private:
  std::string qdq_of(Converter& c, const std::string& x, const QuantTensor& t);
  std::map<std::string, QuantTensor> pending_;  // marked value -> its symmetric range
  std::map<std::string, std::string> done_;     // value -> its Q/DQ output
  std::map<std::string, QuantTensor> weights_;  // layer -> re-quantized weight
  std::set<std::string> layer_outputs_;
  nlohmann::json weight_facts_ = nlohmann::json::object();
};

}  // namespace tq::onnx_export
