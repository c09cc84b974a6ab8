// `kvtier serve`: flags and config file -> ServerConfig -> run_server().
#include <cstdio>

#include "command.h"
#include "server/config_flags.h"
#include "server/serve_run.h"

namespace {

const kvtier::cli::CommandRegistration kServe("serve", [](CLI::App& root, int& exit_code) {
  auto flags = std::make_shared<kvtier::server::ServeFlags>();
  CLI::App* cmd = root.add_subcommand(
      "serve",
      "OpenAI-compatible server with the tiered KV cache (/v1/completions, /v1/chat/completions, /v1/models, "
      "/health, /metrics, /dashboard and /v1/cache/...; every route in docs/SERVER.md). SIGINT/SIGTERM drain and exit 0.");
  kvtier::server::add_serve_flags(*cmd, *flags);
  cmd->callback([flags, &exit_code] {
    auto config = kvtier::server::resolve_config(*flags);
    if (!config.ok()) {
      exit_code = kvtier::cli::report(config.status());
      return;
    }
    if (flags->print_config) {
      std::fputs(kvtier::server::to_toml(*config).c_str(), stdout);
      return;
    }
    exit_code = kvtier::cli::report(kvtier::server::run_server(*config, stdout));
  });
});

}  // namespace
