// Option values as operators write them, one parser per kind: every flag,
// TOML key, Python keyword and replay flag of the option tables
// (common/option_table.h) goes through these, so a size or a duration means
// the same wherever it is given.
//
// Byte sizes: "4096", "64KiB", "512MiB", "8GiB", "1.5GiB". Binary suffixes
// (KiB, MiB, GiB, TiB and the bare K, M, G, T) are powers of 1024; decimal
// ones (KB, MB, GB, TB) are powers of 1000; "B" or no suffix is bytes.
// Suffixes are case-insensitive and may follow a space. A token count is not
// a size: the replay's token capacities have their own kind (sim/replay.h).
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// Fails with InvalidArgument on empty, negative, malformed or overflowing input.
Result<uint64_t> parse_size(std::string_view text);

// The largest exact binary unit: 536870912 -> "512MiB", 1000 -> "1000B".
std::string format_size(uint64_t bytes);

// true | false, and 1/0, yes/no, on/off (case-insensitive).
Result<bool> parse_bool(std::string_view text);
// A decimal integer in [lo, hi].
Result<uint64_t> parse_uint(std::string_view text, uint64_t lo, uint64_t hi);
// A finite decimal number in [lo, hi].
Result<double> parse_number(std::string_view text, double lo, double hi);
// Seconds: "600", "1.5s", "250ms", "10m", "2h"; never negative.
Result<double> parse_duration(std::string_view text);
// The longest duration an option takes (about 31 years): a deadline past ~9.2e9 s overflows
// nanoseconds.
inline constexpr double kMaxDurationSeconds = 1e9;
// The shortest text that parses back to the same double ("600", "0.05").
std::string format_number(double v);

}  // namespace kvtier
