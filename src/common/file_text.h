// Reading a whole (small) text file: traces, profiles, config files.
// Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// The bytes of a regular file of at most `max_bytes`; NotFound "cannot open <what> '<path>'",
// InvalidArgument for anything else (a directory, a FIFO, a device) or a larger file, or IOError
// "reading <what> '<path>' failed".
inline constexpr uint64_t kMaxSmallFileBytes = 1 << 20;  // config, keys, secrets, profiles
Result<std::string> read_file(const std::string& path, std::string_view what, uint64_t max_bytes = kMaxSmallFileBytes);

}  // namespace kvtier
