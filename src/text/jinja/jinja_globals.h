// The global functions a template can call by name: range, namespace, dict,
// raise_exception(message) (fails the render with kFailedPrecondition and the
// message verbatim) and strftime_now(format) (the render's clock, in UTC,
// formatted with the C locale's names). Immutable; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "text/jinja/jinja_value.h"

namespace kvtier::text::jinja {

// The global named `name`, or null.
const Value* find_global(const std::string& name);

// C strftime in the "C" locale at `unix_seconds` UTC: %a %A %b %B %d %e %H %I %j %m %M %p %S %y %Y %Z %z %F %T %D %%.
std::string format_utc_time(std::string_view format, int64_t unix_seconds);

}  // namespace kvtier::text::jinja
