// Byte sizes as operators write them: "512MiB", "8GiB", "1.5GB", "4096".
//
// Binary suffixes (KiB, MiB, GiB, TiB and the bare K, M, G, T) are powers of
// 1024; decimal ones (KB, MB, GB, TB) are powers of 1000; "B" or no suffix is
// bytes. Suffixes are case-insensitive and may follow a space. Pure functions,
// safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::server {

// Fails with InvalidArgument on empty, negative, malformed or overflowing input.
Result<uint64_t> parse_size(std::string_view text);

// The largest exact binary unit: 536870912 -> "512MiB", 1000 -> "1000B".
std::string format_size(uint64_t bytes);

}  // namespace kvtier::server
