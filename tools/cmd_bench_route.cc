// `kvtier bench route`: the router's decision cost at many cached conversations (bench/route_bench.h).
#include "command.h"
#include "route_bench.h"

namespace kvtier::cli {
namespace {

const CommandRegistration kBenchRoute("bench route", [](CLI::App& root, int& exit_code) {
  auto o = std::make_shared<RouteBenchOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = bench_group(root).add_subcommand("route", "The router's decision cost per request at many cached "
                                                            "conversations: hash, match on every backend, choose");
  cmd->add_option("--backends", o->backends, "Backends")->capture_default_str();
  cmd->add_option("--conversations", o->conversations, "Cached conversations, spread over the backends")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Each conversation's cached prefix")->capture_default_str();
  cmd->add_option("--requests", o->requests, "Timed requests")->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([o, json, &exit_code] { exit_code = print_result(run_route_bench(*o), *json); });
});

}  // namespace
}  // namespace kvtier::cli
