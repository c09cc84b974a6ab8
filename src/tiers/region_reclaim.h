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
// Retention (KVCache::retain, a client's hint): a region holding a retained
// entry is skipped by victim() until the hint's time is up — skipped, not
// rewritten forward: sealed regions stay immutable and a reclaim never costs
// a read and a rewrite. A region is the unit held, so the hold is capped in
// regions (`max_regions` of retain()): past it the earliest-granted hold
// yields. When every region but the active one is held, victim() takes the
// first in order anyway: a full log never refuses a write.
//
// Not thread-safe: the owner guards it (DiskTier under its lock).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/clock.h"
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
  // Holds `region` until `until` (a later time extends it); at most `max_regions` are held at
  // `now` (holds past their time are dropped first, and a hold already past is no hold).
  // Returns how many live holds yielded to make room.
  uint32_t retain(uint32_t region, Clock::time_point until, uint32_t max_regions, Clock::time_point now);
  // The region to reclaim next, other than `active`, preferring regions not
  // held at `now` (holds past their time are dropped); nullopt when there is none.
  std::optional<uint32_t> victim(std::optional<uint32_t> active, Clock::time_point now);
  size_t size() const { return key_of_.size(); }
  // Regions held at `now`.
  size_t held(Clock::time_point now) const;

 private:
  // kFifo: the id; kLru: the tick of the last creation or read.
  uint64_t key(uint32_t region, uint64_t tick) const { return order_ == EvictionOrder::kFifo ? region : tick; }

  EvictionOrder order_;
  std::set<std::pair<uint64_t, uint32_t>> queue_;  // (key, region): begin() is reclaimed first
  std::unordered_map<uint32_t, uint64_t> key_of_;
  struct Hold {
    Clock::time_point until;
    uint64_t grant = 0;  // order of the last retain(): the smallest yields first
  };
  std::unordered_map<uint32_t, Hold> holds_;
  std::set<std::pair<uint64_t, uint32_t>> grants_;  // (grant, region)
  uint64_t next_grant_ = 0;
  void release(uint32_t region);
};

}  // namespace kvtier
