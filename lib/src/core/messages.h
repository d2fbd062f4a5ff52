// How messages show what the user wrote (private to the library; not in
// taoquant/error.h so that changing it rebuilds only its users).
#pragma once

#include <cstddef>
#include <string>

namespace tq {

// A value (or key) as messages show it: 'text', or for text longer than
// kQuoteMax characters its start and its length: 'aaaa…' (10,000,184 characters).
inline constexpr size_t kQuoteMax = 200;
std::string quote_value(const std::string& text);

// Why `path` cannot be used: "does not exist", "is too long for the file
// system (N characters; ...)" (ENAMETOOLONG), "cannot be reached: <reason>";
// "" when it exists.
std::string path_problem(const std::string& path);

}  // namespace tq
