// ChunkSet: the metadata-only model of a hash-keyed chunk store (the disk
// tier's segment log, the remote store) for the replay simulator: a set of
// chunk hashes bounded by a capacity in chunks, reclaimed oldest-inserted
// first (FIFO, like a log that reclaims its oldest region) or least-recently
// used first (LRU, like a cache server's eviction). No bytes are held.
// Not thread-safe; owned by the replay's single thread.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>

#include "kvtier/types.h"

namespace kvtier {

enum class ChunkReclaim : uint8_t { kFifo = 0, kLru = 1 };
Result<ChunkReclaim> parse_chunk_reclaim(std::string_view name);  // fifo | lru
std::string_view chunk_reclaim_name(ChunkReclaim r);

class ChunkSet {
 public:
  // capacity_chunks == 0: the store is absent (holds nothing).
  ChunkSet(uint64_t capacity_chunks, ChunkReclaim reclaim) : capacity_(capacity_chunks), reclaim_(reclaim) {}

  bool present() const { return capacity_ > 0; }
  uint64_t size() const { return map_.size(); }
  uint64_t capacity() const { return capacity_; }
  uint64_t reclaimed() const { return reclaimed_; }
  bool contains(const PageHash& h) const { return map_.count(h) != 0; }

  // How many leading keys are present (the tiers' exists_prefix). Read-only.
  size_t leading(std::span<const PageHash> keys) const {
    size_t n = 0;
    while (n < keys.size() && contains(keys[n])) ++n;
    return n;
  }

  // A hit: under LRU the chunk becomes the most recent.
  void touch(const PageHash& h) {
    if (reclaim_ != ChunkReclaim::kLru) return;
    auto it = map_.find(h);
    if (it != map_.end()) order_.splice(order_.end(), order_, it->second);
  }

  // Stores a chunk (no-op when present or absent store); reclaims to stay
  // within capacity. Returns whether it was stored.
  bool put(const PageHash& h) {
    if (capacity_ == 0 || contains(h)) return false;
    while (map_.size() >= capacity_) {
      map_.erase(order_.front());
      order_.pop_front();
      ++reclaimed_;
    }
    order_.push_back(h);
    map_.emplace(h, std::prev(order_.end()));
    return true;
  }

 private:
  uint64_t capacity_;
  ChunkReclaim reclaim_;
  uint64_t reclaimed_ = 0;
  std::list<PageHash> order_;  // front = reclaimed next
  std::unordered_map<PageHash, std::list<PageHash>::iterator, PageHashHasher> map_;
};

}  // namespace kvtier
