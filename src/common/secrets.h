// Secrets kept out of sight: reading a secret from a file (tier secret,
// Redis password) and hiding the password of a URL before it is printed,
// logged or put in an error message. Stateless and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// The file's bytes less one trailing newline (LF or CR LF). kInvalidArgument
// when it cannot be read or holds fewer than `min_bytes`; messages name
// `what` and the path, never the contents.
Result<std::string> read_secret_file(const std::string& path, std::string_view what, size_t min_bytes);

// Where named secrets come from besides files: the program's edge (the
// kvtier executable, the Python module) installs a lookup at start-up,
// usually the process environment; the library itself never reads it.
// Without one, only files give secrets. Install before any other thread runs.
using SecretLookup = const char* (*)(const char* name);
void set_secret_lookup(SecretLookup lookup);

// The secret in `file` when one is named (read_secret_file), else the value
// of the environment variable `env` when it is set and not empty (at least
// `min_bytes`), else nullopt. Messages name the file or the variable only.
Result<std::optional<std::string>> read_secret(const std::string& file, const char* env, std::string_view what,
                                               size_t min_bytes);
// A file of secrets must not be readable by every user: mode o+r is an
// error that gives the reason and the chmod that fixes it.
Status require_private_file(const std::string& path, std::string_view what);

// Whether `file` is named or `env` is set (by the installed lookup) and not empty.
bool secret_given(const std::string& file, const char* env);

// `scheme://user:password@host...` → `scheme://user:<redacted>@host...`
// (and `scheme://password@host` → `scheme://<redacted>@host`); any other
// string comes back unchanged.
std::string redact_url_credentials(std::string_view url);

}  // namespace kvtier
