// The `kvtier bench tiers` measurement: memory and storage bandwidths of the
// hierarchy, each with its limit measured in the same run on the same file
// system (memcpy for gathers, raw O_DIRECT io_uring I/O for DiskTier, an
// un-aggregated page-first loader for chunk aggregation), plus the
// layer-wise load latency of the TransferEngine in both load modes. Disk
// figures alternate in rounds so that drift of the device hits all alike;
// each is the median of its rounds, each disk ratio the median of per-round
// ratios. One driver thread, plus read_threads - 1 readers for the DiskTier
// read figure; uses files under `dir` and deletes them.
#pragma once

#include <string>

#include "kvtier/status.h"
#include "kvtier/types.h"
#include "memory/device_memory.h"
#include "tiers/disk_tier.h"

namespace kvtier {

struct TierBenchOptions {
  std::string dir;                           // where the files go (the file system under test)
  size_t disk_bytes = size_t(1) << 30;       // bytes written/read per disk figure
  size_t memory_bytes = size_t(256) << 20;   // bytes per memory figure
  size_t load_bytes = size_t(128) << 20;     // bytes of the layer-wise load
  uint32_t queue_depth = 32;
  KVGeometry geometry{.num_layers = 16, .num_kv_heads = 4, .head_dim = 64, .dtype = DType::kF16, .page_tokens = 16};
  uint32_t chunk_pages = 16;
  size_t region_bytes = size_t(64) << 20;
  uint32_t read_batch_chunks = 8;  // chunks per DiskTier::get_batch in disk_read_gbps
  // Threads calling DiskTier::get_batch at once in disk_read_gbps, as the
  // TransferEngine's workers (TransferEngineOptions::workers, default 2)
  // do; the DiskTier's queue depth is then queue_depth / read_threads, so
  // as many reads are in flight as in the raw figure.
  uint32_t read_threads = 2;
  uint32_t read_waves = DiskTierOptions{}.read_waves;  // DiskTierOptions::read_waves
  bool sync_writes = true;         // DiskTier::sync_writes; raw writes then sync at the same cadence
  // Where the pool lives. kCuda (a CUDA build with a GPU): memcpy_gbps is
  // one device → pinned host copy, host_gather_gbps gathers device pages
  // into pinned chunks, and the layer-wise loads land in device pages.
  MemoryBackend device = MemoryBackend::kCpu;

  Status validate() const;
};

struct TierBenchResult {
  double memcpy_gbps = 0, host_gather_gbps = 0;
  double raw_write_gbps = 0, raw_read_gbps = 0;
  double disk_write_gbps = 0, disk_read_gbps = 0;
  // The same pages stored page-first and loaded layer by layer without
  // aggregation: one read per (page, layer slice), at queue_depth / at 1.
  double per_page_read_gbps = 0, per_page_qd1_read_gbps = 0;
  // Each GB/s figure above is the median of its rounds; each ratio below is
  // the median of the rounds' own ratios (a figure over its limit or
  // baseline in the same round), so drift between rounds cancels.
  double disk_write_vs_raw = 0, disk_read_vs_raw = 0;
  double aggregated_vs_per_page = 0, aggregated_vs_per_page_qd1 = 0;
  double first_layer_ms = 0, all_layers_ms = 0;            // the engine's default load mode
  double first_layer_ms_whole = 0, all_layers_ms_whole = 0;  // LoadMode::kWholeChunk
  double first_layer_ms_layer = 0, all_layers_ms_layer = 0;  // LoadMode::kLayerMajor
  // Repetitions (of 3) in which layer 0 was in place while the rest of the
  // load was still in flight, by mode: what "first layer" is meant to show.
  uint32_t first_layer_early_whole = 0, first_layer_early_layer = 0;
  bool direct_io = false;
  bool pool_on_device = false;  // --device cuda: "memcpy" is a device → pinned host copy

  std::string to_json() const;   // one JSON object (figures + ratios)
  std::string to_table() const;  // human-readable
};

Result<TierBenchResult> run_tier_bench(const TierBenchOptions& options);

}  // namespace kvtier
