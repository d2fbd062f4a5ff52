// OmegaConf-style interpolation over the node tree.
//
//   ${a.b.0.c}  ${a.b[0].c}   absolute reference (list elements by index)
//   ${.x} ${..x}              relative to the node's parent (and further up)
//   ${env:VAR} ${oc.env:VAR}  environment variable, ${env:VAR,default}
//   \${x}                     a literal "${x}"
//
// A value that is exactly one interpolation takes the referenced node (type,
// list or map and all); interpolations inside a longer string are joined as
// text. A reference to `???` makes the referencing value `???` too.
#include <algorithm>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "spec/passes.h"

namespace tq::spec_detail {
namespace {

struct Segment {
  bool interp = false;
  std::string text;  // literal text, or the inside of ${...}
};

class Resolver {
 public:
  explicit Resolver(Node& root) : root_(root) {}
  const std::set<std::string>& referenced() const { return referenced_; }

  void resolve_deep(Node& n, const std::string& path) {
    if (n.is_scalar()) resolve_scalar(n, path);
    for (size_t i = 0; i < n.items.size(); ++i)
      resolve_deep(*n.items[i], join_path(path, std::to_string(i)));
    for (auto& e : n.entries) resolve_deep(*e.value, join_path(path, e.key));
  }

  void resolve_scalar(Node& n, const std::string& path) {
    if (!n.is_scalar() || n.final) return;
    if (n.text.find("${") == std::string::npos) {
      n.final = true;
      return;
    }
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i].node != &n) continue;
      std::string chain;
      for (size_t j = i; j < stack_.size(); ++j) chain += stack_[j].path + " -> ";
      const Frame& top = stack_.back();
      throw SpecError(top.node->loc, top.path + ": interpolation cycle: " + chain + path);
    }
    if (stack_.size() >= kMaxChain)
      fail(n, path,
           "interpolation nested deeper than " + std::to_string(kMaxChain) +
               " references (${a} refers to ${b}, which refers to ...)");
    stack_.push_back({&n, path});
    struct Pop {
      std::vector<Frame>& s;
      ~Pop() { s.pop_back(); }
    } pop{stack_};

