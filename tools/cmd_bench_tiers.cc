// `kvtier bench tiers [--dir DIR] [--json]`: bandwidths of the memory
// hierarchy against limits measured in the same run (logic: transfer/tier_bench.h).
#include <iostream>

#include "command.h"
#include "redis_bench.h"
#include "tier_bench.h"

namespace {

kvtier::cli::CommandRegistration reg("bench-tiers", [](CLI::App& root, int& exit_code) {
  auto opts = std::make_shared<kvtier::TierBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto disk_mib = std::make_shared<size_t>(1024);
  opts->dir = "/tmp";
  CLI::App* cmd = kvtier::cli::bench_group(root).add_subcommand("tiers",
      "Bandwidth of host gather, raw and DiskTier I/O, and layer-wise loads. Disk figures alternate in 4 rounds on the same "
      "file system: raw = sequential 1 MiB O_DIRECT blocks (fdatasync per region like DiskTier); per_page = the same "
      "pages stored page-first and loaded layer by layer, one read per (page, layer slice), same queue depth");
  cmd->add_option("--dir", opts->dir, "Directory on the file system to measure")->capture_default_str();
  cmd->add_option("--disk-mib", *disk_mib, "MiB written and read per disk figure")->capture_default_str();
  cmd->add_option("--queue-depth", opts->queue_depth, "io_uring queue depth")->capture_default_str();
  cmd->add_option("--read-batch", opts->read_batch_chunks, "Chunks per DiskTier::get_batch")->capture_default_str();
  cmd->add_option("--read-threads", opts->read_threads,
                  "Threads calling DiskTier::get_batch at once (as the TransferEngine's workers), sharing --queue-depth")
      ->capture_default_str();
  cmd->add_option("--read-waves", opts->read_waves, "Waves a DiskTier::get_batch issues its reads in (DiskTierOptions::read_waves; 1: all at once)")
      ->capture_default_str();
  auto no_sync = std::make_shared<bool>(false);
  cmd->add_flag("--no-sync", *no_sync, "DiskTier without fdatasync per region; raw writes then never sync either");
  auto remote = std::make_shared<std::string>();
  cmd->add_option("--remote", *remote, "Also measure a RemoteTier: redis://host:port (see `kvtier bench remote`)");
  auto device = std::make_shared<std::string>("cpu");
  cmd->add_option("--device", *device, "Where the pool lives: cpu, or cuda (CUDA build with a GPU; copies then cross PCIe)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([opts, json, disk_mib, remote, no_sync, device, &exit_code] {
    opts->device = *device == "cuda" ? kvtier::MemoryBackend::kCuda : kvtier::MemoryBackend::kCpu;
    opts->disk_bytes = *disk_mib << 20;
    opts->sync_writes = !*no_sync;
    auto r = kvtier::run_tier_bench(*opts);
    if (!r.ok()) {
      exit_code = kvtier::cli::report(r.status());
      return;
    }
    std::string out = *json ? r->to_json() : r->to_table();
    if (!remote->empty()) {  // remote figures join the same table / JSON object
      kvtier::RemoteBenchOptions ro;
      ro.url = *remote;
      auto rr = kvtier::run_remote_bench(ro);
      if (!rr.ok()) {
        exit_code = kvtier::cli::report(rr.status());
        return;
      }
      out = *json ? out.substr(0, out.rfind('}')) + "," + rr->to_json().substr(1) : out + rr->to_table();
    }
    std::cout << out << (*json ? "\n" : "");
    exit_code = 0;
  });
});

}  // namespace
