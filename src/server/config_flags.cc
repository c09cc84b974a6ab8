#include "server/config_flags.h"

namespace kvtier::server {

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  app.add_option("--config", f.config_path, "TOML config file (docs/CONFIG.md); flags override it");
  app.add_flag("--print-config", f.print_config, "Print the effective configuration as TOML and exit");
  f.options.add(app, server_option_table());
}

Result<ServerConfig> resolve_config(const ServeFlags& f) {
  ServerConfig c;
  if (f.config_path) KVTIER_RETURN_IF_ERROR(apply_toml_file(*f.config_path, c));
  KVTIER_RETURN_IF_ERROR(f.options.apply(c));
  // A lower --max-tokens caps the default rather than failing on it.
  if (c.limits.default_max_tokens > c.limits.max_tokens) c.limits.default_max_tokens = c.limits.max_tokens;
  KVTIER_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace kvtier::server