    std::vector<Segment> segs = split(n.text, n, path);
    if (segs.size() == 1 && segs[0].interp) {
      NodePtr v = eval(segs[0].text, n, path);
      check_copy(*v, n, path);
      SourceLoc loc = n.loc;
      n = *deep_copy(*v);
      n.loc = loc;
    } else {
      bool missing = false;
      std::string text = join(segs, n, path, &missing);
      if (text.size() > kMaxText)
        fail(n, path,
             "interpolation makes a value of " + std::to_string(text.size()) +
                 " characters (at most " + std::to_string(kMaxText) + ")");
      charge(text.size(), false, n, path);
      n.kind = Node::Kind::kScalar;
      n.text = missing ? kMissingText : text;
      n.quoted = !missing;
    }
    n.final = true;
  }

 private:
  struct Frame {
    const Node* node;
    std::string path;
  };

  // What interpolation may build: a few lines of ${} can otherwise double a
  // value (or a copied list or map) per line.
  static constexpr size_t kMaxChain = 256;       // references inside references
  static constexpr size_t kMaxText = 1000000;    // characters in one value
  static constexpr size_t kMaxBuilt = 20000000;  // characters in all
  static constexpr size_t kMaxCopied = 1000000;  // list and map values copied in all

  void charge(size_t n, bool nodes, const Node& at, const std::string& path) {
    size_t& used = nodes ? copied_ : built_;
    const size_t limit = nodes ? kMaxCopied : kMaxBuilt;
    used += n;
    if (used > limit)
      fail(at, path,
           "interpolation builds more than " + std::to_string(limit) +
               (nodes ? " values" : " characters") + " in all (references that double a value?)");
  }

  // Levels below `n` and nodes in it (the tree is at most kMaxYamlDepth deep).
  static void measure(const Node& n, int& height, size_t& count) {
    ++count;
    int below = 0;
    for (const auto& item : n.items) {
      int h = 0;
      measure(*item, h, count);
      below = std::max(below, h + 1);
    }
    for (const auto& e : n.entries) {
      int h = 0;
      measure(*e.value, h, count);
      below = std::max(below, h + 1);
    }
    height = below;
  }

  // A referenced list or map copied to `path` keeps the tree within limits.
  void check_copy(const Node& v, const Node& at, const std::string& path) {
    int height = 0;
    size_t count = 0;
    measure(v, height, count);
    const int depth = path.empty() ? 0 : static_cast<int>(split_path(path).size());
    if (depth + height > kMaxYamlDepth)
      fail(at, path,
           "interpolation makes lists and maps nest deeper than " + std::to_string(kMaxYamlDepth) +
               " levels");
    charge(count, true, at, path);
  }

  [[noreturn]] void fail(const Node& at, const std::string& path, const std::string& msg) const {
    throw SpecError(at.loc, path + ": " + msg);
  }

  // Splits text into literals and ${...} (nested ${} kept inside).
  std::vector<Segment> split(const std::string& s, const Node& at, const std::string& path) const {
    std::vector<Segment> out;
    std::string lit;
    for (size_t i = 0; i < s.size();) {
      if (s[i] == '\\' && s.compare(i + 1, 2, "${") == 0) {
        lit += "${";
        i += 3;
      } else if (s.compare(i, 2, "${") == 0) {
        size_t j = i + 2;
        int depth = 1;
        while (j < s.size()) {
          if (s.compare(j, 2, "${") == 0) {
            ++depth;
            ++j;
          } else if (s[j] == '}' && --depth == 0) {
            break;
          }
          ++j;
        }
        if (depth != 0)
          fail(at, path, "unterminated interpolation in " + quote_value(s) + " (missing '}')");
        if (!lit.empty()) out.push_back({false, lit});
        lit.clear();
        out.push_back({true, s.substr(i + 2, j - i - 2)});
        i = j + 1;
      } else {
        lit += s[i++];
      }
    }
    if (!lit.empty() || out.empty()) out.push_back({false, lit});
    return out;
  }

  // The segments joined as text; `???` anywhere makes the whole value missing.
  std::string join(const std::vector<Segment>& segs, const Node& at, const std::string& path,
                   bool* missing) {
    std::string out;
    for (const auto& seg : segs) {
      if (!seg.interp) {
        out += seg.text;
        continue;
      }
      NodePtr v = eval(seg.text, at, path);
      if (v->is_missing()) *missing = true;
      if (v->is_list() || v->is_map())
        fail(at, path,
             "'${" + seg.text + "}' is " + describe(*v) + " and cannot be part of a string");
      out += v->is_null() ? "None" : v->text;
    }
    return out;
  }

  // Text that may be one interpolation (node kept) or a mix (a string).
  NodePtr eval_text(const std::string& text, const Node& at, const std::string& path) {
    std::vector<Segment> segs = split(text, at, path);
    if (segs.size() == 1 && segs[0].interp) return eval(segs[0].text, at, path);
    bool missing = false;
    std::string s = join(segs, at, path, &missing);
    if (missing) return make_plain(kMissingText, at.loc);
    if (segs.size() == 1) return make_plain(s, at.loc);
    return make_string(s, at.loc);
  }

  // The inside of one ${...}.
  NodePtr eval(const std::string& expr_in, const Node& at, const std::string& path) {
    const std::string expr = trim(expr_in);
    size_t colon = expr.find(':');
    bool is_call = colon != std::string::npos && colon > 0 &&
                   expr.find_first_not_of(
                       "abcdefghijklmnopqrstuvwxyz"
                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") == colon;
    if (is_call) return call(expr.substr(0, colon), expr.substr(colon + 1), at, path);
    bool missing = false;
    std::string ref = trim(join(split(expr, at, path), at, path, &missing));
    if (missing) return make_plain(kMissingText, at.loc);
    return lookup(ref, expr, at, path);
  }

  NodePtr call(const std::string& name, const std::string& args_text, const Node& at,
               const std::string& path) {
    if (name != "env" && name != "oc.env")
      fail(at, path,
           "unknown resolver " + quote_value(name) + " in " +
               quote_value("${" + name + ":" + args_text + "}") + " (supported: env, oc.env)" +
               did_you_mean(name, {"env", "oc.env"}));
    std::vector<std::string> args = split_args(args_text);
    if (args.empty() || args.size() > 2 || trim(args[0]).empty())
      fail(at, path,
           quote_value("${" + name + ":" + args_text + "}") + ": expected ${" + name +
               ":VAR} or ${" + name + ":VAR,default}");
    bool missing = false;
    std::string var = trim(join(split(trim(args[0]), at, path), at, path, &missing));
    if (const char* value = std::getenv(var.c_str()))
      return *value ? make_plain(value, at.loc) : make_string("", at.loc);
    if (args.size() == 1)
      fail(at, path,
           "environment variable " + quote_value(var) +
               " is not set (set it, or give a default: ${" + name + ":" +
               (var.size() <= 80 ? var : "VAR") + ",DEFAULT})");
    std::string def = trim(args[1]);
    if (def.size() >= 2 && (def[0] == '\'' || def[0] == '"') && def.back() == def[0]) {
      NodePtr s = eval_text(def.substr(1, def.size() - 2), at, path);
      return s->is_missing() ? s : make_string(s->is_null() ? "" : s->text, at.loc);
    }
    return eval_text(def, at, path);
  }

  // Splits resolver arguments at commas outside ${...} and quotes.
  static std::vector<std::string> split_args(const std::string& s) {
    std::vector<std::string> out(1);
    int depth = 0;
    char quote = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (s.compare(i, 2, "${") == 0) {
        ++depth;
      } else if (c == '}' && depth > 0) {
        --depth;
      } else if (c == ',' && depth == 0) {
        out.emplace_back();
        continue;
      }
      out.back() += c;
    }
    if (out.size() == 1 && trim(out[0]).empty()) out.clear();
    return out;
  }

  NodePtr lookup(std::string ref, const std::string& expr, const Node& at,
                 const std::string& path) {
    const std::string what = "interpolation '${" + expr + "}'";
    for (char& c : ref)
      if (c == '[') c = '.';
    ref.erase(std::remove(ref.begin(), ref.end(), ']'), ref.end());
    size_t up = ref.find_first_not_of('.');
    if (ref.empty() || up == std::string::npos)
      fail(at, path, what + ": expected a key path such as ${results_dir} or ${quantize.mode}");
    std::vector<std::string> parts;
    if (up > 0) {  // relative: '.' is the node's parent, each further '.' one more level up
      parts = split_path(path);
      if (up > parts.size()) fail(at, path, what + ": goes above the top of the spec");
      parts.resize(parts.size() - up);
    }
    for (auto& p : split_path(ref.substr(up))) {
      if (p.empty()) fail(at, path, what + ": empty key in " + quote_value(ref));
      parts.push_back(p);
    }

    referenced_.insert(parts[0]);
    Node* cur = &root_;
    NodePtr cur_ptr;
    std::string cur_path;
    for (const auto& part : parts) {
      resolve_scalar(*cur, cur_path);
      if (cur->is_missing()) return cur_ptr;
      std::string next = join_path(cur_path, part);
      if (cur->is_map()) {
        Entry* e = cur->find(part);
        if (!e) {
          std::vector<std::string> keys;
          for (const auto& k : cur->entries) keys.push_back(join_path(cur_path, k.key));
          fail(at, path,
               what + ": key " + quote_value(next) + " not found" + did_you_mean(next, keys));
        }
        cur_ptr = e->value;
      } else if (cur->is_list()) {
        auto idx = parse_int(part);
        if (!idx || *idx < 0 || static_cast<size_t>(*idx) >= cur->items.size())
          fail(at, path,
               what + ": " + quote_value(part) + " is not an index of '" + cur_path +
                   "' (a list of " + std::to_string(cur->items.size()) + ")");
        cur_ptr = cur->items[static_cast<size_t>(*idx)];
      } else {
        fail(at, path,
             what + ": '" + cur_path + "' is " + describe(*cur) + ", not a map or a list");
      }
      cur = cur_ptr.get();
      cur_path = next;
    }
    resolve_deep(*cur, cur_path);
    return cur_ptr;
  }

  Node& root_;
  std::vector<Frame> stack_;
  size_t built_ = 0;
  size_t copied_ = 0;
  std::set<std::string> referenced_;  // top-level keys used by references
};

