// The trace replay simulator behind `kvtier replay`: capacity planning
// without a model. Every request of a trace goes through the real KVCache —
// its PrefixIndex, eviction policies, write policies, chunk rules and tier
// reclaim — made payload-less (sim/replay_cache.h: pages of a few bytes,
// disk and remote tiers that keep only keys, transfers that finish at once):
// lookup across the tiers (the last prompt token is never cached), the
// planner's load-or-recompute decision on the timing model, apply and commit
// with the write policy. Requests arrive at their timestamps and prefill
// queues on a number of workers, so time to first token is reported with the
// cache and without it.
//
// Single-threaded and deterministic: the same trace and options always give
// the same report (apart from elapsed_s). The caller owns the trace.
// Simplifications (docs/REPLAY.md): the cache sees requests in arrival
// order, one at a time, and a request's pages are cached when it is admitted.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/kv_cache.h"
#include "index/eviction_policy.h"
#include "sim/kvtier_trace.h"
#include "sim/timing_model.h"

namespace kvtier {

// A tier capacity as operators write it: tokens ("3e6", "3000000",
// "3000000tok") or bytes with a unit ("80GiB", "1.5TB", "512MB", "4096B"),
// or "unlimited". Bytes become pages through the model's KV geometry.
// Disk and remote reclaim order: fifo | lru.
Result<EvictionOrder> parse_chunk_reclaim(std::string_view name);
std::string_view chunk_reclaim_name(EvictionOrder r);

struct Capacity {
  uint64_t value = 0;
  bool bytes = false;
  bool unlimited = false;

  static Capacity tokens(uint64_t n) { return Capacity{n, false, false}; }
  static Capacity of_bytes(uint64_t n) { return Capacity{n, true, false}; }
  static Capacity infinite() { return Capacity{0, false, true}; }
  bool zero() const { return !unlimited && value == 0; }
  std::string to_string() const;
};
Result<Capacity> parse_capacity(std::string_view text);

// The cache's policies and codecs are the server's own (the CacheConfig
// base: chunk_pages, write_policy, selective_hits, eviction, hash,
// layerwise, disk_region_bytes, the codecs; the rows of its option table
// marked for the replay are `kvtier replay`'s flags). Its places and byte
// capacities are not read: the replay's tiers are Capacities (tokens or
// bytes), below. Codecs: a tier's byte capacity holds as many encoded pages
// (host) or entries (disk, remote) as fit, and its link moves the encoded
// bytes; a capacity given in tokens is the raw KV bytes of that many tokens.
// The disk tier is a segment log of disk_region_bytes regions: it holds as
// many chunk entries as fit in whole regions and reclaims a region at a time.
struct ReplayOptions : CacheConfig {
  // Tiers. Device must be non-zero; a zero host, disk or remote capacity
  // means the tier is absent. Disk and remote may not be unlimited.
  Capacity device = Capacity::infinite();
  Capacity host, disk, remote;
  EvictionOrder disk_reclaim = EvictionOrder::kFifo;  // a segment log reclaims its oldest region
  EvictionOrder remote_reclaim = EvictionOrder::kLru;
  // Timing: the rate at which a loading worker decodes (raw bytes out per
  // second). A fixed figure, so that a replay stays deterministic; the
  // default is the floor docs/PERF.md measures for one core.
  double codec_decode_bytes_per_s = 4e9;

  // Timing. model.geometry.page_tokens is the cache's page size.
  ReplayModel model;
  CostProfile profile;
  bool timing = true;         // off: hit ratios only (no planner, no queue)
  uint32_t workers = 1;       // prefill workers
  double time_scale = 1.0;    // arrival gaps are multiplied by this (0.5 = twice the load)
  uint32_t plan_units = 64;   // the planner sees at most this many units of cached pages (see REPLAY.md)
  bool max_pass = true;       // also replay an unlimited cache for max_token_hit_ratio

  Status validate() const;
  uint32_t page_tokens() const { return model.geometry.page_tokens; }
};

// The default options: Llama-3-8B (bf16 KV, 16-token pages) on h100-pcie5,
// one unlimited device tier.
ReplayOptions default_replay_options();

struct ReplayReport {
  uint64_t requests = 0;
  uint64_t tokens = 0;       // prompt tokens
  uint64_t hit_tokens = 0;   // prompt tokens found cached in any tier
  std::array<uint64_t, kNumTiers> hit_tokens_by_tier{};
  double token_hit_ratio = 0;
  std::array<double, kNumTiers> hit_ratio_by_tier{};
  double max_token_hit_ratio = -1;  // unlimited cache; -1 when not computed
  // Planner outcome (timing on): cached tokens used (in place or loaded)
  // and cached tokens recomputed anyway; prefill compute seconds with and
  // without the cache.
  uint64_t reused_tokens = 0;
  uint64_t recomputed_cached_tokens = 0;
  double compute_s_cached = 0, compute_s_uncached = 0;
  double prefill_compute_saved = 0;  // 1 - compute_s_cached / compute_s_uncached
  LatencySummary ttft_cached_s, ttft_uncached_s;
  // Bytes per link: loads into the device from each tier, stores from the
  // device into each tier (host copies, disk and remote chunk writes).
  std::array<uint64_t, kNumTiers> bytes_loaded{};
  std::array<uint64_t, kNumTiers> bytes_stored{};
  // Device and host: pages evicted; disk and remote: chunks reclaimed.
  std::array<uint64_t, kNumTiers> evictions{};
  // The trace's hints (retain_s, prefetch_at): hints taken, expired and
  // yielded (past max_retained_share), and pages read ahead into the host.
  uint64_t retain_hints = 0, retain_expiries = 0, retain_yields = 0, prefetched_pages = 0;
  std::array<uint64_t, kNumTiers> capacity_pages{};  // resolved capacities (0 = absent, UINT64_MAX = unlimited)
  uint64_t skipped_lines = 0;
  // Requests whose prompt needs more pages than the device tier has: the
  // cache refuses them (KVCache::apply is Busy), so they use no cache and
  // cache nothing; they are priced as full recomputes.
  uint64_t refused_requests = 0;
  bool compressed = false;  // replayed one index token per page (exact; see REPLAY.md)
  double elapsed_s = 0;
  double requests_per_s = 0;
  ReplayOptions options;
};

Result<ReplayReport> run_replay(const ReplayOptions& options, const ReplayTrace& trace);

// One replay per capacity of a single device tier (other tiers as in
// `options`); the unlimited pass runs once and is shared.
struct SweepPoint {
  uint64_t capacity_tokens = 0;
  ReplayReport report;
};
Result<std::vector<SweepPoint>> run_capacity_sweep(const ReplayOptions& options, const ReplayTrace& trace,
                                                   const std::vector<uint64_t>& capacities_tokens);
// "1e5,3e5,1e6" -> token counts (each >= 1).
Result<std::vector<uint64_t>> parse_capacity_list(std::string_view text);

// Output: a table, one JSON object, and the sweep's CSV and SVG plot.
std::string format_replay_table(const ReplayReport& r);
std::string format_replay_json(const ReplayReport& r);
std::string format_sweep_csv(const std::vector<SweepPoint>& points);
std::string format_sweep_svg(const std::vector<SweepPoint>& points, const std::string& title);

}  // namespace kvtier
