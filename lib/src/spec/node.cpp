#include "spec/node.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace tq::spec_detail {

const Entry* Node::find(const std::string& key) const {
  for (const auto& e : entries)
    if (e.key == key) return &e;
  return nullptr;
}

Entry* Node::find(const std::string& key) {
  for (auto& e : entries)
    if (e.key == key) return &e;
  return nullptr;
}

NodePtr make_map(const SourceLoc& loc) {
  auto n = std::make_shared<Node>();
  n->kind = Node::Kind::kMap;
  n->loc = loc;
  return n;
}

NodePtr make_plain(const std::string& text, const SourceLoc& loc) {
  auto n = std::make_shared<Node>();
  n->kind = is_null_text(text) ? Node::Kind::kNull : Node::Kind::kScalar;
  n->text = n->is_null() ? "" : text;
  n->loc = loc;
  return n;
}

NodePtr make_string(const std::string& text, const SourceLoc& loc) {
  auto n = std::make_shared<Node>();
  n->kind = Node::Kind::kScalar;
  n->text = text;
  n->quoted = true;
  n->loc = loc;
  return n;
}

NodePtr deep_copy(const Node& n) {
  auto out = std::make_shared<Node>(n);
  for (auto& item : out->items) item = deep_copy(*item);
  for (auto& e : out->entries) e.value = deep_copy(*e.value);
  return out;
}

std::string describe(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kScalar:
      return quote_value(n.text);
    case Node::Kind::kList:
      return "a list";
    case Node::Kind::kMap:
      return "a map";
    default:
      return "null";
  }
}

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    out.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool is_null_text(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> parse_bool(const std::string& s) {
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
    if (s == t) return true;
  for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
    if (s == f) return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  bool neg = i == 1 && s[0] == '-';
  int base = 10;
  if (s.compare(i, 2, "0x") == 0) {
    base = 16;
    i += 2;
  }
  if (i >= s.size()) return std::nullopt;
  uint64_t mag = 0;
  auto [end, ec] = std::from_chars(s.data() + i, s.data() + s.size(), mag, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  const uint64_t max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (mag > max + (neg ? 1 : 0)) return std::nullopt;
  if (!neg) return static_cast<int64_t>(mag);
  return mag == max + 1 ? std::numeric_limits<int64_t>::min() : -static_cast<int64_t>(mag);
}

std::optional<double> parse_float(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  double sign = (i == 1 && s[0] == '-') ? -1.0 : 1.0;
  std::string rest = s.substr(i);
  if (rest == ".inf" || rest == ".Inf" || rest == ".INF")
    return sign * std::numeric_limits<double>::infinity();
  if (i == 0 && (rest == ".nan" || rest == ".NaN" || rest == ".NAN"))
    return std::numeric_limits<double>::quiet_NaN();
  // digits [. digits] [e[+-]digits], at least one digit before the exponent.
  size_t j = 0, digits = 0;
  while (j < rest.size() && std::isdigit(static_cast<unsigned char>(rest[j]))) ++j, ++digits;
  if (j < rest.size() && rest[j] == '.') {
    ++j;
    while (j < rest.size() && std::isdigit(static_cast<unsigned char>(rest[j]))) ++j, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (j < rest.size() && (rest[j] == 'e' || rest[j] == 'E')) {
    ++j;
    if (j < rest.size() && (rest[j] == '+' || rest[j] == '-')) ++j;
    size_t exp_start = j;
    while (j < rest.size() && std::isdigit(static_cast<unsigned char>(rest[j]))) ++j;
    if (j == exp_start) return std::nullopt;
  }
  if (j != rest.size()) return std::nullopt;
  double v = 0;
  // from_chars rejects a leading '+' and accepts "1." / ".5" as written here.
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (end != rest.data() + rest.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range)  // underflow (e-400) or overflow (e400)
    v = rest.find("e-") != std::string::npos || rest.find("E-") != std::string::npos
            ? 0.0
            : std::numeric_limits<double>::infinity();
  return sign * v;
}

nlohmann::json to_json(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kNull:
      return nullptr;
    case Node::Kind::kScalar:
      if (!n.quoted) {
        if (auto b = parse_bool(n.text)) return *b;
        if (auto i = parse_int(n.text)) return *i;
        if (auto f = parse_float(n.text)) return *f;
      }
      return n.text;
    case Node::Kind::kList: {
      auto out = nlohmann::json::array();
      for (const auto& item : n.items) out.push_back(to_json(*item));
      return out;
    }
    case Node::Kind::kMap: {
      auto out = nlohmann::json::object();
      for (const auto& e : n.entries) out[e.key] = to_json(*e.value);
      return out;
    }
  }
  return nullptr;
}

}  // namespace tq::spec_detail
