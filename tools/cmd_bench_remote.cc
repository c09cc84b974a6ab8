// `kvtier bench remote --remote redis://HOST:PORT [--mib N] [--batch N] [--json]`:
// RemoteTier bandwidth against plain pipelined Redis GET/SET of the same
// values in the same run (logic: tiers/redis_bench.h).
#include <iostream>

#include "command.h"
#include "redis_bench.h"

namespace {

kvtier::cli::CommandRegistration reg("bench-remote", [](CLI::App& root, int& exit_code) {
  auto opts = std::make_shared<kvtier::RemoteBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto mib = std::make_shared<size_t>(64);
  CLI::App* cmd = kvtier::cli::bench_group(root).add_subcommand(
      "remote", "RemoteTier (Redis) write/read bandwidth vs raw pipelined GET/SET of the same values");
  cmd->add_option("--remote", opts->url, "redis://host:port[,host:port...] (tier URL options allowed)")->required();
  cmd->add_option("--mib", *mib, "MiB of chunk payload per figure")->capture_default_str();
  cmd->add_option("--batch", opts->batch_chunks, "Chunks per batched call (one pipeline)")->capture_default_str();
  cmd->add_option("--rounds", opts->rounds, "Rounds per figure (median reported)")->capture_default_str();
  cmd->add_option("--chunk-pages", opts->chunk_pages, "Pages per chunk")->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([opts, json, mib, &exit_code] {
    opts->total_bytes = *mib << 20;
    auto r = kvtier::run_remote_bench(*opts);
    if (!r.ok()) {
      exit_code = kvtier::cli::report(r.status());
      return;
    }
    std::cout << (*json ? r->to_json() + "\n" : r->to_table());
    exit_code = 0;
  });
});

}  // namespace
