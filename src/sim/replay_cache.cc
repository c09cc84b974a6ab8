#include "sim/replay_cache.h"

#include <algorithm>

#include "common/page_hash.h"

namespace kvtier {

Result<ChunkReclaim> parse_chunk_reclaim(std::string_view name) {
  if (name == "fifo") return ChunkReclaim::kFifo;
  if (name == "lru") return ChunkReclaim::kLru;
  return Status::InvalidArgument("unknown chunk reclaim policy '" + std::string(name) + "' (expected fifo or lru)");
}

std::string_view chunk_reclaim_name(ChunkReclaim r) { return r == ChunkReclaim::kFifo ? "fifo" : "lru"; }

namespace sim_detail {

namespace {
// Synthetic ids: any valid value will do, the index never dereferences them.
uint32_t next_id(uint32_t& counter) {
  const uint32_t v = counter;
  counter = counter + 1 == UINT32_MAX ? 0 : counter + 1;
  return v;
}
}  // namespace

CacheModel::CacheModel(const CacheModelOptions& o)
    : o_(o), disk_(o.disk_chunks, o.disk_reclaim), remote_(o.remote_chunks, o.remote_reclaim) {}

Result<std::unique_ptr<CacheModel>> CacheModel::create(const CacheModelOptions& o) {
  if (o.unit == 0 || o.chunk_pages == 0) return Status::InvalidArgument("cache model: unit and chunk_pages must be > 0");
  if (o.device_pages == 0) return Status::InvalidArgument("cache model: the device tier needs at least one page");
  std::unique_ptr<CacheModel> m(new CacheModel(o));
  PrefixIndex::Options io;
  io.page_tokens = o.unit;
  io.hash_algo = o.hash;
  io.store_hashes = m->hashing();  // only chunk keys need hashes
  io.policy = o.eviction;
  KVTIER_ASSIGN_OR_RETURN(m->index_, PrefixIndex::create(io));
  return m;
}

void CacheModel::lookup(NsKey ns, std::span<const TokenId> seq, uint32_t lookup_pages, CacheModelLookup& L) {
  const uint32_t C = o_.chunk_pages;
  L.lookup_pages = lookup_pages;
  L.disk_pages = L.remote_pages = 0;
  L.pages_by_tier = {};
  L.runs.clear();
  index_->match(ns, seq.first(size_t(lookup_pages) * o_.unit), L.match, /*hash_remainder=*/hashing());
  const uint32_t m = L.match.matched_pages;
  L.index_pages = m;

  const uint32_t total_chunks = lookup_pages / C, c0 = m / C;
  if (c0 < total_chunks && hashing()) {
    keys_.clear();
    for (uint32_t c = c0; c < total_chunks; ++c) keys_.push_back(chunk_key(L.match.hashes, c));
    const uint32_t dk = static_cast<uint32_t>(disk_.leading(keys_));
    const uint32_t rk = static_cast<uint32_t>(remote_.leading(std::span<const PageHash>(keys_).subspan(dk)));
    if (dk + rk > 0 && (c0 + dk + rk) * C > m) {
      L.index_pages = c0 * C;
      L.disk_pages = dk * C;
      L.remote_pages = rk * C;
      for (uint32_t k = 0; k < dk; ++k) disk_.touch(keys_[k]);
      for (uint32_t k = dk; k < dk + rk; ++k) remote_.touch(keys_[k]);
    }
  }

  for (uint32_t p = 0; p < L.index_pages; ++p) {
    const TierKind t = L.match.locations[p].on_device() ? TierKind::kDevice : TierKind::kHost;
    ++L.pages_by_tier[static_cast<size_t>(t)];
    if (!L.runs.empty() && L.runs.back().tier == t) {
      ++L.runs.back().pages;
    } else {
      L.runs.push_back({t, 1});
    }
  }
  if (L.disk_pages) L.runs.push_back({TierKind::kDisk, L.disk_pages});
  if (L.remote_pages) L.runs.push_back({TierKind::kRemote, L.remote_pages});
  L.pages_by_tier[static_cast<size_t>(TierKind::kDisk)] = L.disk_pages;
  L.pages_by_tier[static_cast<size_t>(TierKind::kRemote)] = L.remote_pages;

  if (o_.write_policy == WritePolicy::kSelective && hashing()) {
    for (uint32_t c = 0; c < L.cached_pages() / C; ++c) ++chunk_hits_[chunk_key(L.match.hashes, c)];
    if (chunk_hits_.size() > (size_t(1) << 20)) chunk_hits_.clear();  // bounded memory, as the server
  }
}

// As KVCache does: with write-back, a device page leaving is demoted to a
// host slot when one is free (room is made first), and a whole chunk whose
// last page leaves the host is spilled to disk and the remote store.
Status CacheModel::evict(TierKind tier, uint64_t pages) {
  const bool write_back = o_.write_policy == WritePolicy::kWriteBack;
  PrefixIndex::DemoteFn demote;
  PrefixIndex::SpillHook spill{};
  uint64_t free_slots = 0;
  if (write_back && tier == TierKind::kDevice && o_.host_pages > 0) {
    const uint64_t used = index_->tier_pages(TierKind::kHost);
    if (used + pages > o_.host_pages) KVTIER_RETURN_IF_ERROR(evict(TierKind::kHost, used + pages - o_.host_pages));
    free_slots = o_.host_pages - std::min(o_.host_pages, index_->tier_pages(TierKind::kHost));
    demote = [&](const PageLocation&, const PageHash&) {
      if (free_slots == 0) return SlotId();
      --free_slots;
      ++stats_.stored_pages[static_cast<size_t>(TierKind::kHost)];
      return SlotId(next_id(next_slot_));
    };
  }
  if (write_back && tier == TierKind::kHost && hashing()) {
    spill.run_pages = o_.chunk_pages;
    spill.fn = [&](NsKey, std::span<const PageHash> hashes, std::span<const PageLocation>) {
      for (ChunkSet* set : {&disk_, &remote_})
        if (set->present() && set->put(hashes.back()))
          stats_.stored_pages[static_cast<size_t>(set == &disk_ ? TierKind::kDisk : TierKind::kRemote)] +=
              o_.chunk_pages;
    };
  }
  while (pages > 0) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(pages, UINT32_MAX));
    KVTIER_RETURN_IF_ERROR(index_->evict(n, tier, evicted_, demote, spill));
    stats_.evictions[static_cast<size_t>(tier)] += evicted_.freed;
    if (evicted_.freed == 0) break;
    pages -= evicted_.freed;
  }
  return Status::Ok();
}

