// Reading a whole (small) text file: traces, profiles, config files.
// Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// The file's bytes; NotFound "cannot open <what> '<path>'" or IOError "reading <what> '<path>' failed".
Result<std::string> read_file(const std::string& path, std::string_view what);

}  // namespace kvtier
