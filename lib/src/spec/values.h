// Spec values: a YAML node into a typed setting, each refusal a SpecError
// at the node's location naming the dotted key, what was found and what is
// expected (with a "did you mean"); and Section, a map section whose keys
// are checked against the allowed ones. Read by sections.cpp.
#pragma once

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "spec/passes.h"
#include "taoquant/strings.h"

namespace tq::spec_detail {

inline const std::vector<std::string> kColors = {"rgb", "bgr", "gray"};

inline bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

inline std::string join_names(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// did_you_mean, plus a case-insensitive match ("INT8" -> "int8") and a
// unique completion ("dynamic" -> "dynamic_ptq").
inline std::string suggest(const std::string& word, const std::vector<std::string>& candidates) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string* completion = nullptr;
  size_t completions = 0;
  for (const auto& c : candidates) {
    if (c != word && lower(c) == lower(word)) return " (did you mean '" + c + "'?)";
    if (word.size() >= 3 && c.size() > word.size() && c.compare(0, word.size(), word) == 0) {
      completion = &c;
      ++completions;
    }
  }
  std::string close = did_you_mean(word, candidates);
  if (close.empty() && completions == 1) return " (did you mean '" + *completion + "'?)";
  return close;
}

[[noreturn]] inline void fail(const Node& n, const std::string& path, const std::string& msg) {
  throw SpecError(n.loc, path + ": " + msg);
}

[[noreturn]] inline void type_error(const Node& n, const std::string& path,
                                    const std::string& expected) {
  fail(n, path, "expected " + expected + ", found " + describe(n));
}

inline const Node& scalar(const Node& n, const std::string& path, const std::string& expected) {
  if (!n.is_scalar()) type_error(n, path, expected);
  return n;
}

// Converters: (node, dotted path) -> value, or SpecError.
inline std::string to_str(const Node& n, const std::string& path) {
  return scalar(n, path, "a string").text;
}

inline std::string to_nonempty(const Node& n, const std::string& path) {
  const std::string& s = scalar(n, path, "a non-empty string").text;
  if (s.empty()) type_error(n, path, "a non-empty string");
  return s;
}

inline bool to_bool(const Node& n, const std::string& path) {
  auto b = parse_bool(scalar(n, path, "true or false").text);
  if (!b) type_error(n, path, "true or false");
  return *b;
}

inline double to_number(const Node& n, const std::string& path) {
  auto v = parse_float(scalar(n, path, "a number").text);
  if (!v) type_error(n, path, "a number");
  return *v;
}

inline auto positive_number() {  // .inf is a number to YAML, but no setting takes it
  return [](const Node& n, const std::string& path) {
    double v = to_number(n, path);
    if (!(v > 0) || std::isinf(v))
      type_error(n, path, v > 0 ? "a finite number > 0" : "a number > 0");
    return v;
  };
}

inline auto number_in(double lo, double hi) {
  return [lo, hi](const Node& n, const std::string& path) {
    double v = to_number(n, path);
    if (!(v >= lo && v <= hi))
      type_error(n, path, "a number in [" + format_fixed(lo, 1) + ", " + format_fixed(hi, 1) + "]");
    return v;
  };
}

// A gate's limit, in the range its row of the gate table allows.
inline auto gate_limit(const GateDef& d) {
  return [&d](const Node& n, const std::string& path) {
    const double v = to_number(n, path);
    if (!std::isnan(v) && v >= d.lo && v <= d.hi) return v;
    std::string expected =
        "a number in [" + format_fixed(d.lo, 1) + ", " + format_fixed(d.hi, 1) + "]";
    if (std::isinf(d.hi))
      expected = std::isinf(d.lo) ? "a number"
                 : d.lo > 0       ? "a number > 0"
                                  : "a number >= " + format_fixed(d.lo, 1);
    type_error(n, path, expected);
  };
}

// An int >= min (INT_MIN: any int).
inline auto int_at_least(int64_t min) {
  return [min](const Node& n, const std::string& path) {
    const std::string expected = min == 1         ? "a positive integer"
                                 : min == 0       ? "a non-negative integer"
                                 : min == INT_MIN ? "an integer"
                                                  : "an integer >= " + std::to_string(min);
    auto v = parse_int(scalar(n, path, expected).text);
    if (!v || *v < min || *v > INT_MAX) type_error(n, path, expected);
    return static_cast<int>(*v);
  };
}

inline uint64_t to_seed(const Node& n, const std::string& path) {
  auto v = parse_int(scalar(n, path, "a non-negative integer").text);
  if (!v || *v < 0) type_error(n, path, "a non-negative integer");
  return static_cast<uint64_t>(*v);
}

template <class E>
inline auto to_enum(const EnumTable<E>& table) {
  return [&table](const Node& n, const std::string& path) {
    const std::string what(table.what);
    const std::string& s = scalar(n, path, "a " + what + " (one of: " + table.joined() + ")").text;
    if (auto v = table.parse(s)) return *v;
    std::vector<std::string> spellings = table.names();
    for (const auto& alias : table.aliases) spellings.emplace_back(alias.first);
    fail(n, path,
         quote_value(s) + " is not a valid " + what + " (expected one of: " + table.joined() + ")" +
             suggest(s, spellings));
  };
}

template <class T, class Conv>
inline auto list_of(Conv item, std::string expected, bool allow_single = false) {
  return [item, expected, allow_single](const Node& n, const std::string& path) {
    std::vector<T> out;
    if (allow_single && n.is_scalar()) return std::vector<T>{item(n, path)};
    if (!n.is_list()) type_error(n, path, expected);
    for (size_t i = 0; i < n.items.size(); ++i)
      out.push_back(item(*n.items[i], join_path(path, std::to_string(i))));
    return out;
  };
}

inline nlohmann::json to_json_map(const Node& n, const std::string& path) {
  if (!n.is_map()) type_error(n, path, "a map");
  return to_json(n);
}

inline std::string to_device(const Node& n, const std::string& path) {
  const std::string s = to_str(n, path);
  if (s == "cpu" || s == "cuda") return s;
  if (s.compare(0, 5, "cuda:") == 0 && s.size() > 5 &&
      std::all_of(s.begin() + 5, s.end(), [](char c) { return std::isdigit(c); }))
    return s;
  fail(n, path,
       quote_value(s) + " is not a valid device (expected cpu, cuda or cuda:N, e.g. cuda:0)" +
           suggest(s, {"cpu", "cuda"}));
}

inline std::string to_color(const Node& n, const std::string& path) {
  const std::string s = to_str(n, path);
  if (!contains(kColors, s))
    fail(n, path,
         quote_value(s) + " is not a valid color (expected one of: " + join_names(kColors) + ")" +
             suggest(s, kColors));
  return s;
}

// A map section; null counts as an empty one.
class Section {
 public:
  Section(const Node& n, std::string path) : node_(n), path_(std::move(path)) {
    if (!n.is_map() && !n.is_null()) type_error(n, path_, "a map");
  }