void walk(Resolver& r, Node& n, const std::string& path,
          const std::function<bool(const std::string&)>& lenient, bool lenient_pass) {
  bool is_lenient = !path.empty() && lenient(path);
  if (is_lenient && !lenient_pass) return;
  if (n.is_scalar() && is_lenient) {
    try {
      r.resolve_scalar(n, path);
    } catch (const SpecError& e) {
      // Left as written and not final: what refers to it fails the same way.
      spdlog::debug("{} (left as written: tao-quant does not read this key)", e.what());
    }
  } else if (n.is_scalar()) {
    r.resolve_scalar(n, path);
  }
  for (size_t i = 0; i < n.items.size(); ++i)
    walk(r, *n.items[i], join_path(path, std::to_string(i)), lenient, lenient_pass);
  for (auto& e : n.entries) walk(r, *e.value, join_path(path, e.key), lenient, lenient_pass);
}

}  // namespace

std::set<std::string> resolve_interpolations(
    Node& root, const std::function<bool(const std::string&)>& lenient) {
  Resolver r(root);
  // What tao-quant reads first and strictly, so that a reference from it
  // into a lenient section fails loudly; then the rest.
  walk(r, root, "", lenient, false);
  walk(r, root, "", lenient, true);
  return r.referenced();
}

}  // namespace tq::spec_detail
