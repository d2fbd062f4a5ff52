#include "spec/node.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include <yaml-cpp/yaml.h>

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

namespace {

// Guards against alias bombs and self-referencing anchors.
constexpr int kMaxDepth = 256;
constexpr size_t kMaxNodes = 1000000;

class Converter {
 public:
  Converter(std::string file, std::optional<SourceLoc> fixed)
      : file_(std::move(file)), fixed_(std::move(fixed)) {}

  NodePtr convert(const YAML::Node& y, const std::string& path, int depth,
                  const SourceLoc* null_loc) {
    SourceLoc loc = loc_of(y.Mark());
    if (++count_ > kMaxNodes || depth > kMaxDepth)
      throw SpecError(loc,
                      "the YAML is nested too deeply or expands to too many values (a recursive "
                      "or repeated alias?)");
    auto n = std::make_shared<Node>();
    n->loc = loc;
    switch (y.Type()) {
      case YAML::NodeType::Scalar:
        n->kind = Node::Kind::kScalar;
        n->text = y.Scalar();
        // "?" = plain; "!" = quoted; anything else is an explicit tag: a string.
        n->quoted = y.Tag() != "?";
        break;
      case YAML::NodeType::Sequence:
        n->kind = Node::Kind::kList;
        for (size_t i = 0; i < y.size(); ++i)
          n->items.push_back(convert(y[i], join_path(path, std::to_string(i)), depth + 1, nullptr));
        break;
      case YAML::NodeType::Map:
        n->kind = Node::Kind::kMap;
        convert_map(y, path, depth, *n);
        break;
      default:  // Null, Undefined
        n->kind = Node::Kind::kNull;
        // yaml-cpp marks an empty value at the next token; the key is better.
        if (null_loc) n->loc = *null_loc;
        break;
    }
    return n;
  }

 private:
  SourceLoc loc_of(const YAML::Mark& m) const {
    if (fixed_) return *fixed_;
    if (m.line < 0) return {file_, 0, 0};
    return {file_, m.line + 1, m.column + 1};
  }

  void convert_map(const YAML::Node& y, const std::string& path, int depth, Node& out) {
    std::vector<NodePtr> merges;  // `<<: *anchor` merge keys (YAML 1.1)
    for (auto it = y.begin(); it != y.end(); ++it) {
      SourceLoc key_loc = loc_of(it->first.Mark());
      if (!it->first.IsScalar())
        throw SpecError(key_loc, (path.empty() ? std::string("spec") : path) +
                                     ": keys must be plain strings, found a " +
                                     (it->first.IsNull() ? "null" : "list or map") + " key");
      const std::string key = it->first.Scalar();
      NodePtr value = convert(it->second, join_path(path, key), depth + 1, &key_loc);
      if (key == "<<" && it->first.Tag() == "?") {
        merges.push_back(value);
        continue;
      }
      if (const Entry* first = out.find(key)) {
        std::string where = first->key_loc.line > 0
                                ? " (first set at line " + std::to_string(first->key_loc.line) + ")"
                                : "";
        throw SpecError(key_loc, (path.empty() ? std::string("spec") : path) + ": duplicate key '" +
                                     key + "'" + where);
      }
      out.entries.push_back({key, key_loc, value});
    }
    // Explicit keys win over merged ones; earlier merge sources win over later.
    for (const auto& m : merges) {
      std::vector<NodePtr> sources = m->is_list() ? m->items : std::vector<NodePtr>{m};
      for (const auto& src : sources) {
        if (!src->is_map())
          throw SpecError(src->loc, join_path(path, "<<") +
                                        ": expected a map (or a list of maps) "
                                        "to merge, found " +
                                        describe(*src));
        for (const auto& e : src->entries)
          if (!out.find(e.key)) out.entries.push_back(e);
      }
    }
  }

  std::string file_;
  std::optional<SourceLoc> fixed_;
  size_t count_ = 0;
};

}  // namespace

NodePtr parse_yaml(const std::string& text, const std::string& file,
                   const std::optional<SourceLoc>& fixed_loc) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    SourceLoc loc = fixed_loc ? *fixed_loc : SourceLoc{file, 0, 0};
    if (!fixed_loc && e.mark.line >= 0) {
      loc.line = e.mark.line + 1;
      loc.column = e.mark.column + 1;
    }
    throw SpecError(loc, "invalid YAML: " + e.msg);
  }
  return Converter(file, fixed_loc).convert(root, "", 0, nullptr);
}

std::string describe(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kScalar:
      return "'" + n.text + "'";
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
