// The NPY header (numpy.save's format), torch-free so that it can be fuzzed
// and unit-tested alone. The array sources (lib/src/torch/data) read the
// data after it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tq::data {

// Element types a data file may hold (little-endian, C order).
enum class ElemType { kFloat32, kFloat64, kUInt8, kInt32, kInt64 };
const char* elem_name(ElemType t);  // "float32", ...
size_t elem_size(ElemType t);
// "float32, float64, uint8, int32, int64": the types above, for messages.
std::string supported_elems();

// A parsed NPY header.
struct NpyHeader {
  ElemType type = ElemType::kFloat32;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // bytes from the start of the .npy to the data
  // The data's size and one row's (shape[1:]), computed with checked
  // arithmetic; `overflow` when the shape's product does not fit 63 bits.
  uint64_t data_bytes = 0;
  uint64_t row_bytes = 0;
  bool overflow = false;
};

// Parses the header at the start of an .npy stream. `read` returns up to n
// bytes (fewer only at the end). `where` names the array in messages
// ("calib.npz: x"). Throws RuntimeError on a bad magic, a big-endian,
// Fortran-order or unsupported dtype, or a bad shape.
NpyHeader read_npy_header(const std::function<size_t(char*, size_t)>& read,
                          const std::string& where);

// Throws RuntimeError "WHERE: header claims N bytes (...), file has M" when
// the header's data does not fit the `have` bytes of the file (or member),
// including when the shape's product overflows.
void check_npy_size(const NpyHeader& h, uint64_t have, const std::string& where);

// "[1,3,32,32]"
std::string dims_str(const std::vector<int64_t>& shape);

}  // namespace tq::data
