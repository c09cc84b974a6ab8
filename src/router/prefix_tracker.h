// PrefixTracker: what the router believes one backend holds, as the page
// hashes of the prompts it sent there (each hash names a page and its whole
// prefix, so a prompt's chain matches while its leading hashes are present).
//
// A belief, not the backend's index: a backend may have evicted what was
// routed to it (a stale belief costs a miss, never a wrong answer), and pages
// it got otherwise (another router, the shared Redis tier) are not seen.
// Bounded: at most `capacity` hashes, the least recently routed dropped first.
// Not thread-safe (the Router guards it).
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>

#include "kvtier/types.h"

namespace kvtier::router {

class PrefixTracker {
 public:
  explicit PrefixTracker(size_t capacity) : capacity_(capacity) {}
  PrefixTracker(PrefixTracker&&) = default;  // list iterators stay valid across a move, not a copy
  PrefixTracker& operator=(PrefixTracker&&) = default;
  PrefixTracker(const PrefixTracker&) = delete;
  PrefixTracker& operator=(const PrefixTracker&) = delete;

  // How many leading hashes of `chain` are held.
  uint32_t match(std::span<const PageHash> chain) const;
  // The backend now holds the whole chain: its hashes become the most recent.
  void insert(std::span<const PageHash> chain);
  void clear();
  size_t size() const { return where_.size(); }

 private:
  size_t capacity_;
  std::list<PageHash> order_;  // most recent first
  std::unordered_map<PageHash, std::list<PageHash>::iterator, PageHashHasher> where_;
};

}  // namespace kvtier::router
