// Headless Chromium for the browser tests: find the browser, dump a page's
// DOM after a virtual-time budget (timers run as fast as the page allows;
// network fetches still complete first), take a screenshot, and read
// attributes back from the dumped DOM. Tests skip when no browser is
// installed (`make deps` installs Debian's chromium).
#pragma once

#include <unistd.h>

#include <array>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::testing {

// The first Chromium found on the usual paths; empty when none.
inline std::string find_chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (::access(path, X_OK) == 0) return path;
  return {};
}

struct Chromium {
  std::string binary;
  std::string profile_dir;           // a fresh --user-data-dir per test
  int virtual_time_ms = 15000;       // generous: the page polls every 2 s of virtual time
  int window_width = 1400, window_height = 900;

  // The page's DOM once its virtual-time budget ran out; nullopt when the browser failed to start.
  std::optional<std::string> dump_dom(const std::string& url) const { return run("--dump-dom", url); }
  // Writes a PNG to `png`; false when the browser failed.
  bool screenshot(const std::string& url, const std::string& png) const {
    return run("--screenshot=" + png, url).has_value() && ::access(png.c_str(), R_OK) == 0;
  }

 private:
  std::optional<std::string> run(const std::string& action, const std::string& url) const {
    // As root Chromium needs --no-sandbox; `timeout` only guards against a hung browser.
    const std::string cmd = "timeout 120 '" + binary + "' --headless --no-sandbox --disable-gpu --no-first-run " +
                            "--disable-extensions --user-data-dir='" + profile_dir + "' --window-size=" +
                            std::to_string(window_width) + "," + std::to_string(window_height) +
                            " --virtual-time-budget=" + std::to_string(virtual_time_ms) + " " + action + " '" + url +
                            "' 2>/dev/null";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return std::nullopt;
    std::string out;
    std::array<char, 65536> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
    const int rc = ::pclose(pipe);
    if (rc != 0) return std::nullopt;
    return out;
  }
};

// The opening tag of the first element whose tag contains `marker` (e.g. `id="tree"`); empty when none.
inline std::string tag_with(const std::string& dom, const std::string& marker) {
  const size_t at = dom.find(marker);
  if (at == std::string::npos) return {};
  const size_t open = dom.rfind('<', at), close = dom.find('>', at);
  return open == std::string::npos || close == std::string::npos ? std::string() : dom.substr(open, close - open + 1);
}

// The value of attribute `name` in `tag`; nullopt when absent.
inline std::optional<std::string> attribute(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = at + key.size(), end = tag.find('"', begin);
  return end == std::string::npos ? std::nullopt : std::optional<std::string>(tag.substr(begin, end - begin));
}

// Every opening tag of `dom` that contains `marker`.
inline std::vector<std::string> tags_with(const std::string& dom, const std::string& marker) {
  std::vector<std::string> out;
  for (size_t at = dom.find(marker); at != std::string::npos; at = dom.find(marker, at + 1)) {
    const size_t open = dom.rfind('<', at), close = dom.find('>', at);
    if (open != std::string::npos && close != std::string::npos) out.push_back(dom.substr(open, close - open + 1));
  }
  return out;
}

}  // namespace kvtier::testing
