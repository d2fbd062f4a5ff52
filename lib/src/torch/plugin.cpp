#include "taoquant/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "taoquant/backend.h"

namespace tq {

namespace fs = std::filesystem;

void load_plugin(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw RuntimeError("plugin '" + path + "' does not exist");
  std::string abs = fs::absolute(path, ec).string();
  auto& reg = BackendRegistry::instance();
  reg.begin_pending(abs);
  void* handle = dlopen(abs.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    reg.drop_pending();
    const char* err = dlerror();
    throw RuntimeError("cannot load plugin '" + path + "': " + (err ? err : "unknown dlopen error"));
  }
  using AbiFn = int (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(handle, "taoquant_plugin_abi_version"));
  if (!abi) {
    reg.drop_pending();
    dlclose(handle);
    throw RuntimeError("plugin '" + path +
                       "' does not export taoquant_plugin_abi_version(); add TAOQUANT_PLUGIN() to one of its "
                       "source files (tao-quant plugin ABI " +
                       std::to_string(TAOQUANT_PLUGIN_ABI_VERSION) + ")");
  }
  int v = abi();
  if (v != TAOQUANT_PLUGIN_ABI_VERSION) {
    reg.drop_pending();
    // Not dlclose'd: its static destructors may reference a registry layout
    // it does not understand.
    throw RuntimeError("plugin '" + path + "' was built for tao-quant plugin ABI " + std::to_string(v) +
                       ", but this tao-quant has plugin ABI " + std::to_string(TAOQUANT_PLUGIN_ABI_VERSION) +
                       "; rebuild the plugin against this version");
  }
  reg.commit_pending();  // throws on a duplicate name, naming both origins
  spdlog::debug("loaded plugin {}", abs);
}

void load_plugins(const std::vector<std::string>& paths, bool from_env) {
  for (const auto& p : paths) load_plugin(p);
  if (!from_env) return;
  const char* env = std::getenv("TAO_QUANT_PLUGIN_PATH");
  if (!env || !*env) return;
  std::stringstream ss(env);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      spdlog::warn("TAO_QUANT_PLUGIN_PATH: '{}' is not a directory; ignored", dir);
      continue;
    }
    std::vector<std::string> libs;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".so") libs.push_back(e.path().string());
    std::sort(libs.begin(), libs.end());
    for (const auto& l : libs) load_plugin(l);
  }
}

}  // namespace tq
