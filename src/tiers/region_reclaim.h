// RegionReclaimOrder: which region a segment log reclaims when it needs a new
// one — the one rule behind DiskTier's capacity, kept apart from its I/O so
// that the payload-less disk tier of the replay simulator (MetadataTier)
// reclaims exactly as DiskTier does.
//
// Regions are numbered in creation order (id = age). kFifo reclaims the
// oldest; kLru the one read least recently (a region's time is that of its
// creation or of its last read, in the log's logical ticks; ticks are unique).
// The region being filled is never reclaimed.
//
// Not thread-safe: the owner guards it (DiskTier under its lock).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "tiers/tier.h"

namespace kvtier {

class RegionReclaimOrder {
 public:
  explicit RegionReclaimOrder(EvictionOrder order) : order_(order) {}

  // A region enters the log (created, or found when reopening) at `tick`.
  void add(uint32_t region, uint64_t tick);
  // A read of the region at `tick` (counts under kLru only).
  void touch(uint32_t region, uint64_t tick);
  void remove(uint32_t region);
  // The region to reclaim next, other than `active`; nullopt when there is none.
  std::optional<uint32_t> victim(std::optional<uint32_t> active) const;
  size_t size() const { return key_of_.size(); }

 private:
  // kFifo: the id; kLru: the tick of the last creation or read.
  uint64_t key(uint32_t region, uint64_t tick) const { return order_ == EvictionOrder::kFifo ? region : tick; }

  EvictionOrder order_;
  std::set<std::pair<uint64_t, uint32_t>> queue_;  // (key, region): begin() is reclaimed first
  std::unordered_map<uint32_t, uint64_t> key_of_;
};

}  // namespace kvtier
