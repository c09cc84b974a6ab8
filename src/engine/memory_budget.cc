#include "engine/memory_budget.h"

#include "common/strings.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kvtier::engine {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The cgroup v2 directory of this process ("0::/path" in /proc/self/cgroup), or "" on v1 / none.
std::string own_cgroup_dir() {
  std::istringstream lines(read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

uint64_t mem_available() {
  std::istringstream lines(read_file("/proc/meminfo"));
  for (std::string line; std::getline(lines, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return uint64_t(kib) * 1024;
  }
  return uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
}

}  // namespace

uint64_t cgroup_room(std::string_view memory_max, std::string_view memory_current) {
  memory_max = trim(memory_max), memory_current = trim(memory_current);
  uint64_t max = 0, cur = 0;
  if (std::from_chars(memory_max.data(), memory_max.data() + memory_max.size(), max).ec != std::errc() ||
      std::from_chars(memory_current.data(), memory_current.data() + memory_current.size(), cur).ec != std::errc())
    return UINT64_MAX;  // "max", or nothing readable: no cap
  return max > cur ? max - cur : 0;
}

uint64_t available_memory_bytes() {
  uint64_t room = UINT64_MAX;
  const std::string dir = own_cgroup_dir();
  if (!dir.empty()) room = cgroup_room(read_file(dir + "/memory.max"), read_file(dir + "/memory.current"));
  return std::min(mem_available(), room);
}

std::string format_bytes(uint64_t bytes) {
  const bool gib = bytes >= (uint64_t(1) << 30);
  const uint64_t tenths = uint64_t((unsigned __int128)bytes * 10 / (uint64_t(1) << (gib ? 30 : 20)));  // no wrap
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + (gib ? " GiB" : " MiB");
}

Status check_fits(std::string_view what, std::span<const MemoryPart> parts, uint64_t limit) {
  const bool asked = limit != 0;
  if (!asked) limit = available_memory_bytes();
  uint64_t total = 0;
  std::string list;
  for (const MemoryPart& p : parts) {
    total = __builtin_add_overflow(total, p.bytes, &total) ? UINT64_MAX : total;  // parts near 2^64 wrapped to a fit
    list += (list.empty() ? "" : " + ") + p.name + " " + format_bytes(p.bytes);
  }
  if (total <= limit) return Status::Ok();
  return Status::NoSpace(std::string(what) + ": needs " + format_bytes(total) + " (" + list + "), more than the " +
                         format_bytes(limit) + (asked ? " allowed" : " of memory available (MemAvailable, cgroup room)"));
}

}  // namespace kvtier::engine
