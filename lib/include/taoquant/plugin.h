// Out-of-tree backend plugins: shared libraries whose backends (and
// observers) register themselves with TAOQUANT_REGISTER_BACKEND /
// TAOQUANT_REGISTER_OBSERVER when loaded.
//
// A plugin says which plugin ABI it was built for with TAOQUANT_PLUGIN() in
// exactly one of its source files. That puts a stamp into the ELF section
// `.taoquant_plugin` (readable with `readelf -p .taoquant_plugin libfoo.so`)
// and exports `int taoquant_plugin_abi_version()`. The loader reads the stamp
// from the file BEFORE loading it, so a plugin built for another ABI is
// refused (naming both versions) without running any of its code.
//
// ABI policy: TAOQUANT_PLUGIN_ABI_VERSION is bumped whenever a change to the
// public headers (lib/include/taoquant/) changes the layout or meaning of
// anything a plugin compiles against (struct members, virtual functions,
// inline code, registration macros). Adding a free function is not a bump.
// A plugin must be rebuilt for each ABI version; the tool version it was
// built with is recorded in the stamp for messages only.
#pragma once

#include <string>
#include <vector>

#define TAOQUANT_PLUGIN_ABI_VERSION 8

#define TQ_PLUGIN_STR_(x) #x
#define TQ_PLUGIN_XSTR_(x) TQ_PLUGIN_STR_(x)
#ifdef TQ_VERSION
#define TQ_PLUGIN_TOOL_VERSION_ TQ_VERSION
#else
#define TQ_PLUGIN_TOOL_VERSION_ "unknown"
#endif

// Put in exactly one source file of a plugin.
#define TAOQUANT_PLUGIN() TQ_PLUGIN_DECLARE_ABI_(TAOQUANT_PLUGIN_ABI_VERSION)

// Implementation of TAOQUANT_PLUGIN(); takes the ABI number so that the
// loader's tests can build a plugin that claims another one. Plugins use
// TAOQUANT_PLUGIN().
#define TQ_PLUGIN_DECLARE_ABI_(abi)                                                     \
  extern "C" __attribute__((visibility("default"), used, section(".taoquant_plugin")))  \
  const char taoquant_plugin_stamp[] =                                                  \
      "taoquant-plugin abi=" TQ_PLUGIN_XSTR_(abi) " cxx11abi=" TQ_PLUGIN_XSTR_(         \
          _GLIBCXX_USE_CXX11_ABI) " version=" TQ_PLUGIN_TOOL_VERSION_;                  \
  extern "C" __attribute__((visibility("default"))) int taoquant_plugin_abi_version() { \
    return abi;                                                                         \
  }

namespace tq {

// Loads one plugin. Every failure is a RuntimeError (exit code 1) naming the
// file: missing file, not an ELF shared library, no TAOQUANT_PLUGIN() stamp,
// plugin ABI or C++ ABI mismatch (both versions named), dlopen failure (the
// dlerror text, e.g. an unresolved symbol), a duplicate backend or observer
// name (both origins named). A plugin that fails registers nothing. Loading
// the same file twice is a no-op.
void load_plugin(const std::string& path);

// Loads `paths`, then (if from_env) every *.so in the directories listed in
// TAO_QUANT_PLUGIN_PATH (colon-separated), in sorted order within each.
void load_plugins(const std::vector<std::string>& paths, bool from_env);

// The plugins loaded so far (absolute paths, in load order).
std::vector<std::string> loaded_plugins();

}  // namespace tq
