// Small text helpers shared across modules. Pure functions.
#pragma once

#include <string>
#include <string_view>

namespace kvtier {

// `s` without leading and trailing whitespace (isspace).
std::string_view trim(std::string_view s);
// 'text', built by appends (GCC 12 misreports "'" + std::string(...) under -Wrestrict).
std::string quoted(std::string_view text);

}  // namespace kvtier
