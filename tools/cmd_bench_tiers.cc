// `kvtier bench tiers [--dir DIR] [--json]`: bandwidths of the memory
// hierarchy against limits measured in the same run (logic: transfer/tier_bench.h).
#include <iostream>

#include "command.h"
#include "transfer/tier_bench.h"

namespace {

kvtier::cli::CommandRegistration reg("bench-tiers", [](CLI::App& root, int& exit_code) {
  auto opts = std::make_shared<kvtier::TierBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto disk_mib = std::make_shared<size_t>(1024);
  opts->dir = "/tmp";
  CLI::App* cmd = kvtier::cli::bench_group(root).add_subcommand("tiers", "Bandwidth of host gather, raw and DiskTier I/O, layer-wise loads");
  cmd->add_option("--dir", opts->dir, "Directory on the file system to measure")->capture_default_str();
  cmd->add_option("--disk-mib", *disk_mib, "MiB written and read per disk figure")->capture_default_str();
  cmd->add_option("--queue-depth", opts->queue_depth, "io_uring queue depth")->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([opts, json, disk_mib, &exit_code] {
    opts->disk_bytes = *disk_mib << 20;
    auto r = kvtier::run_tier_bench(*opts);
    if (!r.ok()) {
      exit_code = kvtier::cli::report(r.status());
      return;
    }
    std::cout << (*json ? r->to_json() + "\n" : r->to_table());
    exit_code = 0;
  });
});

}  // namespace
