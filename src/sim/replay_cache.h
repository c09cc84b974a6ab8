// ReplayCache: the real KVCache, payload-less, as the replay simulator drives
// it (internal to src/sim). Every policy the replay reports on — lookup's
// chunk rules, commit, the write policies, device and host eviction,
// demotion and spill, disk and remote reclaim — is the cache's own code; this
// file only builds the cache and feeds it one request at a time.
//
// What makes it payload-less, without a flag in the data path:
//  * pages are a few bytes: a one-layer, one-head, head_dim-1 geometry with
//    `unit` index tokens per page, so the BlockPool and HostTier are the real
//    ones, with real capacity in pages, holding no KV;
//  * disk and remote are MetadataTiers (tiers/metadata_tier.h): keys only,
//    sized like the modelled DiskTier (regions of the model's chunk entries,
//    DiskTier's reclaim rule) and remote store (one chunk at a time);
//  * transfers run inline (TransferEngineOptions::workers = 0), so every move
//    has landed when the call that made it returns: deterministic.
// Each request is lookup → apply(a plan that uses every cached page) →
// commit of its whole pages, as the server does; the replay prices the
// planner's own choice on its timing model (the plan applied only changes
// which pages a running request borrows).
// Not thread-safe.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "cache/kv_cache.h"

namespace kvtier::sim_detail {

struct ReplayCacheOptions {
  uint32_t unit = 16;                 // index tokens per page
  uint32_t chunk_pages = 16;
  uint64_t device_pages = 2;          // the pool (>= 2)
  uint64_t host_pages = 0;            // 0 = no host tier
  uint32_t disk_regions = 0;          // 0 = no disk tier
  uint32_t disk_chunks_per_region = 1;
  uint32_t remote_chunks = 0;         // 0 = no remote tier
  EvictionOrder disk_reclaim = EvictionOrder::kFifo, remote_reclaim = EvictionOrder::kLru;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  uint32_t selective_hits = 2;
  EvictionPolicyKind eviction = EvictionPolicyKind::kLru;
  HashAlgo hash = HashAlgo::kXXH3_128;
  double max_retained_share = 0.5;    // CacheConfig::max_retained_share
  const Clock* clock = &Clock::system();  // the cache's and the disk's (ReplayCache gives its trace clock)
};

// What the cache did with one request.
struct ReplayStep {
  bool served = true;  // false: the prompt needs more pages than the device has (the server refuses it)
  std::array<uint32_t, kNumTiers> pages_by_tier{};  // cached pages found, by tier (0 when not served)
  std::vector<CachedRun> runs;
  uint32_t cached_pages() const { return pages_by_tier[0] + pages_by_tier[1] + pages_by_tier[2] + pages_by_tier[3]; }
};

struct ReplayCacheStats {
  std::array<uint64_t, kNumTiers> stored_pages{};  // copies into each tier (host pages; disk/remote chunk pages)
  std::array<uint64_t, kNumTiers> evictions{};     // pages (device, host) or chunks (disk, remote)
  uint64_t retain_hints = 0, retain_expiries = 0, retain_yields = 0;  // KVCacheStats' retention counters
  uint64_t prefetched_pages = 0;
};

class ReplayCache {
 public:
  static Result<std::unique_ptr<ReplayCache>> create(const ReplayCacheOptions& options);

  // `prompt`: the request's index tokens — its `whole_pages` whole pages,
  // then (unit 1) one token standing for a partial last page, or (unit P)
  // the partial page's tokens. Not empty. The whole pages are committed.
  Status request(const Namespace& ns, std::span<const TokenId> prompt, uint32_t whole_pages, ReplayStep& out);
  // The trace's time, in ms (never goes back): retention hints expire by it.
  void set_time_ms(double ms);
  // The hints of a request (kvtier_trace.h): retain its whole pages for
  // `seconds`; read its prompt's disk/remote prefix into the host now.
  Status retain(const Namespace& ns, std::span<const TokenId> prompt, uint32_t whole_pages, uint32_t seconds);
  Status prefetch(const Namespace& ns, std::span<const TokenId> prompt);
  // Lets the last transfers' accounting land; then stats() is complete.
  Status finish() { return cache_->drain(); }
  ReplayCacheStats stats() const;
  KVCache& cache() { return *cache_; }

 private:
  ReplayCache(std::unique_ptr<ManualClock> clock, std::unique_ptr<KVCache> c, const ReplayCacheOptions& o)
      : options_(o), clock_(std::move(clock)), cache_(std::move(c)) {}
  ReplayCacheOptions options_;
  std::unique_ptr<ManualClock> clock_;  // the cache's clock (declared first: it outlives the cache)
  Clock::duration now_{};               // clock_'s time since the trace began
  std::unique_ptr<KVCache> cache_;
};

// The KVCacheOptions of a payload-less cache (what create() builds; tests vary them).
Result<KVCacheOptions> replay_cache_options(const ReplayCacheOptions& options);

}  // namespace kvtier::sim_detail
