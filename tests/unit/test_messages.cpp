// How messages show what the user wrote: long values are cut (one helper,
// tq::quoted), and a path too long for the OS is reported as such.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/messages.h"
#include "taoquant/batch.h"
#include "taoquant/spec.h"
#include "taoquant/strings.h"

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;

namespace {

std::string spec_error(const std::string& text) {
  try {
    tq::parse_spec_text(text, "spec.yaml", {});
  } catch (const tq::SpecError& e) {
    return e.what();
  }
  return "<accepted>";
}

}  // namespace

TEST_CASE("messages: quoted values are cut after 80 characters", "[spec][messages]") {
  CHECK(tq::quote_value("abc") == "'abc'");
  CHECK(tq::quote_value("") == "''");
  const std::string a80(80, 'a');
  CHECK(tq::quote_value(a80) == "'" + a80 + "'");
  CHECK(tq::quote_value(a80 + "b") == "'" + a80 + "\u2026' (81 characters)");
  CHECK(tq::quote_value(std::string(10000184, 'a')) ==
        "'" + a80 + "\u2026' (10,000,184 characters)");
  // Characters, not bytes: a multi-byte character is never split.
  std::string e;
  for (int i = 0; i < 300; ++i) e += "\u00e9";
  CHECK(tq::quote_value(e) == "'" + e.substr(0, 160) + "\u2026' (300 characters)");
}

TEST_CASE("messages: a huge value in a spec gives a short message", "[spec][messages]") {
  const std::string huge(10000000, 'x');
  std::string msg = spec_error("quantize:\n  mode: " + huge + "\n");
  CHECK(msg.size() < 1000);
  CHECK_THAT(msg, Contains("spec.yaml:2:9: quantize.mode: 'xxxx") &&
                      Contains("\u2026' (10,000,000 characters) is not a valid mode"));
  msg = spec_error("quantize:\n  ? " + huge + "\n  : 1\n");  // a key over 1024: explicit
  CHECK(msg.size() < 1000);
  CHECK_THAT(msg, Contains("unknown key 'xxx") && Contains("(10,000,000 characters)"));
  msg = spec_error("quantize:\n  mode: \"${" + huge + "\"\n");
  CHECK(msg.size() < 1000);
  CHECK_THAT(
      msg, Contains("unterminated interpolation in '${xxx") && Contains("(10,000,002 characters)"));
}

TEST_CASE("messages: a path too long for the OS is not 'does not exist'", "[spec][messages]") {
  const std::string long_name(300, 'n');  // NAME_MAX is 255
  const std::string long_path = "/tmp/" + std::string(5000, 'p');
  CHECK(tq::path_problem("/") == "");
  CHECK(tq::path_problem("/nonexistent-tq/x") == "does not exist");
  CHECK_THAT(tq::path_problem("/tmp/" + long_name),
             Contains("is too long for the file system (305 characters, the longest name 300"));
  CHECK_THAT(tq::path_problem(long_path + "/x"), Contains("is too long for the file system"));
  try {
    tq::parse_manifest_text("jobs:\n  - spec: " + long_name + ".yaml\n", "m.yaml", "/tmp");
    FAIL("accepted");
  } catch (const tq::SpecError& e) {
    CHECK(e.code() == tq::ExitCode::kUsage);
    CHECK(e.loc().line == 2);
    CHECK_THAT(std::string(e.what()),
               Contains("is too long for the file system") && !Contains("does not exist"));
  }
}

TEST_CASE("messages: first_line skips the blank lines LibTorch's script errors start with",
          "[messages]") {
  CHECK(tq::first_line("one\ntwo") == "one");
  CHECK(tq::first_line("\nReturn value was annotated as X\n  File \"code\"") ==
        "Return value was annotated as X");
  CHECK(tq::first_line(" \n\t\nlast") == "last");
  CHECK(tq::first_line("no newline") == "no newline");
  CHECK(tq::first_line("") == "");
  CHECK(tq::first_line("\n\n") == "");
}

TEST_CASE("messages: a file a user hands over is read only when regular, up to a cap",
          "[messages]") {
  const std::string p = "/tmp/tq_capped_" + std::to_string(::getpid());
  { std::ofstream(p) << std::string(1000, 'x'); }
  std::string text = "old";
  CHECK(tq::read_file_capped(p, 1000, "report", text) == "");
  CHECK(text == std::string(1000, 'x'));
  CHECK(tq::read_file_capped(p, 999, "report", text) ==
        "is 1000 bytes, more than the 999 bytes a report may have");
  CHECK(text.empty());
  CHECK(tq::file_problem(p) == "");
  std::filesystem::remove(p);
  CHECK(tq::read_file_capped(p, 10, "report", text) == "does not exist");
  CHECK(tq::read_file_capped("/dev/zero", 10, "report", text) ==
        "is a character device, not a regular file");
  CHECK(tq::file_problem("/tmp") == "is a folder, not a file");
  REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
  CHECK(tq::file_problem(p) == "is a FIFO (named pipe), not a regular file");
  CHECK(tq::read_file_capped(p, 10, "report", text) ==
        "is a FIFO (named pipe), not a regular file");
  std::filesystem::remove(p);
}