  // Rejects keys other than `allowed`; `ignored` ones are logged and skipped.
  void only(const std::vector<std::string>& allowed,
            const std::vector<std::string>& ignored = {}) const {
    for (const auto& e : node_.entries) {
      if (contains(allowed, e.key)) continue;
      if (contains(ignored, e.key)) {
        spdlog::debug("{}: {} ignored (a TAO key tao-quant does not use)", e.key_loc.str(),
                      at(e.key));
        continue;
      }
      throw SpecError(e.key_loc, path_ + ": unknown key " + quote_value(e.key) +
                                     suggest(e.key, allowed) +
                                     "; allowed keys: " + join_names(allowed));
    }
  }

  // The value of `key` when it is set: present, not null, not `???`.
  const Node* get(const std::string& key) const {
    const Entry* e = node_.find(key);
    if (!e || e->value->is_null() || e->value->is_missing()) return nullptr;
    return e->value.get();
  }

  std::string at(const std::string& key) const { return join_path(path_, key); }
  const Node& node() const { return node_; }

  template <class T, class Conv>
  void read(const std::string& key, T& out, Conv conv) const {
    if (const Node* n = get(key)) out = conv(*n, at(key));
  }

 private:
  const Node& node_;
  std::string path_;
};

}  // namespace tq::spec_detail