Status CacheModel::commit(NsKey ns, std::span<const TokenId> seq, CacheModelLookup& L) {
  const uint32_t U = o_.unit, C = o_.chunk_pages;
  const uint32_t W = static_cast<uint32_t>(seq.size() / U);
  if (W == 0) return Status::Ok();
  std::span<const PageHash> hashes;
  if (hashing()) {
    // The match hashed the lookup pages; the last whole page (when the
    // prompt ends on a page boundary) is chained on here.
    hashes_.assign(L.match.hashes.begin(), L.match.hashes.end());
    const PageHash prev = hashes_.empty() ? ns.seed : hashes_.back();
    if (W > hashes_.size()) {
      const size_t from = hashes_.size();
      hash_pages(o_.hash, prev, seq.subspan(from * U, (W - from) * size_t(U)), U, hashes_);
    }
    hashes = hashes_;
  }
  locs_.resize(W);
  for (uint32_t i = 0; i < W; ++i) locs_[i] = PageLocation{PageId(next_id(next_page_)), SlotId()};
  KVTIER_ASSIGN_OR_RETURN(InsertResult ins, index_->insert(ns, seq.first(size_t(W) * U), locs_, hashes));

  const bool host = o_.host_pages > 0 && o_.write_policy != WritePolicy::kWriteBack;
  need_host_.clear();
  for (uint32_t i = 0; i < W; ++i) {
    if (i >= ins.already_present) {
      if (host) need_host_.push_back(i);
      continue;
    }
    PageLocation loc;
    if (i < L.match.matched_pages) {
      loc = L.match.locations[i];
    } else {
      KVTIER_ASSIGN_OR_RETURN(loc, index_->location(ins.deepest, i));
    }
    if (!loc.on_device()) {  // loaded back (or recomputed): the page is on the device again
      loc.device = PageId(next_id(next_page_));
      KVTIER_RETURN_IF_ERROR(index_->set_location(ins.deepest, i, loc));
      ++stats_.promotions;
    }
    if (host && !loc.on_host()) need_host_.push_back(i);
  }

  if (!need_host_.empty()) {
    const uint64_t want = need_host_.size();
    const uint64_t used = index_->tier_pages(TierKind::kHost);
    if (used + want > o_.host_pages) KVTIER_RETURN_IF_ERROR(evict(TierKind::kHost, used + want - o_.host_pages));
    // The server copies to host only when every slot could be had.
    if (index_->tier_pages(TierKind::kHost) + want <= o_.host_pages) {
      for (uint32_t i : need_host_) {
        KVTIER_ASSIGN_OR_RETURN(PageLocation loc, index_->location(ins.deepest, i));
        loc.host = SlotId(next_id(next_slot_));
        KVTIER_RETURN_IF_ERROR(index_->set_location(ins.deepest, i, loc));
      }
      stats_.stored_pages[static_cast<size_t>(TierKind::kHost)] += want;
    }
  }

  if (o_.write_policy != WritePolicy::kWriteBack && hashing()) {
    const uint32_t chunks = W / C;
    for (ChunkSet* tier : {&disk_, &remote_}) {
      if (!tier->present()) continue;
      const size_t t = tier == &disk_ ? static_cast<size_t>(TierKind::kDisk) : static_cast<size_t>(TierKind::kRemote);
      for (uint32_t c = 0; c < chunks; ++c) {
        const PageHash& key = chunk_key(hashes, c);
        if (o_.write_policy == WritePolicy::kSelective) {
          auto it = chunk_hits_.find(key);
          if (it == chunk_hits_.end() || it->second < o_.selective_hits) continue;
        }
        if (tier->put(key)) stats_.stored_pages[t] += C;
      }
    }
  }

  // Recency tie-break. When this insert split a node, the node's unused
  // tail and the new leaf were touched by the same walk and share a tick;
  // the index would order them by node slot. Walking the request's own
  // path once more makes it strictly the most recent: deterministic, and
  // what LRU means. Only for policies whose key ignores hit counts.
  if (o_.eviction == EvictionPolicyKind::kLru || o_.eviction == EvictionPolicyKind::kPriorityLru)
    index_->match(ns, seq.first(size_t(W) * U), refresh_, /*hash_remainder=*/false);

  const uint64_t dev = index_->tier_pages(TierKind::kDevice);
  if (o_.device_pages != UINT64_MAX && dev > o_.device_pages)
    KVTIER_RETURN_IF_ERROR(evict(TierKind::kDevice, dev - o_.device_pages));
  return Status::Ok();
}

CacheModelStats CacheModel::stats() const {
  CacheModelStats s = stats_;
  s.evictions[static_cast<size_t>(TierKind::kDisk)] = disk_.reclaimed();
  s.evictions[static_cast<size_t>(TierKind::kRemote)] = remote_.reclaimed();
  return s;
}

}  // namespace sim_detail
}  // namespace kvtier
