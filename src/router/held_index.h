// HeldIndex: what one backend says it holds, in every tier, built from its
// GET /v1/cache/events stream (a snapshot, then the events after it;
// tiers/kv_events.h, docs/SCALING.md): page hashes on the device and the
// host, chunk hashes (the hash of a chunk's last page) on disk.
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

#include "tiers/kv_events.h"

namespace kvtier::router {

class HeldIndex {
 public:
  // Replaces everything with a snapshot's lists.
  void reset(const std::vector<PageHash>& device, const std::vector<PageHash>& host, const std::vector<PageHash>& disk);
  // One event record: `kind` of every hash in `tier` (`from`: the tier a move left).
  void apply(KvEventKind kind, TierKind tier, TierKind from, std::span<const PageHash> hashes);
  void clear();

  // The leading pages of `chain` held, by tier: pages on the device or host
  // one by one, then whole chunks of `chunk_pages` on disk where the index has
  // none (what a lookup on the backend would find).
  struct Match {
    uint32_t device = 0, host = 0, disk = 0;
    uint32_t pages() const { return device + host + disk; }
  };
  Match match(std::span<const PageHash> chain, uint32_t chunk_pages) const;

  size_t pages() const { return pages_.size(); }
  size_t chunks() const { return disk_.size(); }

 private:
  static constexpr uint8_t kDeviceBit = 1, kHostBit = 2;
  std::unordered_map<PageHash, uint8_t, PageHashHasher> pages_;  // tier bits
  std::unordered_set<PageHash, PageHashHasher> disk_;
};

}  // namespace kvtier::router
