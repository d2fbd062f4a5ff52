// quantize_codes: LibTorch's quantize_val (AffineQuantizerBase.cpp, the
// build without FBGEMM) over a tensor, channel blocks in parallel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "taoquant/error.h"
#include "taoquant/observer.h"

namespace tq {

namespace {

template <class T>
void quantize_blocks(const float* src, T* dst, const QParams& q, int64_t blocks, int64_t channels,
                     int64_t inner) {
  constexpr int64_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  at::parallel_for(
      0, blocks, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, inner)),
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const auto c = static_cast<size_t>(b % channels);
          const float inv = 1.0f / q.scale[c];
          const int64_t zp = q.zero_point[c];
          for (int64_t i = b * inner, e = i + inner; i < e; ++i) {
            // zp + round(x / scale) in float32, as LibTorch; clamped
            // before the cast, so a NaN or an infinity (an undefined
            // cast there; the lowest code on x86) is a code too.
            const float r = static_cast<float>(zp) + std::nearbyint(src[i] * inv);
            dst[i] = static_cast<T>(!(r > lo) ? lo : r >= hi ? hi : static_cast<int64_t>(r));
          }
        }
      });
}

}  // namespace

at::Tensor quantize_codes(const at::Tensor& x, const QParams& q) {
  const at::Tensor xf = x.detach().to(at::kFloat).contiguous();
  const bool u8 = q.dtype == DType::kUInt8;
  at::Tensor out = at::empty(xf.sizes(), xf.options().dtype(u8 ? at::kByte : at::kChar));
  int64_t channels = 1, inner = xf.numel();
  if (q.per_channel) {
    if (q.axis < 0 || q.axis >= xf.dim())
      throw RuntimeError("quantize_codes: axis " + std::to_string(q.axis) + " of a " +
                         std::to_string(xf.dim()) + "-d tensor");
    channels = xf.size(q.axis);
    inner = 1;
    for (int64_t d = q.axis + 1; d < xf.dim(); ++d) inner *= xf.size(d);
  }
  if (static_cast<int64_t>(q.scale.size()) < channels ||
      static_cast<int64_t>(q.zero_point.size()) < channels)
    throw RuntimeError("quantize_codes: " + std::to_string(q.scale.size()) + " scales and " +
                       std::to_string(q.zero_point.size()) + " zero points for " +
                       std::to_string(channels) + " channels");
  if (xf.numel() == 0) return out;
  const int64_t blocks = xf.numel() / inner;
  if (u8)
    quantize_blocks(xf.data_ptr<float>(), out.data_ptr<uint8_t>(), q, blocks, channels, inner);
  else
    quantize_blocks(xf.data_ptr<float>(), out.data_ptr<int8_t>(), q, blocks, channels, inner);
  return out;
}

}  // namespace tq
