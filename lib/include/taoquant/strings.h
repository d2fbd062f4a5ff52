// Small string helpers for messages and tables. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace tq {

// "a, b, c" (or with another separator); "" for none.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");
// The first line that is not blank (LibTorch messages start with a newline
// and carry a backtrace after it).
std::string first_line(const std::string& s);
// A value (or key) as messages show it: 'text', or for text longer than 80
// characters its start and its length: 'aaaa…' (10,000,184 characters).
std::string quote_value(const std::string& text);
// `v` with `prec` digits after the point ("3.14").
std::string format_fixed(double v, int prec);

}  // namespace tq
