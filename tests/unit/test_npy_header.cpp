// The NPY header parser alone (torch-free): sizes in checked arithmetic.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/npy.h"
#include "taoquant/error.h"

using Catch::Matchers::Contains;
using tq::data::check_npy_size;
using tq::data::NpyHeader;
using tq::data::read_npy_header;

namespace {

NpyHeader parse(const std::string& descr, const std::string& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(dict.size() & 0xFF);
  bytes += static_cast<char>(dict.size() >> 8);
  bytes += dict;
  size_t pos = 0;
  return read_npy_header(
      [&](char* b, size_t n) {
        n = std::min(n, bytes.size() - pos);
        std::memcpy(b, bytes.data() + pos, n);
        pos += n;
        return n;
      },
      "t.npy");
}

std::string size_error(const NpyHeader& h, uint64_t have) {
  try {
    check_npy_size(h, have, "t.npy");
  } catch (const tq::RuntimeError& e) {
    return e.what();
  }
  return "<accepted>";
}

}  // namespace

TEST_CASE("npy header: sizes", "[npy]") {
  auto h = parse("<f4", "(10, 2, 3)");
  CHECK(h.shape == std::vector<int64_t>{10, 2, 3});
  CHECK(h.row_bytes == 24);
  CHECK(h.data_bytes == 240);
  CHECK_FALSE(h.overflow);
  CHECK(size_error(h, h.data_offset + 240) == "<accepted>");
  CHECK(size_error(h, h.data_offset + 239) ==
        "t.npy: header claims " + std::to_string(h.data_offset + 240) +
            " bytes ([10,2,3] float32 after a " + std::to_string(h.data_offset) +
            "-byte header), file has " + std::to_string(h.data_offset + 239) +
            " (a truncated or corrupt .npy)");
}

TEST_CASE("npy header: shapes whose size overflows", "[npy]") {
  auto h = parse("<f4", "(4611686018427387904, 4)");  // 2^62 rows x 16 bytes = 2^66
  CHECK(h.overflow);
  CHECK_THAT(size_error(h, UINT64_MAX),
             Contains("header claims more than 9223372036854775807 bytes (the shape "
                      "[4611686018427387904,4] float32 overflows), file has"));
  h = parse("|u1", "(4611686018427387904,)");  // 2^62 bytes: fits, but not in the file
  CHECK_FALSE(h.overflow);
  CHECK_THAT(size_error(h, 1000),
             Contains("header claims 4611686018427387") && Contains("file has 1000"));
  CHECK(parse("<i8", "(0, 4294967296, 4294967296)").overflow);    // no rows, a 2^67-byte row
  CHECK(parse("<i8", "(2, 576460752303423488)").overflow);        // 2 x 2^59 x 8 bytes = 2^63
  CHECK_FALSE(parse("<i8", "(2, 288230376151711744)").overflow);  // 2 x 2^58 x 8 bytes = 2^62: fits
  CHECK_THROWS_WITH(parse("<f4", "(99999999999999999999, 1)"), Contains("bad NPY shape"));
  CHECK_THROWS_WITH(parse("<f4", "(-1, 1)"), Contains("bad NPY shape"));
}

TEST_CASE("npy header: dtype sizes that do not fit an int (fuzzer finding)", "[npy]") {
  // numpy_name() multiplied a 16-digit size by 8 in an int.
  CHECK_THROWS_WITH(parse("<i2111111111111111", "(1,)"),
                    Contains("unsupported dtype <i2111111111111111 ('<i2111111111111111')"));
  CHECK_THROWS_WITH(parse("<f2", "(1,)"), Contains("unsupported dtype float16 ('<f2')"));
}
