// KVCache: retention hints (retain()): prefixes kept in the host tier, and their chunks' disk regions, for a while.
#include <algorithm>
#include <cmath>

#include "cache/kv_cache.h"

namespace kvtier {

Result<uint32_t> KVCache::retain(const Namespace& ns, std::span<const TokenId> tokens, Clock::duration ttl) {
  poll();
  if (options_.max_retained_share <= 0 || ttl <= Clock::duration::zero()) return 0u;
  const Clock::time_point until = options_.clock->now() + ttl;
  const uint32_t P = options_.geometry.page_tokens;
  uint32_t pages = host_ ? retain_on_host(index_->namespace_key(ns), tokens, until) : 0;
  // The disk holds the regions of the prefix's whole chunks back from reclaim as well: the host share is
  // capped, and a prefix the host let go (or never had) comes back from the disk instead of being recomputed.
  if (disk_) {
    const std::vector<ChunkKey> keys = chunk_keys(ns, tokens);
    const size_t held = disk_->retain(keys, until, options_.max_retained_share);
    pages = std::max(pages, uint32_t(held) * options_.chunk_pages);
  }
  if (pages > 0) ++stats_.retain_hints;
  return pages * P;
}

uint32_t KVCache::retain_on_host(const NsKey& ns, std::span<const TokenId> tokens, Clock::time_point until) {
  if (options_.max_retained_share <= 0) return 0;  // hints are off
  const uint32_t P = options_.geometry.page_tokens;
  MatchResult m;
  index_->match(ns, tokens.first(tokens.size() / P * P), m, /*hash_remainder=*/false);
  // Only the leading pages with a host copy: a retained page never leaves the
  // host, and one on the device alone could then leave neither tier (the
  // device would hold it, unevictable, until the hint ends).
  uint32_t held = 0;
  while (held < m.matched_pages && m.locations[held].on_host()) ++held;
  if (held == 0) return 0;
  const auto node = index_->ending_at(m.deepest, held);  // the prefix, not a longer prompt's node
  if (!node.ok()) return 0;
  auto same = std::find_if(retained_.begin(), retained_.end(), [&](const Retention& r) { return r.node == *node; });
  if (same != retained_.end()) {  // extend: it moves to the back, the last to yield
    Retention r{same->node, std::max(same->until, until)};
    retained_.erase(same);
    retained_.push_back(r);
  } else {
    if (!index_->retain(*node).ok()) return 0;
    retained_.push_back(Retention{*node, until});
  }
  next_expiry_ = std::min(next_expiry_, until);
  const auto cap = static_cast<uint64_t>(std::floor(options_.max_retained_share * host_->num_slots()));
  while (!retained_.empty() && index_->stats().retained_host_pages > cap) {
    let_go(0);
    ++stats_.retain_yields;
  }
  return !retained_.empty() && retained_.back().node == *node ? held : 0;
}

void KVCache::let_go(size_t i) {
  (void)index_->unretain(retained_[i].node);  // cannot fail: a retained node is never removed (PrefixIndex I6)
  retained_.erase(retained_.begin() + static_cast<std::ptrdiff_t>(i));
}

// Every entry point calls it: O(1) until the earliest hint's time comes.
void KVCache::expire_retained(bool all) {
  if (retained_.empty()) return;
  const Clock::time_point now = options_.clock->now();
  if (!all && now < next_expiry_) return;
  next_expiry_ = Clock::time_point::max();
  for (size_t i = 0; i < retained_.size();) {
    if (!all && retained_[i].until > now) {
      next_expiry_ = std::min(next_expiry_, retained_[i].until);
      ++i;
      continue;
    }
    let_go(i);
    if (!all) ++stats_.retain_expiries;
  }
}

}  // namespace kvtier
