// Private to the spec parser: the passes over the node tree, in the order
// parse_spec_text runs them.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "spec/node.h"
#include "taoquant/spec.h"

namespace tq::spec_detail {

// 1. `key.path=value` from the command line: sets (creating maps as needed)
// the value, parsed as a YAML flow scalar, list or map.
void apply_override(Node& root, const std::string& arg);

// 2. OmegaConf-style `${a.b}`, `${.sibling}`, `${env:VAR,default}`, in
// place. Values under a path for which `lenient(path)` holds (sections
// tao-quant does not read) are left as written when they cannot be resolved.
// Returns the top-level keys that were referenced.
std::set<std::string> resolve_interpolations(
    Node& root, const std::function<bool(const std::string&)>& lenient);

// True for the paths tao-quant reads (results_dir, quantize, evaluate and
// our dataset subsections) and their ancestors.
bool is_read_path(const std::string& path);

// 3. Validates the tree and fills the typed sections of `spec`. Unknown
// top-level keys are warned about unless `referenced` (helper variables).
void read_sections(const Node& root, const std::set<std::string>& referenced, Spec& spec);

}  // namespace tq::spec_detail
