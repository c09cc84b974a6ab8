// MetadataTier: a chunk store that keeps which chunks it holds and nothing
// else — the disk or remote tier of a payload-less KVCache, which the replay
// simulator drives (src/sim/replay_cache.h). It accounts capacity,
// residency, reclaim and traffic exactly as the tier it stands for, but
// never holds a byte of payload.
//
// Capacity is `regions` regions of `chunks_per_region` full chunks each,
// filled in order; when a new region is needed and all are in use, one whole
// region is reclaimed by RegionReclaimOrder (tiers/region_reclaim.h), the
// rule DiskTier follows. Sized from DiskTierOptions (max_regions,
// chunks_per_region) it is DiskTier's segment log; with chunks_per_region =
// 1 it is a key-value store that reclaims one chunk at a time, oldest stored
// (kFifo) or least recently read (kLru) first — the model of RemoteTier's
// Redis with `maxmemory`.
//
// Contracts as in tiers/tier.h, except that get reports a present chunk as
// read (OK, its page count; under kLru its region becomes the most recent)
// and zero-fills the requested range: there are no bytes to return.
// Thread safety: all methods are thread-safe (one mutex).
#pragma once

#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tiers/region_reclaim.h"
#include "tiers/tier.h"

namespace kvtier {

struct MetadataTierOptions {
  ChunkGeometry geometry;  // the chunks it accepts (what the cache stores)
  TierKind kind = TierKind::kDisk;
  uint32_t regions = 0;            // >= 1
  uint32_t chunks_per_region = 1;  // >= 1
  EvictionOrder reclaim = EvictionOrder::kFifo;
  const Clock* clock = &Clock::system();  // retention holds expire by it; must outlive the tier

  Status validate() const;
};

class MetadataTier final : public Tier {
 public:
  static Result<std::unique_ptr<MetadataTier>> create(const MetadataTierOptions& options);

  TierKind kind() const override { return options_.kind; }
  const ChunkGeometry& geometry() const override { return options_.geometry; }
  void put_batch(std::span<PutOp> ops) override;
  void get_batch(std::span<GetOp> ops) override;
  size_t exists_prefix(const PageHash& ns, std::span<const PageHash> chunk_keys) override;
  Status erase(const ChunkKey& key) override;
  Status flush() override { return Status::Ok(); }
  // bytes: the held chunks at their payload size; capacity_bytes: every region full.
  TierStats stats() const override;
  bool degraded() const override { return false; }
  // As DiskTier: regions holding retained entries are skipped by reclaim while held.
  size_t retain(std::span<const ChunkKey> keys, Clock::time_point until, double max_share) override;

 private:
  struct Entry {
    uint32_t region = 0;
    uint32_t pages = 0;
  };
  explicit MetadataTier(const MetadataTierOptions& o) : options_(o), reclaim_order_(o.reclaim) {}
  Status put_locked(const PutOp& op);
  void reclaim_one_locked();

  MetadataTierOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<ChunkKey, Entry, ChunkKeyHasher> index_;
  std::unordered_map<uint32_t, std::vector<ChunkKey>> region_keys_;  // what each region holds
  RegionReclaimOrder reclaim_order_;
  uint32_t next_region_ = 0;
  uint32_t active_fill_ = 0;  // chunks in the region being filled (region next_region_ - 1)
  bool has_active_ = false;
  uint64_t tick_ = 0;
  uint64_t held_pages_ = 0;
  TierStats stats_;
};

}  // namespace kvtier
