// libFuzzer harness: the NPY header parser and the size check the array
// sources run before reading (lib/src/core/npy.cpp, torch-free). The input
// is the start of an .npy file; its length is the file size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/npy.h"
#include "taoquant/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  auto read = [&](char* out, size_t n) {
    n = std::min(n, size - pos);
    if (n) std::memcpy(out, data + pos, n);
    pos += n;
    return n;
  };
  try {
    const tq::data::NpyHeader h = tq::data::read_npy_header(read, "fuzz.npy");
    tq::data::check_npy_size(h, size, "fuzz.npy");
    // Accepted: the sizes the readers use are exact and in range.
    if (h.overflow || h.data_offset + h.data_bytes > size) __builtin_trap();
    uint64_t row = tq::data::elem_size(h.type);
    for (size_t i = 1; i < h.shape.size(); ++i) row *= static_cast<uint64_t>(h.shape[i]);
    if (row != h.row_bytes || row * static_cast<uint64_t>(h.shape[0]) != h.data_bytes)
      __builtin_trap();
  } catch (const tq::Error&) {
  }
  return 0;
}
