#include "common/option_values.h"

#include "common/strings.h"
#include "common/option_table.h"

#include <cstdio>

#include <cctype>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <string>

namespace kvtier {
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

// A whole decimal number (optional sign, fraction, exponent) and nothing else.
Result<double> parse_double(std::string_view text) {
  const std::string s(trim(text));
  if (s.empty()) return Status::InvalidArgument("empty number");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v) || s.find_first_of("xXpP") != std::string::npos)
    return Status::InvalidArgument(kvtier::quoted(text) + " is not a number");
  return v;
}

}  // namespace

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string markdown_code(std::string_view text) {
  if (text.empty()) return "";
  std::string out("`");  // by appends (GCC 12 misreports "`" + std::string under -Wrestrict)
  out += markdown_cell(text);
  out += "`";
  return out;
}

std::string_view option_kind_name(OptionKind kind) {
  switch (kind) {
    case OptionKind::kString: return "text";
    case OptionKind::kBool: return "bool";
    case OptionKind::kUint: return "integer";
    case OptionKind::kNumber: return "number";
    case OptionKind::kSize: return "size";
    case OptionKind::kDuration: return "duration";
    case OptionKind::kEnum: return "choice";
  }
  return "?";
}

Result<bool> parse_bool(std::string_view text) {
  const std::string s = lower(trim(text));
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  return Status::InvalidArgument(kvtier::quoted(text) + " is not true or false");
}

Result<uint64_t> parse_uint(std::string_view text, uint64_t lo, uint64_t hi) {
  const std::string_view s = trim(text);
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size())
    return Status::InvalidArgument(kvtier::quoted(text) + " is not a whole number");
  if (v < lo || v > hi)
    return Status::InvalidArgument(std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

Result<double> parse_number(std::string_view text, double lo, double hi) {
  KVTIER_ASSIGN_OR_RETURN(const double v, parse_double(text));
  if (v < lo || v > hi)
    return Status::InvalidArgument(format_number(v) + " is out of range [" + format_number(lo) + ", " + format_number(hi) + "]");
  return v;
}

Result<double> parse_duration(std::string_view text) {
  std::string_view s = trim(text);
  double unit = 1;
  for (auto [suffix, seconds] : {std::pair{"ms", 1e-3}, std::pair{"s", 1.0}, std::pair{"m", 60.0}, std::pair{"h", 3600.0}}) {
    const std::string_view suf(suffix);
    if (s.size() > suf.size() && s.substr(s.size() - suf.size()) == suf) {
      s.remove_suffix(suf.size());
      unit = seconds;
      break;
    }
  }
  auto v = parse_double(s);
  if (!v.ok() || *v < 0)
    return Status::InvalidArgument("duration " + kvtier::quoted(text) + " is not a non-negative number of seconds (600, 1.5s, 250ms, 10m, 2h)");
  // Past ~9.2e9 s a deadline in nanoseconds overflows (1e10 s made every request time out at once).
  if (!(*v * unit <= kMaxDurationSeconds))
    return Status::InvalidArgument("duration " + kvtier::quoted(text) + " is over " + format_number(kMaxDurationSeconds) +
                                   " seconds");
  return *v * unit;
}

std::string format_number(double v) {
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

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
  // strtold, not stold: a number past long double's range (5,000 digits) threw out_of_range, and a
  // SIGHUP reload of a keys file with such a quota aborted the server.
  errno = 0;
  const long double parsed = std::strtold(number.c_str(), nullptr);
  if (errno == ERANGE) return Status::InvalidArgument("size '" + original + "' is out of range");
  const long double v = parsed * static_cast<long double>(mult);
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

}  // namespace kvtier
