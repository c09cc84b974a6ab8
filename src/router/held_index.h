// HeldIndex: what one backend says it holds, in every tier, built from its
// GET /v1/cache/events stream (a snapshot, then the events after it;
// tiers/kv_events.h, docs/SCALING.md): page hashes on the device and the
// host, chunk hashes (the hash of a chunk's last page) on disk. The router
// keeps one more for each shared remote store, holding the chunks that any
// of its backends put there (they count for every backend that uses it).
//
// Unlike PrefixTracker (what the router sent there), this sees evictions,
// demotions and pages the backend got from elsewhere (another router,
// direct clients). Its size follows the backend's own cache, not the
// router's traffic. Not thread-safe (the Router guards it).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "planner/planner.h"
#include "tiers/kv_events.h"

namespace kvtier::router {

class HeldIndex {
 public:
  // Replaces the device, host and disk lists with a snapshot's (remote chunks stay: no snapshot lists them).
  void reset(const std::vector<PageHash>& device, const std::vector<PageHash>& host, const std::vector<PageHash>& disk);
  // One event record: `kind` of every hash in `tier` (`from`: the tier a move left).
  void apply(KvEventKind kind, TierKind tier, TierKind from, std::span<const PageHash> hashes);
  void clear();

  // The leading pages of `chain` held, as runs by tier in prompt order (the
  // planner's input): pages on the device or host one by one, then whole
  // chunks of `chunk_pages` on disk where the index has none, then whole
  // chunks in `shared` (the index of the remote store the backend uses;
  // null: none), then a tail in either — the order of a lookup on the backend.
  struct Match {
    std::vector<CachedRun> runs;
    uint32_t pages() const;
    uint32_t on(TierKind t) const;
  };
  Match match(std::span<const PageHash> chain, uint32_t chunk_pages, const HeldIndex* shared = nullptr) const;

  size_t pages() const { return pages_.size(); }
  size_t chunks() const { return disk_.size(); }
  size_t remote_chunks() const { return remote_.size(); }

  // At most this many remote chunks are believed held: the store's own
  // evictions are never reported, so past it an arbitrary one is forgotten
  // (a stale belief costs one miss, a forgotten one a missed chance).
  static constexpr size_t kMaxRemoteChunks = size_t(1) << 20;

 private:
  static constexpr uint8_t kDeviceBit = 1, kHostBit = 2;
  // Where a chunk held in `set` (disk_ or remote_) that serves chain[i, ...)
  // ends: i's whole chunk, else the longest tail (a short chunk of the
  // prompt's last pages, KVCache::store_down) reaching past i; i: none.
  static size_t chunk_end(const std::unordered_set<PageHash, PageHashHasher>& set, std::span<const PageHash> chain,
                          size_t i, size_t chunk_pages);
  std::unordered_map<PageHash, uint8_t, PageHashHasher> pages_;  // tier bits
  std::unordered_set<PageHash, PageHashHasher> disk_, remote_;
};

}  // namespace kvtier::router
