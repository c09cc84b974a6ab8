// CacheConfig: the cache's operator-facing options, declared once.
//
// Every option of the cache lives here as a plain field with its default,
// and as one row of cache_option_table() (common/option_table.h) that names
// its TOML key, flag and Python keyword. KVCacheOptions (cache/kv_cache.h),
// RuntimeOptions (runtime/runtime.h) and ReplayOptions (sim/replay.h) all
// derive from it, so `kvtier serve`, `kvtier.Cache(...)`, `kvtier replay`
// and the library read the same fields; a new option is one field, one row
// and one line in docs/CONFIG.md (generated: `kvtier config --markdown`).
//
// Plain values; safe to copy between threads. validate() checks the values
// that need no model; KVCacheOptions::validate() checks the rest against
// the KV geometry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/option_table.h"
#include "index/eviction_policy.h"
#include "kvtier/namespace.h"
#include "codec/kv_codec.h"
#include "tiers/tier_factory.h"

namespace kvtier {

enum class WritePolicy : uint8_t {
  kWriteThrough = 0,  // new pages are copied to host and (whole chunks) to disk as soon as committed
  kWriteBack = 1,     // a page moves down only when it is evicted from the faster tier
  kSelective = 2,     // like write-through, but a chunk goes to disk only once its prefix was hit N times
};
std::string_view write_policy_name(WritePolicy p);
// write_through | write_back | selective (a '-' may stand for the '_').
Result<WritePolicy> parse_write_policy(std::string_view s);

// The tiers' fields (capacities, places, codecs, secrets' files) come from
// TierConfig (tiers/tier_factory.h), which builds them; the rest is how the
// cache uses them.
struct CacheConfig : TierConfig {
  uint32_t chunk_pages = 16;                 // lower-tier I/O unit, in pages
  size_t device_bytes = size_t(512) << 20;   // the device pool's capacity (hard)
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  uint32_t selective_hits = 2;               // for kSelective
  // kWriteThrough: a commit also stores the prompt's and the sequence's
  // tails (the pages past their last whole chunk) as short chunks, so that a
  // session's next turn found below the host recomputes none of them. Off:
  // whole chunks only (fewer writes; each turn rewrites at most 2 tails).
  bool store_tails = true;
  EvictionPolicyKind eviction = EvictionPolicyKind::kLru;
  HashAlgo hash = HashAlgo::kXXH3_128;
  bool layerwise = true;                     // false: a lease waits for every layer before compute starts
  // More I/O in flight; measured faster than 2 for long disk loads
  // (docs/PERF.md). 0: moves run inline, done when each call returns.
  uint32_t transfer_workers = 4;
  std::string profile_path;                  // calibration profile; empty: calibrate at start
  // Share of the host tier, and of the disk tier's regions, that retention
  // hints (KVCache::retain) may keep from eviction; past it the earliest
  // hint yields. 0: hints are ignored.
  double max_retained_share = 0.5;

  // A lossy host codec needs a policy that stores down from device pages
  // (write_through or selective): write_back would spill lossy host slots
  // as exact. The values alone (ranges, that rule); no geometry needed.
  Status validate() const;
  CacheConfig& cache_config() { return *this; }
  const CacheConfig& cache_config() const { return *this; }
};

// One row per field above, in the TOML section [cache].
const OptionTable<CacheConfig>& cache_option_table();

}  // namespace kvtier
