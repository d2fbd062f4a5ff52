#include "taoquant/error.h"

#include "core/messages.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

namespace tq {

std::string SourceLoc::str() const {
  std::string s = file;
  if (line > 0) {
    s += ":" + std::to_string(line);
    if (column > 0) s += ":" + std::to_string(column);
  }
  return s;
}

static std::string located(const SourceLoc& loc, const std::string& msg) {
  std::string where = loc.str();
  return where.empty() ? msg : where + ": " + msg;
}

SpecError::SpecError(const SourceLoc& loc, const std::string& msg)
    : Error(ExitCode::kUsage, located(loc, msg)), loc_(loc), bare_(msg) {}

namespace {

// 10000184 -> "10,000,184"
std::string with_commas(size_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string quote_value(const std::string& text) {
  size_t chars = 0, cut = text.size();
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;  // UTF-8 continuation
    if (chars == kQuoteMax) cut = std::min(cut, i);
    ++chars;
  }
  if (chars <= kQuoteMax) return "'" + text + "'";
  return "'" + text.substr(0, cut) + "\u2026' (" + with_commas(chars) + " characters)";
}

std::string path_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return "";
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return "does not exist";
  if (err == ENAMETOOLONG) {
    size_t longest = 0, start = 0;
    for (size_t slash; (slash = path.find('/', start)) != std::string::npos; start = slash + 1)
      longest = std::max(longest, slash - start);
    longest = std::max(longest, path.size() - start);
    return "is too long for the file system (" + with_commas(path.size()) +
           " characters, the longest name " + with_commas(longest) + "; the limits are " +
           std::to_string(PATH_MAX - 1) + " for a path and " + std::to_string(NAME_MAX) +
           " for a name)";
  }
  return std::string("cannot be reached: ") + std::strerror(err);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  size_t best = SIZE_MAX;
  const std::string* pick = nullptr;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best) {
      best = d;
      pick = &c;
    }
  }
  // Close enough: at most a third of the longer word, and at least 1..2 edits.
  size_t limit = std::max<size_t>(2, std::max(word.size(), pick ? pick->size() : 0) / 3);
  if (!pick || best == 0 || best > limit) return "";
  return " (did you mean '" + *pick + "'?)";
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string first_line(const std::string& s) {
  // LibTorch's script errors start with a newline: skip blank lines.
  const auto start = s.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return s.substr(0, s.find('\n'));
  const auto nl = s.find('\n', start);
  return s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
}

std::string format_fixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

}  // namespace tq
