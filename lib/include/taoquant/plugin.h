// Out-of-tree backend plugins: shared libraries whose backends register
// themselves (TAOQUANT_REGISTER_BACKEND) when loaded. A plugin must also say
// which plugin ABI it was built for, with TAOQUANT_PLUGIN() in one source
// file; a mismatch is refused naming both versions.
#pragma once

#include <string>
#include <vector>

// Bumped on any incompatible change of the public headers.
#define TAOQUANT_PLUGIN_ABI_VERSION 1

#define TAOQUANT_PLUGIN()                                                          \
  extern "C" __attribute__((visibility("default"))) int taoquant_plugin_abi_version() { \
    return TAOQUANT_PLUGIN_ABI_VERSION;                                            \
  }

namespace tq {

// Loads one plugin. Errors (RuntimeError, exit code 1): missing file, dlopen
// failure (the dlerror text, e.g. an unresolved symbol), missing ABI symbol,
// ABI mismatch, duplicate backend name (naming both origins).
void load_plugin(const std::string& path);

// Loads `paths`, then (if from_env) every *.so in the directories listed in
// TAO_QUANT_PLUGIN_PATH (colon-separated), in sorted order.
void load_plugins(const std::vector<std::string>& paths, bool from_env);

}  // namespace tq
