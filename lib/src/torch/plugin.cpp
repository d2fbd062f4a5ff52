// The plugin loader: stamp check (read from the ELF file before loading),
// dlopen with registrations held back, then an all-or-nothing commit.
#include "taoquant/plugin.h"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "taoquant/backend.h"
#include "taoquant/observer.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStampSection = ".taoquant_plugin";

#ifndef TQ_VERSION
#define TQ_VERSION "unknown"
#endif

std::string our_cxx11_abi() {
  return TQ_PLUGIN_XSTR_(_GLIBCXX_USE_CXX11_ABI);
}

struct Stamp {
  std::string text;  // the whole stamp string
  int abi = -1;
  std::string cxx11abi, version;
};

std::vector<std::string>& loaded() {
  static std::vector<std::string> v;
  return v;
}

// A minimal reader of ELF64 section headers: finds the stamp section of
// `path` without loading the library. nullopt when there is none.
class ElfReader {
 public:
  ElfReader(const std::string& path, const std::string& shown)
      : shown_(shown), f_(path, std::ios::binary) {
    if (!f_) throw RuntimeError("cannot open plugin '" + shown + "': " + std::strerror(errno));
  }

  std::optional<std::string> section(const char* wanted) {
    Elf64_Ehdr eh{};
    if (!read(0, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
      fail("is not a shared library (no ELF header)");
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
      fail("is not a 64-bit little-endian ELF file, as tao-quant on this machine needs");
    if (eh.e_type != ET_DYN)
      fail("is not a shared library (ELF type " + std::to_string(eh.e_type) +
           "); build it with add_library(<name> MODULE ...)");
    if (eh.e_shoff == 0) return std::nullopt;
    if (eh.e_shentsize != sizeof(Elf64_Shdr)) fail("has malformed ELF section headers");
    uint64_t count = eh.e_shnum;
    uint32_t strndx = eh.e_shstrndx;
    if (count == 0 ||
        strndx == SHN_XINDEX) {  // extended numbering: the real values live in section 0
      Elf64_Shdr s0{};
      if (!read(eh.e_shoff, &s0, sizeof s0)) fail("has truncated ELF section headers");
      if (count == 0) count = s0.sh_size;
      if (strndx == SHN_XINDEX) strndx = s0.sh_link;
    }
    if (count == 0 || count > (1u << 20) || strndx >= count)
      fail("has malformed ELF section headers");
    std::vector<Elf64_Shdr> sh(count);
    if (!read(eh.e_shoff, sh.data(), count * sizeof(Elf64_Shdr)))
      fail("has truncated ELF section headers");
    const Elf64_Shdr& strtab = sh[strndx];
    if (strtab.sh_size > (64u << 20)) fail("has a malformed ELF section name table");
    std::string names(strtab.sh_size, '\0');
    if (!read(strtab.sh_offset, names.data(), names.size()))
      fail("has a truncated ELF section name table");
    for (const auto& s : sh) {
      if (s.sh_name >= names.size() || std::strcmp(names.c_str() + s.sh_name, wanted) != 0)
        continue;
      if (s.sh_type == SHT_NOBITS) return std::string();
      std::string data(std::min<uint64_t>(s.sh_size, 4096), '\0');
      if (!read(s.sh_offset, data.data(), data.size()))
        fail("has a truncated " + std::string(wanted) + " section");
      return data;
    }
    return std::nullopt;
  }

 private:
  bool read(uint64_t off, void* dst, uint64_t n) {
    f_.clear();
    f_.seekg(static_cast<std::streamoff>(off));
    f_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    return static_cast<uint64_t>(f_.gcount()) == n;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw RuntimeError("plugin '" + shown_ + "' " + what);
  }
  std::string shown_;
  std::ifstream f_;
};

std::optional<Stamp> read_stamp(const std::string& path, const std::string& shown) {
  ElfReader elf(path, shown);
  auto data = elf.section(kStampSection);
  if (!data) return std::nullopt;
  Stamp st;
  st.text = std::string(data->c_str());  // up to the first NUL
  std::istringstream in(st.text);
  std::string tok;
  bool magic = false;
  while (in >> tok) {
    if (tok == "taoquant-plugin") magic = true;
    auto eq = tok.find('=');
    if (eq == std::string::npos) continue;
    std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (k == "abi") {
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (end && *end == '\0' && !v.empty() && n >= 0 && n < 1000000) st.abi = static_cast<int>(n);
    } else if (k == "cxx11abi") {
      st.cxx11abi = v;
    } else if (k == "version") {
      st.version = v;
    }
  }
  if (!magic || st.abi < 0)
    throw RuntimeError("plugin '" + shown + "' has a malformed plugin stamp '" + st.text +
                       "' in section " + kStampSection +
                       "; rebuild it with TAOQUANT_PLUGIN() from tao-quant " + TQ_VERSION);
  return st;
}

// Holds registrations back while a plugin loads; drops them unless committed.
class PendingRegistrations {
 public:
  explicit PendingRegistrations(const std::string& origin) {
    BackendRegistry::instance().begin_pending(origin);
    ObserverRegistry::instance().begin_pending(origin);
  }
  ~PendingRegistrations() {
    if (done_) return;
    BackendRegistry::instance().drop_pending();
    ObserverRegistry::instance().drop_pending();
  }
  // All or nothing across both registries.
  void commit() {
    auto& obs = ObserverRegistry::instance();
    obs.check_pending();                           // throws before any change
    BackendRegistry::instance().commit_pending();  // all or nothing
    done_ = true;
    obs.commit_pending();
  }

 private:
  bool done_ = false;
};

}  // namespace

namespace {

// The plugin's file: present, not a directory; its canonical path.
std::string plugin_file(const std::string& path) {
  if (path.empty()) throw RuntimeError("plugin path is empty");
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw RuntimeError("cannot access plugin '" + path + "': " + ec.message());
  if (!fs::exists(st)) throw RuntimeError("plugin '" + path + "' does not exist");
  if (fs::is_directory(st))
    throw RuntimeError(
        "plugin '" + path +
        "' is a directory; pass the shared library (lib<name>.so), or list the directory in "
        "TAO_QUANT_PLUGIN_PATH");
  std::string abs = fs::canonical(path, ec).string();
  if (ec) abs = fs::absolute(path).string();
  return abs;
}

// The stamp, read from the file before it is loaded: this tao-quant's
// plugin ABI and C++ library ABI, or a refusal saying what to rebuild.
Stamp checked_stamp(const std::string& abs, const std::string& path) {
  const std::string ours = std::to_string(TAOQUANT_PLUGIN_ABI_VERSION);
  auto stamp = read_stamp(abs, path);
  if (!stamp)
    throw RuntimeError(
        "plugin '" + path + "' has no tao-quant plugin stamp (section " + kStampSection +
        "): add TAOQUANT_PLUGIN() to one of its source files and rebuild it against tao-quant " +
        TQ_VERSION + " (plugin ABI " + ours + ")");
  if (stamp->abi != TAOQUANT_PLUGIN_ABI_VERSION)
    throw RuntimeError("plugin '" + path + "' was built for tao-quant plugin ABI " +
                       std::to_string(stamp->abi) + " (tao-quant " +
                       (stamp->version.empty() ? "?" : stamp->version) + "), but this tao-quant (" +
                       TQ_VERSION + ") has plugin ABI " + ours +
                       "; rebuild the plugin against this tao-quant");
  if (stamp->cxx11abi != our_cxx11_abi())
    throw RuntimeError(
        "plugin '" + path + "' was built with _GLIBCXX_USE_CXX11_ABI=" + stamp->cxx11abi +
        ", but tao-quant uses _GLIBCXX_USE_CXX11_ABI=" + our_cxx11_abi() +
        "; rebuild the plugin with the same setting (link it to TaoQuant::taoquant)");
  return *stamp;
}

// dlopen, with an exception from a static initializer turned into a refusal.
void* open_library(const std::string& abs, const std::string& path) {
  dlerror();  // clear
  void* handle = nullptr;
  try {
    handle = dlopen(abs.c_str(), RTLD_NOW | RTLD_LOCAL);
  } catch (const std::exception& e) {
    throw RuntimeError("plugin '" + path +
                       "' threw while loading (in a static initializer): " + e.what());
  } catch (...) {
    throw RuntimeError("plugin '" + path + "' threw a non-standard exception while loading");
  }
  if (!handle) {
    const char* err = dlerror();
    throw RuntimeError("cannot load plugin '" + path +
                       "': " + (err ? err : "unknown dlopen error"));
  }
  return handle;
}

}  // namespace

void load_plugin(const std::string& path) {
  const std::string abs = plugin_file(path);
  if (std::find(loaded().begin(), loaded().end(), abs) != loaded().end()) {
    spdlog::debug("plugin {} is already loaded", abs);
    return;
  }
  const std::string ours = std::to_string(TAOQUANT_PLUGIN_ABI_VERSION);
  const Stamp stamp = checked_stamp(abs, path);
  PendingRegistrations pending(abs);
  void* handle = open_library(abs, path);
  // From here on the library stays loaded even when it is refused: code it
  // registered elsewhere (e.g. LibTorch operators) may still be referenced.
  using AbiFn = int (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(handle, "taoquant_plugin_abi_version"));
  if (!abi)
    throw RuntimeError(
        "plugin '" + path +
        "' does not export taoquant_plugin_abi_version(); use TAOQUANT_PLUGIN() (plugin ABI " +
        ours + ")");
  if (abi() != TAOQUANT_PLUGIN_ABI_VERSION)
    throw RuntimeError("plugin '" + path + "' reports plugin ABI " + std::to_string(abi()) +
                       " from taoquant_plugin_abi_version() but its stamp says " +
                       std::to_string(stamp.abi) + "; this tao-quant has plugin ABI " + ours);
  pending.commit();  // throws on a duplicate name, naming both origins
  loaded().push_back(abs);
  spdlog::debug("loaded plugin {} ({})", abs, stamp.text);
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
      spdlog::warn(
          "TAO_QUANT_PLUGIN_PATH: '{}' is not a directory; ignored (use --plugin for a file)", dir);
      continue;
    }
    std::vector<std::string> libs;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".so") libs.push_back(e.path().string());
    if (ec) throw RuntimeError("TAO_QUANT_PLUGIN_PATH: cannot list '" + dir + "': " + ec.message());
    std::sort(libs.begin(), libs.end());
    if (libs.empty()) spdlog::debug("TAO_QUANT_PLUGIN_PATH: no *.so in '{}'", dir);
    for (const auto& l : libs) load_plugin(l);
  }
}

std::vector<std::string> loaded_plugins() {
  return loaded();
}

}  // namespace tq
