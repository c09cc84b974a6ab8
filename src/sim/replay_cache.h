// CacheModel: the metadata-only replica of KVCache's lookup and commit that
// the replay simulator drives (internal to src/sim). It owns a real
// PrefixIndex (device and host residency with synthetic page and slot ids)
// and ChunkSets for disk and remote, and follows the server's rules:
//  lookup — match the whole pages before the last prompt token; lower tiers
//           extend the match by whole chunks keyed by the hash of each
//           chunk's last page, and when they do the index part is cut to a
//           chunk boundary (KVCache::lookup);
//  commit — insert every whole prompt page; pages cached only on host are
//           promoted to device; write-through and selective give every page
//           a host copy and store whole chunks down (selective only chunks
//           hit selective_hits times); write-back stores nothing down; then
//           device pages are evicted to capacity (KVCache::commit/evict_*).
// One deliberate difference: after the insert, LRU and priority re-walk the
// request's path so that recency ties (a split node's unused tail and the
// new leaf) go to the request's own pages instead of to the index's node
// slot order.
// The index works on "index tokens": the prompt's tokens, or one synthetic
// token per page when the prompt is made of hash-id blocks (unit == 1).
// Not thread-safe.
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache.h"
#include "index/prefix_index.h"
#include "sim/chunk_set.h"

namespace kvtier::sim_detail {

struct CacheModelOptions {
  uint32_t unit = 16;         // index tokens per page
  uint32_t chunk_pages = 16;
  uint64_t device_pages = UINT64_MAX;  // UINT64_MAX = unlimited
  uint64_t host_pages = 0;             // 0 = no host tier
  uint64_t disk_chunks = 0, remote_chunks = 0;
  ChunkReclaim disk_reclaim = ChunkReclaim::kFifo, remote_reclaim = ChunkReclaim::kLru;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  uint32_t selective_hits = 2;
  EvictionPolicyKind eviction = EvictionPolicyKind::kLru;
  HashAlgo hash = HashAlgo::kXXH3_128;
};

struct CacheModelLookup {
  uint32_t lookup_pages = 0;
  uint32_t index_pages = 0, disk_pages = 0, remote_pages = 0;
  std::array<uint32_t, kNumTiers> pages_by_tier{};
  std::vector<CachedRun> runs;
  MatchResult match;
  uint32_t cached_pages() const { return index_pages + disk_pages + remote_pages; }
};

struct CacheModelStats {
  std::array<uint64_t, kNumTiers> stored_pages{};  // device→tier copies (host pages; disk/remote chunk pages)
  std::array<uint64_t, kNumTiers> evictions{};     // pages (device, host) or chunks (disk, remote)
  uint64_t promotions = 0;                         // host-only pages given a device copy again
};

class CacheModel {
 public:
  static Result<std::unique_ptr<CacheModel>> create(const CacheModelOptions& o);

  NsKey ns_key(const Namespace& ns) const { return index_->namespace_key(ns); }
  // `seq` holds the index tokens of the whole pages of the prompt
  // (whole_pages * unit); lookup_pages <= whole_pages.
  void lookup(NsKey ns, std::span<const TokenId> seq, uint32_t lookup_pages, CacheModelLookup& out);
  // Commits all whole pages of `seq` after `lookup` of the same prompt.
  Status commit(NsKey ns, std::span<const TokenId> seq, CacheModelLookup& lookup);

  CacheModelStats stats() const;
  const PrefixIndex& index() const { return *index_; }

 private:
  explicit CacheModel(const CacheModelOptions& o);
  bool hashing() const { return disk_.present() || remote_.present(); }
  const PageHash& chunk_key(std::span<const PageHash> hashes, uint32_t c) const {
    return hashes[size_t(c + 1) * o_.chunk_pages - 1];
  }
  Status evict(TierKind tier, uint64_t pages);

  CacheModelOptions o_;
  std::unique_ptr<PrefixIndex> index_;
  ChunkSet disk_, remote_;
  std::unordered_map<PageHash, uint32_t, PageHashHasher> chunk_hits_;  // selective policy
  uint32_t next_page_ = 0, next_slot_ = 0;
  CacheModelStats stats_;
  // Scratch reused across requests.
  std::vector<PageHash> keys_, hashes_;
  std::vector<PageLocation> locs_;
  std::vector<uint32_t> need_host_;
  EvictResult evicted_;
  MatchResult refresh_;
};

}  // namespace kvtier::sim_detail
