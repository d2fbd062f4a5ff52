// The one YAML reader (specs, overrides, batch manifests): libyaml, the C
// parser PyYAML is built on, read event by event into the node tree.
//
// The grammar is PyYAML's safe loader: one document per file, anchors must
// be defined before use and only once, and only the YAML 1.1 core tags
// are allowed. Duplicate keys are refused as OmegaConf (which reads TAO's
// specs) refuses them. The tree is built with an explicit stack, so no
// input can overflow the C++ stack: nesting deeper than kMaxDepth is an
// error with the line where it happens, and later passes (which recurse)
// only ever see trees at most kMaxDepth deep.
#include <yaml.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "spec/node.h"

namespace tq::spec_detail {
namespace {

constexpr size_t kMaxNodes = 1000000;
constexpr const char* kTagPrefix = "tag:yaml.org,2002:";

struct Event {
  yaml_event_t e{};
  ~Event() { yaml_event_delete(&e); }
};

// What is known about a finished node with an anchor, for its aliases.
struct Anchored {
  NodePtr node;
  int height = 0;   // levels below the node
  size_t size = 1;  // nodes in the subtree
  SourceLoc loc;
  bool done = false;
};

// An open list or map.
struct Frame {
  NodePtr node;
  std::string path;
  std::string anchor;
  int height = 0;
  size_t size = 1;
  bool have_key = false;  // maps: a key is waiting for its value
  std::string key;
  SourceLoc key_loc;
  bool key_is_merge = false;
  std::vector<NodePtr> merges;  // `<<: *anchor` merge keys (YAML 1.1)
};

std::string tag_of(const yaml_char_t* t) {
  return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
}

// "!!int" for the YAML core tags, the tag itself otherwise.
std::string short_tag(const std::string& tag) {
  return tag.rfind(kTagPrefix, 0) == 0 ? "!!" + tag.substr(std::string(kTagPrefix).size()) : tag;
}

// A position as libyaml counts it: 0-based line and column in characters.
struct Pos {
  size_t line = 0, column = 0;
  bool operator<(const Pos& o) const { return line != o.line ? line < o.line : column < o.column; }
};

// PyYAML's scanner (pure Python, what yaml.safe_load and OmegaConf use)
// refuses a tab anywhere but inside quotes, block scalar bodies and
// comments; libyaml allows tabs between tokens. This finds the first tab
// PyYAML would refuse, before `limit`. `allowed` holds the spans (from
// the scalar events) of quoted scalars and block scalar bodies, in order.
std::optional<Pos> first_bad_tab(const std::string& text,
                                 const std::vector<std::pair<Pos, Pos>>& allowed, Pos limit) {
  if (text.size() >= 2 &&
      (text[0] == '\xFF' || text[0] == '\xFE' || text[0] == '\0' || text[1] == '\0'))
    return std::nullopt;  // UTF-16 or UTF-32: not scanned here
  size_t i = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  Pos at;
  size_t span = 0;
  bool comment = false;
  char prev = '\n';
  for (; i < text.size() && at < limit; ++i) {
    const char c = text[i];
    while (span < allowed.size() && !(at < allowed[span].second)) ++span;
    const bool inside = span < allowed.size() && !(at < allowed[span].first);
    if (c == '\n' || (c == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'))) {
      comment = false;
      prev = '\n';
      at.line++, at.column = 0;
      continue;
    }
    if (!inside && c == '#' && (prev == ' ' || prev == '\t' || prev == '\n' || prev == '\r'))
      comment = true;
    if (!inside && !comment && c == '\t') return at;
    prev = c;
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) at.column++;
  }
  return std::nullopt;
}

class Reader {
 public:
  Reader(std::string file, std::optional<SourceLoc> fixed)
      : file_(std::move(file)), fixed_(std::move(fixed)) {
    if (!yaml_parser_initialize(&parser_)) throw std::bad_alloc();
  }
  ~Reader() { yaml_parser_delete(&parser_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  NodePtr read(const std::string& text) {
    text_ = &text;
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                 text.size());
    Event ev;
    while (next(ev), ev.e.type != YAML_STREAM_END_EVENT) {
      if (ev.e.type == YAML_DOCUMENT_START_EVENT && documents_++ > 0) {
        check_tabs({ev.e.start_mark.line, ev.e.start_mark.column});
        throw SpecError(loc_of(ev.e.start_mark),
                        "invalid YAML: expected a single document in the file, but found another "
                        "document (a second '---'); a spec is one document");
      }
      on_event(ev.e);
    }
    check_tabs({SIZE_MAX, SIZE_MAX});
    return root_ ? root_ : make_plain("", fixed_ ? *fixed_ : SourceLoc{file_, 1, 1});
  }

 private:
  void next(Event& ev) {
    yaml_event_delete(&ev.e);
    if (yaml_parser_parse(&parser_, &ev.e)) return;
    ev.e = yaml_event_t{};
    throw_parser_error();
  }

  // A tab PyYAML refuses before `limit` is the first error.
  void check_tabs(Pos limit) const {
    if (auto tab = first_bad_tab(*text_, allowed_tabs_, limit))
      throw SpecError(fixed_ ? *fixed_
                             : SourceLoc{file_, static_cast<int>(tab->line) + 1,
                                         static_cast<int>(tab->column) + 1},
                      "invalid YAML: found a tab character where only spaces are allowed (tabs "
                      "may only appear inside quotes, block scalars and comments)");
  }

  [[noreturn]] void throw_parser_error() const {
    const yaml_mark_t& m = parser_.problem_mark;
    if (parser_.error == YAML_READER_ERROR) {
      check_tabs(to_pos(locate_offset(parser_.problem_offset)));
    } else {
      check_tabs({m.line, m.column});
    }
    std::string msg = "invalid YAML: ";
    msg += parser_.problem ? parser_.problem : "cannot read the file";
    if (parser_.context) {
      msg += std::string(" (") + parser_.context;
      if (!fixed_) msg += " that starts at line " + std::to_string(parser_.context_mark.line + 1);
      msg += ")";
    }
    SourceLoc loc = loc_of(clamp_to_end(m));
    if (parser_.error == YAML_READER_ERROR && !fixed_) loc = locate_offset(parser_.problem_offset);
    throw SpecError(loc, msg);
  }

  // Reader errors (bad UTF-8, control characters) carry a byte offset only.
  SourceLoc locate_offset(size_t offset) const {
    SourceLoc loc{file_, 1, 1};
    const size_t end = std::min(offset, text_ ? text_->size() : 0);
    for (size_t i = 0; i < end; ++i) {
      const unsigned char c = static_cast<unsigned char>((*text_)[i]);
      if (c == '\n')
        ++loc.line, loc.column = 1;
      else if ((c & 0xC0) != 0x80)
        ++loc.column;  // count characters, not UTF-8 bytes
    }
    return loc;
  }

  // libyaml puts the end of a file without a final newline on a line of
  // its own; PyYAML (and the user) see it at the end of the last line.
  yaml_mark_t clamp_to_end(yaml_mark_t m) const {
    Pos end;
    const std::string& t = *text_;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == '\n' || (t[i] == '\r' && (i + 1 == t.size() || t[i + 1] != '\n'))) {
        end.line++, end.column = 0;
      } else if ((static_cast<unsigned char>(t[i]) & 0xC0) != 0x80 && t[i] != '\r') {
        end.column++;
      }
    }
    if (end < Pos{m.line, m.column}) m.line = end.line, m.column = end.column;
    return m;
  }

