// How much memory a process may still take, and the check a loader runs
// before allocating: the sum of named parts against the smaller of
// MemAvailable and the cgroup's room (memory.max - memory.current).
// Stateless; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::engine {

// One thing that will be allocated: "weights", "KV pool", "host tier", ...
struct MemoryPart {
  std::string name;
  uint64_t bytes = 0;
};

// The memory a new allocation may take now: MemAvailable of /proc/meminfo,
// capped by the cgroup v2 room of this process (memory.max - memory.current;
// the literal "max" means no cap); physical memory when neither can be read.
uint64_t available_memory_bytes();
// Parses a cgroup v2 memory.max / memory.current pair (their file contents):
// the room left, or UINT64_MAX for "max" or text that is not a number.
uint64_t cgroup_room(std::string_view memory_max, std::string_view memory_current);

// Ok when the parts together fit in `limit` (0: available_memory_bytes());
// otherwise NoSpace naming `what`, each part and its size, and the limit.
Status check_fits(std::string_view what, std::span<const MemoryPart> parts, uint64_t limit = 0);

// "12.3 GiB" (rounded down to a tenth) or "512.0 MiB" below 1 GiB.
std::string format_bytes(uint64_t bytes);

}  // namespace kvtier::engine
