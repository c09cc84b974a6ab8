// The flags of `kvtier serve` and how they combine with a config file.
//
// add_serve_flags() registers --config, --print-config and one flag per row
// of server_option_table() (each with its default in the help text);
// resolve_config() starts from the defaults, applies --config (TOML) and
// then every flag that was given, so flags win. Lives in the library (not
// tools/) so tests can reach it. Not thread-safe: used once at startup.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "common/option_flags.h"
#include "server/config.h"

namespace kvtier::server {

struct ServeFlags {
  std::optional<std::string> config_path;
  bool print_config = false;
  OptionFlags<ServerConfig> options;  // every row's flag, "not given" until CLI11 sets it
};

void add_serve_flags(CLI::App& app, ServeFlags& flags);

// defaults < --config file < flags. The result is validate()d.
Result<ServerConfig> resolve_config(const ServeFlags& flags);

}  // namespace kvtier::server
