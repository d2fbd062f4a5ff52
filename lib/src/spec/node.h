// Private to the spec parser: the spec as a tree of nodes that remember
// where they came from. YAML is read into this tree; overrides and
// interpolation edit it; validation reads it into a tq::Spec.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taoquant/json.h"

#include "core/messages.h"
#include "taoquant/error.h"

namespace tq::spec_detail {

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Entry {
  std::string key;
  SourceLoc key_loc;
  NodePtr value;
};

struct Node {
  enum class Kind { kNull, kScalar, kList, kMap };
  Kind kind = Kind::kNull;
  std::string text;            // scalar text
  bool quoted = false;         // a string whatever it looks like ("12", !!str 12)
  bool final = false;          // interpolation done: the text is literal
  std::vector<NodePtr> items;  // kList
  std::vector<Entry> entries;  // kMap, in file order
  SourceLoc loc;

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_map() const { return kind == Kind::kMap; }
  // `???`: a value the user must fill in.
  bool is_missing() const { return kind == Kind::kScalar && text == "???"; }
  const Entry* find(const std::string& key) const;
  Entry* find(const std::string& key);
};

// The text that marks a value that must be filled in.
inline constexpr const char* kMissingText = "???";

NodePtr make_map(const SourceLoc& loc);
// A plain (untagged, unquoted) scalar: "null"/"~"/"" become null.
NodePtr make_plain(const std::string& text, const SourceLoc& loc);
NodePtr make_string(const std::string& text, const SourceLoc& loc);
NodePtr deep_copy(const Node& n);

// Lists and maps nest at most this deep (deeper: "nesting deeper than N").
inline constexpr int kMaxYamlDepth = 256;

// Parses YAML text (one document, PyYAML's safe grammar; yaml_reader.cpp). Syntax errors become
// SpecError at the error's position. With `fixed_loc`, every node gets that location instead of its
// YAML mark (used for command-line overrides).
NodePtr parse_yaml(const std::string& text, const std::string& file,
                   const std::optional<SourceLoc>& fixed_loc = std::nullopt);

// "'abc'", "a list", "a map", "null": what a message says was found.
std::string describe(const Node& n);
// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_path(const std::string& path, const std::string& key);

// "a.b.0" -> {"a", "b", "0"}; empty parts are kept ("a..b" -> {"a", "", "b"}).
std::vector<std::string> split_path(const std::string& path);
// Without leading and trailing spaces and tabs.
std::string trim(const std::string& s);

// YAML 1.1 scalar typing (what PyYAML/OmegaConf users expect).
bool is_null_text(const std::string& s);
std::optional<bool> parse_bool(const std::string& s);
std::optional<int64_t> parse_int(const std::string& s);
std::optional<double> parse_float(const std::string& s);

// Null, bool, int, float or string per scalar; `???` stays a string.
nlohmann::json to_json(const Node& n);

}  // namespace tq::spec_detail
