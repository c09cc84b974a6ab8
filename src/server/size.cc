#include "server/size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace kvtier::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<uint64_t> unit_multiplier(std::string_view suffix) {
  const std::string s = lower(suffix);
  if (s.empty() || s == "b") return uint64_t(1);
  static constexpr struct { const char* name; uint64_t mult; } kUnits[] = {
      {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
      {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000ull * 1000},
      {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000ull * 1000 * 1000},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const auto& u : kUnits)
    if (s == u.name) return u.mult;
  return Status::InvalidArgument("unknown size unit '" + std::string(suffix) +
                                 "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  const std::string original(text);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return Status::InvalidArgument("empty size");
  size_t i = 0;
  bool seen_digit = false, seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || (text[i] == '.' && !seen_dot))) {
    if (text[i] == '.') seen_dot = true; else seen_digit = true;
    ++i;
  }
  if (!seen_digit) return Status::InvalidArgument("size '" + original + "' does not start with a number");
  const std::string number(text.substr(0, i));
  std::string_view suffix = text.substr(i);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  KVTIER_ASSIGN_OR_RETURN(const uint64_t mult, unit_multiplier(suffix));
  if (!seen_dot) {
    unsigned long long v = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (ec != std::errc() || ptr != number.data() + number.size())
      return Status::InvalidArgument("size '" + original + "' overflows 64 bits");
    if (v != 0 && mult > UINT64_MAX / v) return Status::InvalidArgument("size '" + original + "' overflows 64 bits");
    return uint64_t(v) * mult;
  }
  const long double v = std::stold(number) * static_cast<long double>(mult);
  if (!std::isfinite(v) || v >= 18446744073709551615.0L)
    return Status::InvalidArgument("size '" + original + "' overflows 64 bits");
  const long double rounded = std::floor(v);
  if (rounded != v) return Status::InvalidArgument("size '" + original + "' is not a whole number of bytes");
  return static_cast<uint64_t>(rounded);
}

std::string format_size(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  uint64_t v = bytes;
  while (unit < 4 && v != 0 && v % 1024 == 0) {
    v /= 1024;
    ++unit;
  }
  return std::to_string(v) + kNames[unit];
}

}  // namespace kvtier::server
