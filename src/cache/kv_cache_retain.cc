// KVCache: retention hints (retain()): prefixes kept in the host tier, and their chunks' disk regions, for a while.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "cache/kv_cache.h"
#include "cache/kv_cache_committed.h"

namespace kvtier {

Result<uint32_t> KVCache::retain(const Namespace& ns, std::span<const TokenId> tokens, Clock::duration ttl,
                                 HoldEnd end) {
  poll();
  if (options_.max_retained_share <= 0 || ttl <= Clock::duration::zero()) return 0u;
  const Clock::time_point until = options_.clock->now() + ttl;
  const uint32_t P = options_.geometry.page_tokens;
  uint32_t pages = host_ ? retain_on_host(index_->namespace_key(ns), tokens, until, end) : 0;
  // The disk holds the regions of the prefix's whole chunks (and its tail) back from reclaim as well: the host
  // share is capped, and a prefix the host let go (or never had) comes back from the disk instead of being recomputed.
  if (disk_) {
    const std::vector<ChunkKey> keys = stored_keys(ns, tokens, /*tail=*/true);
    const size_t held = disk_->retain(keys, until, options_.max_retained_share);
    const uint32_t prefix_pages = tokens.empty() ? 0 : uint32_t((tokens.size() - 1) / P);
    pages = std::max(pages, std::min(uint32_t(held) * options_.chunk_pages, prefix_pages));
  }
  if (pages > 0) ++stats_.retain_hints;
  if (!quotas_.empty()) enforce_quotas();  // the hint's pages count against the tenant's host quota now
  return pages * P;
}

uint32_t KVCache::retain_on_host(const NsKey& ns, std::span<const TokenId> tokens, Clock::time_point until,
                                 HoldEnd end) {
  if (options_.max_retained_share <= 0) return 0;  // hints are off
  const uint32_t P = options_.geometry.page_tokens;
  const auto whole = tokens.first(tokens.size() / P * P);
  MatchResult m;
  index_->match(ns, whole, m, /*hash_remainder=*/false);
  // A retained page never leaves the host, so one on the device alone could
  // leave neither tier (the device would hold it, unevictable, until the hint
  // ended): such pages get a host copy first, as write-through would have
  // made (a hot shared prefix loses its host copies while the device serves
  // it). The hint then holds the leading pages that have one. Not for a path
  // over the cap: the hint would yield at once, and the copies would only
  // have pushed other pages off the host.
  if (m.matched_pages <= retained_cap() && copy_path_to_host(m) > 0)
    index_->match(ns, whole, m, /*hash_remainder=*/false);
  uint32_t held = 0;
  while (held < m.matched_pages && m.locations[held].on_host()) ++held;
  // A hint over the cap alone, or over its tenant's host quota alone, yields at once, and alone:
  // retained first, it made every other hint (any tenant's, or the tenant's own) yield before it.
  if (held == 0 || held > retained_cap() || held > host_quota_pages(ns.tenant)) return 0;
  const auto node = index_->ending_at(m.deepest, held);  // the prefix, not a longer prompt's node
  if (!node.ok()) return 0;
  auto same = std::find_if(retained_.begin(), retained_.end(), [&](const Retention& r) { return r.node == *node; });
  Retention r{*node, until, end, held, m.hashes[held - 1], ns.tenant};
  if (same != retained_.end()) {  // extend: it moves to the back, the last to yield; a timed hint stays timed
    r.until = std::max(same->until, until);
    if (same->end == HoldEnd::kTime) r.end = HoldEnd::kTime;
    retained_.erase(same);
  } else if (!index_->retain(*node).ok()) {
    return 0;
  }
  retained_.push_back(r);
  next_expiry_ = std::min(next_expiry_, until);
  yield_retained(retained_cap());
  return !retained_.empty() && retained_.back().node == *node ? held : 0;
}

// Host copies of the device-only pages of the path `m` matched, through
// copy_to_host; the path is locked meanwhile, so that making room on the host
// cannot take the path's own host pages.
uint32_t KVCache::copy_path_to_host(const MatchResult& m) {
  Committed c;
  for (uint32_t i = 0; i < m.matched_pages; ++i) {
    const PageLocation& loc = m.locations[i];
    c.device.push_back(loc.device);
    c.lossy.push_back(loc.lossy);
    if (!loc.on_host()) c.need_host.push_back(i);
  }
  if (c.need_host.empty()) return 0;
  const auto node = index_->ending_at(m.deepest, m.matched_pages);
  if (!node.ok() || !index_->lock(*node).ok()) return 0;
  copy_to_host(*node, c);
  (void)index_->unlock(*node);
  return static_cast<uint32_t>(c.need_host.size());
}

uint64_t KVCache::retained_cap() const {
  return host_ ? static_cast<uint64_t>(std::floor(options_.max_retained_share * host_->num_slots())) : 0;
}

void KVCache::yield_retained(uint64_t cap) {
  while (!retained_.empty() && index_->stats().retained_host_pages > cap) {
    let_go(next_to_yield());
    ++stats_.retain_yields;
  }
}

// The oldest hint of the tenant whose hints hold the most pages: one tenant's hints made every
// other tenant's yield first, the oldest of all going first (a review emptied another tenant's hour
// long hint with four of its own, inside its own quota). With one tenant: the oldest hint.
size_t KVCache::next_to_yield() const {
  std::unordered_map<uint32_t, uint64_t> held;
  for (const Retention& r : retained_) held[r.tenant] += r.pages;
  size_t pick = 0;
  for (size_t i = 1; i < retained_.size(); ++i)
    if (held[retained_[i].tenant] > held[retained_[pick].tenant]) pick = i;
  return pick;
}

void KVCache::end_used_holds(const CacheLookup& L) {
  const std::vector<PageHash>& h = L.match.hashes;
  for (size_t i = 0; i < retained_.size();) {
    const Retention& r = retained_[i];
    if (r.end == HoldEnd::kFirstUse && r.pages <= h.size() && h[r.pages - 1] == r.last) {
      let_go(i);
      ++stats_.retain_used;
    } else {
      ++i;
    }
  }
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