  Pos to_pos(const SourceLoc& loc) const {
    return {static_cast<size_t>(loc.line - 1), static_cast<size_t>(loc.column - 1)};
  }

  SourceLoc loc_of(const yaml_mark_t& m) const {
    if (fixed_) return *fixed_;
    return {file_, static_cast<int>(m.line) + 1, static_cast<int>(m.column) + 1};
  }

  const std::string& path() const { return stack_.empty() ? root_path_ : stack_.back().path; }

  std::string where() const { return path().empty() ? std::string("spec") : path(); }

  // The path of the value being read (not yet in the tree).
  std::string value_where() const {
    const std::string p = child_path();
    return p.empty() ? std::string("spec") : p;
  }

  void on_event(const yaml_event_t& e) {
    switch (e.type) {
      case YAML_SCALAR_EVENT:
        return add(scalar(e), loc_of(e.start_mark), 0, 1, tag_of(e.data.scalar.anchor), &e);
      case YAML_SEQUENCE_START_EVENT:
        return open(e, Node::Kind::kList, tag_of(e.data.sequence_start.tag),
                    tag_of(e.data.sequence_start.anchor));
      case YAML_MAPPING_START_EVENT:
        return open(e, Node::Kind::kMap, tag_of(e.data.mapping_start.tag),
                    tag_of(e.data.mapping_start.anchor));
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        return close();
      case YAML_ALIAS_EVENT:
        return alias(e);
      default:  // stream and document start/end
        return;
    }
  }

