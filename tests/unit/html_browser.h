// Headless Chromium for the HTML report tests: the rendered DOM, a
// screenshot, and the URLs the page requested (from Chromium's net log).
// Debian's `chromium` is installed by scripts/setup.sh; without it the
// browser checks are skipped with a message (browser_or_skip()).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace tqtest {

inline std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string shell_output(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

struct BrowserRun {
  std::string dom;  // --dump-dom output
  // URLs the page itself asked for (net log requests with an initiator;
  // Chromium's own background requests have none).
  std::set<std::string> page_requests;
};

// Loads `html` (an absolute path) with the network blocked twice over (a
// proxy on a closed port, every host name unresolvable) and a net log.
inline BrowserRun browse(const std::string& html, const std::string& scratch,
                         const std::string& extra = "") {
  namespace fs = std::filesystem;
  fs::create_directories(scratch);
  const std::string netlog = scratch + "/netlog.json";
  const std::string cmd =
      chromium_path() + " --headless --no-sandbox --disable-gpu --no-first-run " +
      "--disable-extensions --disable-background-networking --disable-component-update " +
      "--disable-sync --no-default-browser-check --user-data-dir='" + scratch + "/profile' " +
      "--proxy-server=127.0.0.1:9 --host-resolver-rules='MAP * ~NOTFOUND' " + "--log-net-log='" +
      netlog + "' " + extra + " 'file://" + html + "' 2>/dev/null";
  BrowserRun r;
  r.dom = shell_output(cmd);
  const std::string log = read_text(netlog);
  static const std::regex req_re(R"re("initiator":"([^"]*)"[^\n]*?"url":"([^"]*)")re");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), req_re); it != std::sregex_iterator();
       ++it)
    if ((*it)[1].str() != "not an origin") r.page_requests.insert((*it)[2].str());
  return r;
}

inline BrowserRun dump_dom(const std::string& html, const std::string& scratch) {
  return browse(html, scratch, "--dump-dom");
}

// Writes a PNG screenshot of the page at the given window size.
inline void screenshot(const std::string& html, const std::string& png, int width, int height,
                       const std::string& scratch) {
  browse(html, scratch,
         "--hide-scrollbars --force-device-scale-factor=1 --virtual-time-budget=3000 "
         "--window-size=" +
             std::to_string(width) + "," + std::to_string(height) + " --screenshot='" + png + "'");
}

// src=, href= or url( that point off the file (http:, https:, //host).
inline size_t external_references(const std::string& html) {
  static const std::regex ext(
      R"((src|href)\s*=\s*["']?\s*(https?:|//)|url\(\s*["']?(https?:|//)|@import)",
      std::regex::icase);
  return static_cast<size_t>(
      std::distance(std::sregex_iterator(html.begin(), html.end(), ext), std::sregex_iterator()));
}

inline size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace tqtest
