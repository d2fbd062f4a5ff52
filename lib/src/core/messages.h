// How messages show what the user wrote (private to the library; not in
// taoquant/error.h so that changing it rebuilds only its users).
#pragma once

#include <cstddef>
#include <string>

#include "taoquant/strings.h"

namespace tq {

// How many characters of a value messages show (quote_value, strings.h):
// a value longer than this is cut, with its length.
inline constexpr size_t kQuoteMax = 80;

// Why `path` cannot be used: "does not exist", "is too long for the file
// system (N characters; ...)" (ENAMETOOLONG), "cannot be reached: <reason>";
// "" when it exists.
std::string path_problem(const std::string& path);

// Why `path` cannot be read as a file: path_problem's reasons, or "is a
// folder", "is a FIFO (named pipe), not a regular file", "is a character
// device, not a regular file", ...; "" for a regular file (a symbolic link
// is followed). Reading a FIFO blocks until a writer comes, and a device
// such as /dev/zero never ends: tao-quant reads neither.
std::string file_problem(const std::string& path);

// Reads the regular file at `path` whole into `text`, refusing one larger
// than `max_bytes`: "" when read, else why not (file_problem's reasons, "is
// N bytes, more than the M a WHAT may have", or the OS's error). A FIFO is
// never opened for a blocking read.
std::string read_file_capped(const std::string& path, size_t max_bytes, const std::string& what,
                             std::string& text);

}  // namespace tq
