// KVCache: the write policy — what a commit copies down, and when.
// write_through copies every committed page without a host copy to a host
// slot and every whole chunk to disk and remote; selective does the same but
// sends a chunk down only once its prefix was hit selective_hits times
// (counted by lookup()); write_back copies nothing at commit: eviction moves
// pages down instead (evict_device demotes, evict_host spills;
// kv_cache_store.cc). Lossy KV never goes below the tier it came from.
#include "cache/kv_cache.h"
#include "cache/kv_cache_committed.h"

namespace kvtier {

// Host copies of the committed pages that have none, as many as the host
// tier can take, the earliest first (the prefix is what gets reused).
void KVCache::copy_to_host(const NodeHandle& deepest, Committed& c) {
  if (!host_ || c.need_host.empty()) return;
  std::vector<SlotId> slots;
  allocate_slots(static_cast<uint32_t>(std::min<size_t>(c.need_host.size(), host_->num_slots())), slots);
  c.need_host.resize(slots.size());
  if (slots.empty()) return;
  auto pd = std::make_unique<Pending>();
  pd->writes_host = true;
  TransferBatch batch;
  for (size_t k = 0; k < c.need_host.size(); ++k) {
    const uint32_t i = c.need_host[k];
    const PageId dev = c.device[i];
    if (!index_->set_location(deepest, i, {dev, slots[k], c.lossy[i]}).ok()) {
      host_->free_slot(slots[k]);
      continue;
    }
    batch.copies.push_back({PageLoc::pool(dev), PageLoc::host(slots[k])});
    pd->host_copies.push_back({deepest, i, slots[k]});
    pool_->ref(dev);
    pd->refs.push_back(dev);
  }
  pd->bytes[static_cast<size_t>(TierKind::kHost)] = batch.copies.size() * options_.geometry.page_bytes();
  auto h = transfer_->submit(std::move(batch));
  if (h.ok()) {
    pd->handle = std::move(h).value();
    pending_.push_back(std::move(pd));
  } else {
    for (const Pending::HostCopy& hc : pd->host_copies) (void)drop_host_copy(hc);  // nothing was copied
    for (PageId p : pd->refs) pool_->unref(p);
  }
}

void KVCache::settle(Pending& pd) {
  if (pd.settled || pd.host_copies.empty()) return;
  pd.settled = true;
  (void)pd.handle.wait_all();
  const TransferResult r = pd.handle.result();
  for (size_t k = 0; k < pd.host_copies.size() && k < r.copies.size(); ++k)
    if (!r.copies[k].ok() && drop_host_copy(pd.host_copies[k])) ++stats_.host_copy_failures;
}

bool KVCache::drop_host_copy(const Pending::HostCopy& hc) {
  auto loc = index_->location(hc.node, hc.page);
  if (!loc.ok() || loc->host != hc.slot) return false;  // dropped since (the slot went with it)
  if (loc->on_device()) {  // settled before any device eviction: it is still there
    (void)index_->set_location(hc.node, hc.page, {loc->device, SlotId(), loc->lossy});
    host_->free_slot(hc.slot);
  }
  return true;
}

void KVCache::settle_host_copies() {
  for (auto& pd : pending_)
    if (pd->writes_host) settle(*pd);
}

// Whole chunks of the committed pages go to disk and to the remote store
// (write-behind); chunks already there are skipped. Under write_through the
// tails go too: the pages past the last whole chunk, of the prompt and of
// the whole sequence, each as a short chunk keyed by its last page
// (find() asks for them longest first). A session's next prompt extends its
// last prompt (an agent's client replays its own tool call) or its last
// sequence (a chat client sends the reply back); without its tail, a prefix
// found only below the host lost up to C - 1 pages to recompute.
void KVCache::store_down(const NsKey& ns, std::span<const PageHash> hashes, std::span<const PageId> pages,
                         uint32_t prompt_pages) {
  const uint32_t C = options_.chunk_pages, W = static_cast<uint32_t>(hashes.size());
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // [first, end) pages
  for (uint32_t lo = 0; lo + C <= W; lo += C) runs.emplace_back(lo, lo + C);
  if (options_.write_policy == WritePolicy::kWriteThrough && options_.store_tails)
    for (uint32_t end : {std::min(prompt_pages, W), W})
      if (end % C != 0 && (runs.empty() || runs.back().second != end)) runs.emplace_back(end / C * C, end);
  if (runs.empty()) return;
  note_disk_namespace(ns);
  for (Tier* tier : {static_cast<Tier*>(disk_.get()), remote_.get()}) {
    if (!tier || tier->degraded()) continue;
    auto pd = std::make_unique<Pending>();
    TransferBatch batch;
    size_t stored_pages = 0;
    for (auto [lo, hi] : runs) {
      const ChunkKey key{ns.seed, hashes[hi - 1]};
      if (options_.write_policy == WritePolicy::kSelective) {
        auto it = chunk_hits_.find(key.hash);
        if (it == chunk_hits_.end() || it->second < options_.selective_hits) continue;
      }
      if (tier->exists(key)) continue;
      StoreMove mv;
      mv.to = tier->kind();
      mv.key = key;
      mv.page_hashes.assign(hashes.begin() + lo, hashes.begin() + hi);
      for (uint32_t p = lo; p < hi; ++p) {
        mv.src.push_back(PageLoc::pool(pages[p]));
        pool_->ref(pages[p]);
        pd->refs.push_back(pages[p]);
      }
      stored_pages += hi - lo;
      batch.stores.push_back(std::move(mv));
    }
    if (batch.stores.empty()) continue;
    pd->bytes[static_cast<size_t>(tier->kind())] = stored_pages * options_.geometry.page_bytes();
    auto h = transfer_->submit(std::move(batch));
    if (!h.ok()) {
      for (PageId p : pd->refs) pool_->unref(p);
      continue;
    }
    pd->handle = std::move(h).value();
    pending_.push_back(std::move(pd));
  }
}

}  // namespace kvtier