  NodePtr scalar(const yaml_event_t& e) {
    const auto& s = e.data.scalar;
    const std::string text(reinterpret_cast<const char*>(s.value), s.length);
    const SourceLoc loc = loc_of(e.start_mark);
    note_tab_span(e);
    const std::string tag = tag_of(s.tag);
    if (tag.empty()) return s.plain_implicit ? make_plain(text, loc) : make_string(text, loc);
    if (tag == "!" || tag == std::string(kTagPrefix) + "str") return make_string(text, loc);
    const std::string t = short_tag(tag);
    bool ok = false;
    if (t == "!!null") return make_plain("", loc);
    if (t == "!!bool") ok = parse_bool(text).has_value();
    if (t == "!!int") ok = parse_int(text).has_value();
    if (t == "!!float") ok = parse_float(text).has_value() || parse_int(text).has_value();
    if (t != "!!bool" && t != "!!int" && t != "!!float") throw_bad_tag(t, "a scalar", loc);
    if (!ok)
      throw SpecError(loc, value_where() + ": " + quote_value(text) + " is not a valid " +
                               t.substr(2) + " (tag " + t + ")");
    return make_plain(text, loc);
  }

  // Quoted scalars and block scalar bodies may hold tabs.
  void note_tab_span(const yaml_event_t& e) {
    const auto style = e.data.scalar.style;
    if (style == YAML_PLAIN_SCALAR_STYLE) return;
    Pos from{e.start_mark.line, e.start_mark.column};
    if (style == YAML_LITERAL_SCALAR_STYLE || style == YAML_FOLDED_SCALAR_STYLE)
      from = {from.line + 1, 0};  // not the header line (`|` and its indicators)
    allowed_tabs_.push_back({from, {e.end_mark.line, e.end_mark.column}});
  }

  [[noreturn]] void throw_bad_tag(const std::string& t, const std::string& what,
                                  const SourceLoc& loc) const {
    throw SpecError(loc, value_where() + ": the tag '" + t + "' is not allowed on " + what +
                             " (a spec may use !!str, !!int, !!float, !!bool, !!null on values, "
                             "!!seq on lists and !!map on maps)");
  }

  void open(const yaml_event_t& e, Node::Kind kind, const std::string& tag,
            const std::string& anchor) {
    const SourceLoc loc = loc_of(e.start_mark);
    const std::string t = short_tag(tag);
    const bool list = kind == Node::Kind::kList;
    if (!tag.empty() && tag != "!" && t != (list ? "!!seq" : "!!map"))
      throw_bad_tag(t, list ? "a list" : "a map", loc);
    if (static_cast<int>(stack_.size()) >= kMaxYamlDepth) throw_too_deep(loc);
    check_key_kind(list ? "a list" : "a map", loc);
    count(1, loc);
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->loc = loc;
    Frame f;
    f.node = n;
    f.path = child_path();
    f.anchor = anchor;
    if (!anchor.empty()) define(anchor, loc);
    stack_.push_back(std::move(f));
  }

  [[noreturn]] void throw_too_deep(const SourceLoc& loc) const {
    throw SpecError(loc, "nesting deeper than " + std::to_string(kMaxYamlDepth) +
                             " levels (lists and maps inside each other)");
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.node->is_map()) merge(f);
    add(f.node, f.node->loc, f.height + 1, f.size, f.anchor, nullptr, true);
  }

  // A key's value may not be a list or map key.
  void check_key_kind(const std::string& what, const SourceLoc& loc) const {
    if (stack_.empty() || !stack_.back().node->is_map() || stack_.back().have_key) return;
    throw SpecError(loc, where() + ": keys must be plain strings, found " + what + " key");
  }

