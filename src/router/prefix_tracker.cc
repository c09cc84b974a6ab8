#include "router/prefix_tracker.h"

namespace kvtier::router {

// What is held is prefix-closed along any chain: insert() touches a page's
// ancestors after the page itself (they come earlier in the same chain, and
// every chain through a page passes its ancestors), so a page is never less
// recent than its ancestors and the LRU drops descendants first. The leading
// run is therefore found by binary search: about log2(pages) lookups.
uint32_t PrefixTracker::match(std::span<const PageHash> chain) const {
  if (chain.empty() || !where_.count(chain[0])) return 0;  // most backends hold none of a given prompt
  size_t lo = 1, hi = chain.size();  // chain[0, lo) held; chain[hi] not (or the end)
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (where_.count(chain[mid - 1])) lo = mid;
    else hi = mid - 1;
  }
  return uint32_t(lo);
}

void PrefixTracker::insert(std::span<const PageHash> chain) {
  // Deepest first, so the chain's head ends most recent: eviction takes a chain from its tail.
  for (size_t i = chain.size(); i-- > 0;) {
    if (auto it = where_.find(chain[i]); it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      continue;
    }
    order_.push_front(chain[i]);
    where_[chain[i]] = order_.begin();
  }
  while (where_.size() > capacity_) {
    where_.erase(order_.back());
    order_.pop_back();
  }
}

void PrefixTracker::clear() {
  order_.clear();
  where_.clear();
}

}  // namespace kvtier::router
