#include "router/prefix_tracker.h"

namespace kvtier::router {

uint32_t PrefixTracker::match(std::span<const PageHash> chain) const {
  uint32_t n = 0;
  while (n < chain.size() && where_.count(chain[n])) ++n;
  return n;
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
