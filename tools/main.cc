// kvtier: the command-line front end. Only flag parsing lives here; every
// subcommand calls into the libraries (see tools/command.h).
#include <cstdlib>

#include "common/secrets.h"
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "command.h"

int main(int argc, char** argv) {
  kvtier::set_secret_lookup([](const char* name) -> const char* { return std::getenv(name); });  // KVTIER_API_KEY, KVTIER_TIER_SECRET, ...
  CLI::App app{"kvtier: a tiered KV-cache engine for LLM inference"};
  app.set_version_flag("--version", std::string("kvtier ") + KVTIER_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  for (auto& [name, setup] : kvtier::cli::registered_commands()) setup(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {  // a backstop: commands answer with a Status, not a throw
    std::fprintf(stderr, "kvtier: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
