// Crafted .npy files whose headers lie about their size: a header claiming
// 2^62 rows, or a shape whose product overflows 64 bits, is refused when the
// file is opened ("header claims N bytes, file has M"), not as a negative
// sample count or a read failure at some later row.
#include <catch2/catch.hpp>

#include <cstdint>

#include "taoquant/data.h"
#include "test_data_util.h"

using Catch::Matchers::Contains;
using namespace tqtest_data;

namespace {

// An NPY v1.0 file: header dict padded to 64 bytes, then `data` bytes.
std::string npy(const std::string& descr, const std::string& shape, size_t data) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + std::string(data, '\0');
}

}  // namespace

TEST_CASE("npy: a header claiming more than the file holds is refused at once",
          "[data][npy][errors]") {
  struct Case {
    std::string name, descr, shape, claim;
  };
  const std::vector<Case> cases = {
      // 2^62 one-byte rows: 4611686018427387904 bytes + the 128-byte header
      // (its dict is over 53 characters, so it pads to 128).
      {"rows62_u1.npy", "|u1", "(4611686018427387904,)", "header claims 4611686018427388032 bytes"},
      // 2^62 rows of 4 float32: 2^66 bytes, wraps to 0 in 64 bits.
      {"rows62_f4.npy", "<f4", "(4611686018427387904, 4)", "header claims more than"},
      // 2^40 x 2^40 x 2^40: the element count itself overflows.
      {"cube_f8.npy", "<f8", "(1099511627776, 1099511627776, 1099511627776)",
       "header claims more than"},
      // No rows, but a row of 2^62 x 2^62 elements.
      {"zero_rows.npy", "<i8", "(0, 4611686018427387904, 4611686018427387904)",
       "header claims more than"},
      // Plainly truncated: 16 rows of 4 float32 claimed, 100 bytes present.
      {"short.npy", "<f4", "(16, 4)", "header claims 384 bytes"},  // 256 + a 128-byte header
  };
  const std::string dir = temp_dir("npy_crafted");
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string path = dir + "/" + c.name;
    const std::string bytes = npy(c.descr, c.shape, 100);
    write_text(path, bytes);
    auto e = catch_error([&] { loader_of("data_file: " + path); });
    REQUIRE(e.thrown);
    CHECK(e.code == tq::ExitCode::kRuntime);
    CHECK_THAT(e.msg, Contains(path + ": " + c.claim) &&
                          Contains("file has " + std::to_string(bytes.size())));
  }
  // The honest file of the same kind loads.
  const std::string ok = dir + "/ok.npy";
  write_text(ok, npy("<f4", "(16, 4)", 256));
  auto l = loader_of("data_file: " + ok + "\nbatch_size: 8");
  CHECK(l->num_samples() == 16);
  CHECK(l->num_batches() == 2);
}

TEST_CASE("npy: a dimension too large for 64 bits is a bad shape", "[data][npy][errors]") {
  const std::string path = temp_dir("npy_crafted") + "/huge_dim.npy";
  write_text(path, npy("<f4", "(99999999999999999999999, 2)", 100));
  auto e = catch_error([&] { loader_of("data_file: " + path); });
  REQUIRE(e.thrown);
  CHECK(e.code == tq::ExitCode::kRuntime);
  CHECK_THAT(e.msg, Contains("bad NPY shape '(99999999999999999999999, 2)'"));
}
