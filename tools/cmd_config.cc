// `kvtier config`: the option tables as TOML defaults or as docs/CONFIG.md.
#include <cstdio>

#include "command.h"
#include "router/router.h"
#include "server/config.h"

namespace {

const kvtier::cli::CommandRegistration kConfig("config", [](CLI::App& root, int& exit_code) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* cmd = root.add_subcommand("config", "Print every option's default as TOML, or with --markdown docs/CONFIG.md");
  cmd->add_flag("--markdown", *markdown, "Print docs/CONFIG.md (the option tables as Markdown)");
  cmd->callback([markdown, &exit_code] {
    const std::string text = *markdown ? kvtier::server::config_markdown() + kvtier::router::route_config_markdown() : kvtier::server::to_toml({});
    std::fputs(text.c_str(), stdout);
    exit_code = 0;
  });
});

}  // namespace