  std::string child_path() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    if (f.node->is_list()) return join_path(f.path, std::to_string(f.node->items.size()));
    return join_path(f.path, f.key);
  }

  void define(const std::string& anchor, const SourceLoc& loc) {
    auto it = anchors_.find(anchor);
    if (it != anchors_.end())
      throw SpecError(loc, "invalid YAML: the anchor '&" + anchor +
                               "' is defined twice (first at " + it->second.loc.str() + ")");
    anchors_[anchor].loc = loc;
  }

  void alias(const yaml_event_t& e) {
    const SourceLoc loc = loc_of(e.start_mark);
    const std::string name = tag_of(e.data.alias.anchor);
    auto it = anchors_.find(name);
    if (it == anchors_.end())
      throw SpecError(loc,
                      "invalid YAML: the alias '*" + name + "' names no anchor defined before it");
    const Anchored& a = it->second;
    if (!a.done)
      throw SpecError(loc, "invalid YAML: the alias '*" + name +
                               "' is inside the value it names (a recursive alias)");
    if (static_cast<int>(stack_.size()) + a.height > kMaxYamlDepth) throw_too_deep(loc);
    add(deep_copy(*a.node), loc, a.height, a.size, "", nullptr, true);
  }

  void count(size_t n, const SourceLoc& loc) {
    nodes_ += n;
    if (nodes_ > kMaxNodes)
      throw SpecError(loc, "the YAML expands to more than " + std::to_string(kMaxNodes) +
                               " values (a repeated alias?)");
  }

  // A finished node: into its list or map, or the document's root.
  void add(NodePtr n, const SourceLoc& loc, int height, size_t size, const std::string& anchor,
           const yaml_event_t* scalar_event, bool counted = false) {
    if (!counted) {
      if (static_cast<int>(stack_.size()) > kMaxYamlDepth) throw_too_deep(loc);
      count(size, loc);
    }
    if (scalar_event && !anchor.empty()) define(anchor, loc);
    if (!anchor.empty()) anchors_[anchor] = {n, height, size, anchors_[anchor].loc, true};
    if (stack_.empty()) {
      root_ = n;
      return;
    }
    Frame& f = stack_.back();
    f.height = std::max(f.height, height);
    f.size += size;
    if (f.node->is_list()) {
      f.node->items.push_back(n);
    } else if (!f.have_key) {
      set_key(f, *n, scalar_event, loc);
    } else {
      set_value(f, n);
    }
  }

  void set_key(Frame& f, const Node& key, const yaml_event_t* e, const SourceLoc& loc) {
    if (key.is_null())
      throw SpecError(loc, where() + ": keys must be plain strings, found a null key");
    if (!key.is_scalar())
      throw SpecError(loc, where() + ": keys must be plain strings, found a list or map key");
    f.have_key = true;
    f.key = key.text;
    f.key_loc = loc;
    f.key_is_merge = key.text == "<<" && e && e->data.scalar.plain_implicit && !e->data.scalar.tag;
  }

  void set_value(Frame& f, NodePtr value) {
    f.have_key = false;
    if (value->is_null()) value->loc = f.key_loc;  // an empty value: the key is the place
    if (f.key_is_merge) {
      f.merges.push_back(value);
      return;
    }
    if (const Entry* first = f.node->find(f.key)) {
      std::string at = first->key_loc.line > 0
                           ? " (first set at line " + std::to_string(first->key_loc.line) + ")"
                           : "";
      throw SpecError(f.key_loc, where() + ": duplicate key " + quote_value(f.key) + at);
    }
    f.node->entries.push_back({f.key, f.key_loc, value});
  }

  // Explicit keys win over merged ones; earlier merge sources over later.
  static void merge(Frame& f) {
    for (const auto& m : f.merges) {
      std::vector<NodePtr> sources = m->is_list() ? m->items : std::vector<NodePtr>{m};
      for (const auto& src : sources) {
        if (!src->is_map())
          throw SpecError(src->loc, join_path(f.path, "<<") +
                                        ": expected a map (or a list of maps) to merge, found " +
                                        describe(*src));
        for (const auto& e : src->entries)
          if (!f.node->find(e.key)) f.node->entries.push_back(e);
      }
    }
  }

  yaml_parser_t parser_{};
  std::string file_;
  std::optional<SourceLoc> fixed_;
  std::vector<Frame> stack_;
  std::map<std::string, Anchored> anchors_;
  NodePtr root_;
  std::string root_path_;
  size_t nodes_ = 0;
  int documents_ = 0;
  const std::string* text_ = nullptr;
  std::vector<std::pair<Pos, Pos>> allowed_tabs_;
};

}  // namespace

NodePtr parse_yaml(const std::string& text, const std::string& file,
                   const std::optional<SourceLoc>& fixed_loc) {
  return Reader(file, fixed_loc).read(text);
}

}  // namespace tq::spec_detail
