// Q/DQ as ONNX Runtime runs it in int8 (target `ort`): every value the
// record marks gets QuantizeLinear -> DequantizeLinear with its scale and
// zero point, so that ops between such pairs are the int8 kernels' ops
// (DQ -> Conv -> Q becomes QLinearConv, DQ -> Gemm -> Q QGemm); weights are
// their stored codes through DequantizeLinear (per channel on axis 0, or
// per tensor); biases int32 with scale s_in * s_w[c], which the fusion
// needs; a layer whose input is quantized through an op that passes ranges
// (pooling, flatten) gets a pair right before it. Dynamic PTQ's Linear is
// DynamicQuantizeLinear -> MatMulInteger.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "convert.h"
#include "taoquant/record.h"

namespace tq::onnx_export {

class QdqPolicy : public QuantPolicy {
 public:
  std::string mark(Converter& c, const std::string& x, int64_t mark) override;
  std::string layer_input(Converter& c, const std::string& layer, const std::string& x) override;
  std::string weight(Converter& c, const std::string& layer, const at::Tensor& w,
                     bool transposed) override;
  std::string bias(Converter& c, const std::string& layer, const at::Tensor& b,
                   const std::string& input, const std::string& weight,
                   const std::function<std::string()>& as_is) override;
  std::optional<std::string> dynamic_linear(Converter& c, const std::string& layer,
                                            const std::string& x, const at::Tensor& w,
                                            const at::Tensor* b) override;
  void add_inputs(Converter& c, std::string& a, std::string& b) override;
  std::string passed(Converter& c, const std::string& op, const std::string& x,
                     const std::string& y) override;
  void concat_inputs(Converter& c, std::vector<std::string>& xs) override;
  std::optional<std::string> constant_mark(Converter& c, Value* v, int64_t mark) override;
  bool quantized_constant(const std::string& name) const override {
    return dequantized(name) != nullptr;
  }

  size_t activations_written() const { return activations_; }
  size_t weights_written() const { return weights_; }

 protected:
  // Quantize -> dequantize of `x` with `t`'s parameters; returns the DQ output.
  virtual std::string qdq(Converter& c, const std::string& x, const QuantTensor& t);
  // The stored codes of a weight, dequantized (`transposed`: as [in, out]).
  virtual std::string weight_dq(Converter& c, const QuantTensor& t, bool transposed);
  // Scale and zero-point initializers of `t` (made once).
  std::pair<std::string, std::string> qparams(Converter& c, const QuantTensor& t);
  // The record tensor a DequantizeLinear output dequantizes.
  const QuantTensor* dequantized(const std::string& name) const;
  void note_dq(const std::string& name, const QuantTensor& t) { dq_of_[name] = &t; }
  // The quantization a value carries: a DequantizeLinear output's, or what
  // an op that keeps scale and zero point passed on (LibTorch's quantized
  // tensors through pooling, clamp, reshape).
  const QuantTensor* carried(const std::string& name) const;
  // `x` on the grid of the quantization it carries, from a DequantizeLinear
  // (ONNX Runtime fuses only such inputs): a Q/DQ pair when it is not one.
  std::string requantized(Converter& c, const std::string& x);

 private:
  // The fixed output parameters of an op on a quantized input (sigmoid).
  const QuantTensor& fixed(const std::string& op, float scale, int32_t zero_point);

  std::map<std::string, const QuantTensor*> dq_of_, carried_;
  std::map<std::string, QuantTensor> fixed_;
  std::map<const QuantTensor*, QuantTensor> constants_;  // ranges of constants, with their codes
  std::map<const QuantTensor*, std::pair<std::string, std::string>> qparams_;
  size_t activations_ = 0, weights_ = 0;
};

}  // namespace tq::onnx_export
