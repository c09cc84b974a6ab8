// KVCache: read-ahead of disk and remote chunks into the host tier, and of
// host pages on into free device pages.
#include <algorithm>

#include "cache/kv_cache.h"

namespace kvtier {

// The pages a read-ahead of `L` reads now: its disk and remote pages, bounded
// so that the slots of chunks in flight never exceed half the host tier (so
// read-ahead cannot push out everything that is cached there); whole chunks,
// and the tail when all fit.
uint32_t KVCache::read_ahead_pages(const CacheLookup& L) const {
  const uint32_t lower = L.disk_pages + L.remote_pages, C = options_.chunk_pages;
  if (!host_ || lower == 0) return 0;
  uint32_t in_flight = 0;
  for (const auto& pf : prefetches_) in_flight += static_cast<uint32_t>(pf->slots.size());
  const uint32_t budget = host_->num_slots() / 2 > in_flight ? host_->num_slots() / 2 - in_flight : 0;
  return lower <= budget ? lower : budget / C * C;
}

// Whether retain_on_host would grant the hold of a read-ahead of `L` once landed:
// the prefix held is within the retention cap and the tenant's host quota.
bool KVCache::read_ahead_hold_fits(const CacheLookup& L, size_t hold_tokens) const {
  const uint64_t held = std::min<uint64_t>(L.index_pages + read_ahead_pages(L), hold_tokens / options_.geometry.page_tokens);
  return held <= retained_cap() && held <= host_quota_pages(L.ns.tenant);
}

Result<KVCache::PrefetchStart> KVCache::prefetch(const Namespace& ns, std::span<const TokenId> tokens,
                                                 Clock::duration hold, KVCache::HoldEnd hold_end, size_t hold_tokens) {
  hold_tokens = std::min(hold_tokens, tokens.size());
  if (hold > Clock::duration::zero()) {
    // A hold that could not be granted is not made: it would make other hints yield for nothing.
    KVTIER_ASSIGN_OR_RETURN(const CacheLookup before, find(ns, tokens));
    if (!read_ahead_hold_fits(before, hold_tokens)) hold = Clock::duration::zero();
    else KVTIER_RETURN_IF_ERROR(retain(ns, tokens.first(hold_tokens), hold, hold_end).status());
  }
  KVTIER_ASSIGN_OR_RETURN(CacheLookup L, find(ns, tokens));  // not a request: no hit counting
  PrefetchStart out{L.cached_pages(), 0};
  const uint32_t C = options_.chunk_pages, P = options_.geometry.page_tokens;
  out.promoting_pages = promote(L.ns, tokens.first(size_t(L.index_pages) * P));
  uint32_t pages = read_ahead_pages(L);
  if (pages == 0) return out;
  // A held read-ahead is a hint for what it lifts too: the oldest hints yield
  // first, or held pages could fill the host and leave it no room to land;
  // for the pages its hold covers (the marked prefix's), and no more.
  const uint64_t lifted_held = std::min<uint64_t>(pages, hold_tokens / P > L.index_pages ? hold_tokens / P - L.index_pages : 0);
  if (hold > Clock::duration::zero() && lifted_held > 0) {
    const uint64_t cap = retained_cap();
    yield_retained(cap > lifted_held ? cap - lifted_held : 0);
  }

  auto pf = std::make_unique<Prefetch>();
  allocate_slots(pages, pf->slots);
  if (pf->slots.size() < pages) pages = static_cast<uint32_t>(pf->slots.size()) / C * C;
  for (size_t i = pages; i < pf->slots.size(); ++i) host_->free_slot(pf->slots[i]);
  pf->slots.resize(pages);
  if (pages == 0) return out;

  pf->ns = L.ns;
  pf->hold = hold;
  pf->hold_end = hold_end;
  pf->hold_tokens = hold_tokens;
  pf->first_page = L.index_pages;
  const uint32_t end = L.index_pages + pages;
  pf->tokens.assign(tokens.begin(), tokens.begin() + size_t(end) * P);
  pf->hashes.assign(L.match.hashes.begin(), L.match.hashes.begin() + end);
  TransferBatch batch;
  for (uint32_t lo = 0; lo < pages; lo += C) {
    const uint32_t hi = std::min(lo + C, pages);
    LoadMove mv;
    mv.from = lo < L.disk_pages ? TierKind::kDisk : TierKind::kRemote;
    mv.key = ChunkKey{L.ns.seed, L.match.hashes[L.index_pages + hi - 1]};
    for (uint32_t p = lo; p < hi; ++p) mv.dst.push_back(PageLoc::host(pf->slots[p]));
    pf->chunk_keys.push_back(mv.key.hash);
    pf->chunk_from.push_back(mv.from);
    batch.loads.push_back(std::move(mv));
  }
  auto h = transfer_->submit(std::move(batch));
  if (!h.ok()) {
    for (SlotId s : pf->slots) host_->free_slot(s);
    return h.status();
  }
  pf->handle = std::move(h).value();
  prefetches_.push_back(std::move(pf));
  out.loading_pages = pages;
  return out;
}

uint32_t KVCache::cached_prefix_pages(const Namespace& ns, std::span<const TokenId> tokens) {
  const uint32_t P = options_.geometry.page_tokens;
  if (tokens.empty()) return 0;
  index_->match(index_->namespace_key(ns), tokens.first((tokens.size() - 1) / P * P), peek_, /*hash_remainder=*/false);
  return peek_.matched_pages;
}

bool KVCache::await_prefetches(const NsKey& ns, std::span<const PageHash> keys) {
  bool waited = false;
  // A prefetch that finished since the caller's poll() is still waited on (a
  // no-op) so that poll() indexes it: skipping it would read its chunks again.
  for (auto& pf : prefetches_) {
    if (!(pf->ns == ns)) continue;
    const bool overlaps = std::any_of(keys.begin(), keys.end(), [&](const PageHash& k) {
      return std::find(pf->chunk_keys.begin(), pf->chunk_keys.end(), k) != pf->chunk_keys.end();
    });
    if (!overlaps) continue;
    (void)pf->handle.wait_all();
    waited = true;
  }
  if (waited) {
    ++stats_.prefetch_waits;
    poll();
  }
  return waited;
}

void KVCache::finish_prefetch(Prefetch& pf) {
  const uint32_t C = options_.chunk_pages, P = options_.geometry.page_tokens;
  const TransferResult r = pf.handle.result();
  // Only the leading chunks that loaded and verified can join the index (no holes).
  uint32_t good = 0;
  while (good < r.loads.size() && r.loads[good].ok()) ++good;
  stats_.prefetch_failures += r.loads.size() - good;
  uint32_t keep = std::min(good * C, static_cast<uint32_t>(pf.slots.size()));  // pages from first_page on
  for (uint32_t c = 0; c < good; ++c)  // the last chunk may be a tail
    stats_.bytes_loaded_by_tier[static_cast<size_t>(pf.chunk_from[c])] +=
        uint64_t(std::min(C, keep - c * C)) * options_.geometry.page_bytes();
  // The pages before first_page must still be indexed, or the chunks would
  // hang off nothing: match what is there now.
  MatchResult m;
  index_->match(pf.ns, std::span(pf.tokens).first(size_t(pf.first_page) * P), m, /*hash_remainder=*/false);
  if (m.matched_pages < pf.first_page) keep = 0;
  uint32_t taken = 0;
  if (keep > 0) {
    const uint32_t end = pf.first_page + keep;
    std::vector<PageLocation> locs(end);
    for (uint32_t i = 0; i < end; ++i)  // entries before first_page are present, hence ignored
      locs[i].host = pf.slots[i < pf.first_page ? 0 : i - pf.first_page];
    for (uint32_t i = pf.first_page; i < end; ++i)  // pages of a lossy entry are marked as such
      locs[i].lossy = kv_codec_lossy(r.load_codecs[(i - pf.first_page) / C]);
    auto ins = index_->insert(pf.ns, std::span(pf.tokens).first(size_t(end) * P), locs,
                              std::span(pf.hashes).first(end));
    if (ins.ok()) {
      // Pages that arrived meanwhile by another route keep their copy; ours are duplicates.
      taken = end - std::max(pf.first_page, std::min(end, ins->already_present));
      for (uint32_t i = 0; i < keep; ++i)
        if (pf.first_page + i < ins->already_present) host_->free_slot(pf.slots[i]);
      stats_.prefetched_pages += taken;
    } else {
      keep = 0;
    }
  }
  for (uint32_t i = keep; i < pf.slots.size(); ++i) host_->free_slot(pf.slots[i]);
  const auto landed = std::span(pf.tokens).first(size_t(pf.first_page + keep) * P);
  if (taken > 0 && pf.hold > Clock::duration::zero() &&
      retain_on_host(pf.ns, landed.first(std::min(landed.size(), pf.hold_tokens)), options_.clock->now() + pf.hold,
                     pf.hold_end) > 0)
    ++stats_.retain_hints;
  if (taken > 0) promote(pf.ns, landed);
}

uint32_t KVCache::promote(const NsKey& ns, std::span<const TokenId> tokens) {
  const uint32_t budget = pool_->free_pages() / 2;
  if (budget == 0 || tokens.empty()) return 0;
  MatchResult m;
  index_->match(ns, tokens, m, /*hash_remainder=*/false);
  auto pr = std::make_unique<Promotion>();
  for (uint32_t p = 0; p < m.matched_pages && pr->at.size() < budget; ++p)
    if (m.locations[p].on_host() && !m.locations[p].on_device()) pr->at.push_back(p);
  if (pr->at.empty() || !pool_->allocate(uint32_t(pr->at.size()), pr->pages).ok()) return 0;
  // Locked, the path's host pages stay where the copies read them until they land.
  auto locked = index_->ending_at(m.deepest, m.matched_pages);
  if (!locked.ok() || !index_->lock(*locked).ok()) {
    for (PageId pg : pr->pages) pool_->unref(pg);
    return 0;
  }
  pr->ns = ns;
  pr->node = *locked;
  TransferBatch batch;
  for (size_t i = 0; i < pr->at.size(); ++i)
    batch.copies.push_back({PageLoc::host(m.locations[pr->at[i]].host), PageLoc::pool(pr->pages[i])});
  await_host_writes();
  auto h = transfer_->submit(std::move(batch));
  if (!h.ok()) {
    (void)index_->unlock(pr->node);
    for (PageId pg : pr->pages) pool_->unref(pg);
    return 0;
  }
  pr->handle = std::move(h).value();
  const uint32_t n = uint32_t(pr->at.size());
  promotions_.push_back(std::move(pr));
  return n;
}

void KVCache::finish_promotion(Promotion& pr) {
  (void)index_->unlock(pr.node);
  const TransferResult r = pr.handle.result();
  // A lossy host codec decoded the copies: the device pages are approximate (as a load from the host is).
  const bool lossy_host = kv_codec_lossy(options_.host_codec);
  for (size_t i = 0; i < pr.at.size(); ++i) {
    const bool copied = !r.cancelled && i < r.copies.size() && r.copies[i].ok();
    // The page may have reached the device by another route meanwhile (a request's own load).
    auto loc = index_->location(pr.node, pr.at[i]);
    const bool place = copied && loc.ok() && loc->on_host() && !loc->on_device() &&
                       index_->set_location(pr.node, pr.at[i], {pr.pages[i], loc->host, loc->lossy || lossy_host}).ok();
    if (place) {
      ++stats_.promoted_pages;  // the index holds our reference now
    } else {
      pool_->unref(pr.pages[i]);
    }
  }
}

bool KVCache::await_promotions(const NsKey& ns) {
  bool any = false;
  for (auto& pr : promotions_)
    if (pr->ns == ns) (void)pr->handle.wait_all(), any = true;
  if (any) poll();
  return any;
}

}  // namespace kvtier
