// `key.path=value` overrides from the command line (Hydra style; a leading
// `+` or `++` is accepted and means the same).
#include "spec/passes.h"

namespace tq::spec_detail {
namespace {

// The value: `[...]`, `{...}` and quoted text are YAML flow; anything else
// is taken as written (so `*.fc`, `a#b` and `???` need no quoting).
NodePtr parse_value(const std::string& key, const std::string& raw, const SourceLoc& loc) {
  const std::string v = trim(raw);
  if (v.empty()) return make_string("", loc);
  if (v[0] != '[' && v[0] != '{' && v[0] != '"' && v[0] != '\'') return make_plain(v, loc);
  try {
    return parse_yaml(v, loc.file, loc);
  } catch (const SpecError& e) {
    throw SpecError(loc, key + ": cannot parse the value " + quote_value(v) + ": " +
                             e.bare_message() +
                             " (quote items that start with '*', '&', '!' or contain ': ')");
  }
}

}  // namespace

void apply_override(Node& root, const std::string& arg) {
  const SourceLoc loc{"command-line override " + quote_value(arg), 0, 0};
  const size_t eq = arg.find('=');
  if (eq == std::string::npos)
    throw SpecError(loc, "expected KEY=VALUE, for example quantize.mode=static_ptq");
  std::string key = trim(arg.substr(0, eq));
  if (key.compare(0, 2, "++") == 0)
    key.erase(0, 2);
  else if (key.compare(0, 1, "+") == 0)
    key.erase(0, 1);
  if (key.empty())
    throw SpecError(loc, "empty key before '=' (expected KEY=VALUE, e.g. results_dir=runs/x)");
  const std::vector<std::string> parts = split_path(key);
  for (const auto& p : parts)
    if (p.empty())
      throw SpecError(loc, quote_value(key) + " has an empty part (expected a.b.c=VALUE)");
  NodePtr value = parse_value(key, arg.substr(eq + 1), loc);

  Node* cur = &root;
  std::string path;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const bool last = i + 1 == parts.size();
    NodePtr* slot = nullptr;
    if (cur->is_map()) {
      Entry* e = cur->find(part);
      if (!e) {
        cur->entries.push_back({part, loc, nullptr});
        e = &cur->entries.back();
      }
      slot = &e->value;
    } else if (cur->is_list()) {
      auto idx = parse_int(part);
      const size_t size = cur->items.size();
      if (!idx || *idx < 0 || static_cast<size_t>(*idx) > size)
        throw SpecError(loc, quote_value(key) + ": '" + path + "' is a list of " +
                                 std::to_string(size) + " and " + quote_value(part) +
                                 " is not an index (0.." + std::to_string(size) + ", " +
                                 std::to_string(size) + " appends)");
      if (static_cast<size_t>(*idx) == size) cur->items.push_back(nullptr);
      slot = &cur->items[static_cast<size_t>(*idx)];
    } else {
      throw SpecError(loc, quote_value(key) + ": cannot set " + quote_value(part) + " inside '" +
                               path + "', which is " + describe(*cur) + ", not a map");
    }
    if (last) {
      *slot = value;
    } else if (!*slot || (*slot)->is_null() || (*slot)->is_missing()) {
      // Create what is missing on the way: a list when indexed, else a map.
      auto idx = parse_int(parts[i + 1]);
      *slot = make_map(loc);
      if (idx && *idx >= 0) (*slot)->kind = Node::Kind::kList;
    }
    cur = slot->get();
    path = join_path(path, part);
  }
}

}  // namespace tq::spec_detail
