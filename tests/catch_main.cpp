// The tests' main: every test process works in its own temporary directory.
//
// Tests make their scratch files under std::filesystem::temp_directory_path()
// (which reads TMPDIR), and so do the tao-quant and Python processes they
// start. Pointing TMPDIR at one fresh directory per process, removed when the
// run passes (or leaves it empty), keeps a machine that runs the suite every day from filling its
// disk. A failing run keeps the directory and says where it is, for reading.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

int main(int argc, char* argv[]) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "tq_test_XXXXXX").string();
  const char* dir = ::mkdtemp(tmpl.data());
  if (dir) ::setenv("TMPDIR", dir, 1);
  const int failed = Catch::Session().run(argc, argv);
  if (!dir) return failed;
  std::error_code ec;
  if (failed && !fs::is_empty(dir, ec))  // (listing tests also returns nonzero)
    std::fprintf(stderr, "test scratch files kept in %s\n", dir);
  else
    fs::remove_all(dir, ec);
  return failed;
}
