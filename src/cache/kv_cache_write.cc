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
    pool_->ref(dev);
    pd->refs.push_back(dev);
  }
  pd->bytes[static_cast<size_t>(TierKind::kHost)] = batch.copies.size() * options_.geometry.page_bytes();
  auto h = transfer_->submit(std::move(batch));
  if (h.ok()) {
    pd->handle = std::move(h).value();
    pending_.push_back(std::move(pd));
  } else {
    for (PageId p : pd->refs) pool_->unref(p);
  }
}

// Whole chunks of the committed pages go to disk and to the remote store
// (write-behind); chunks already there are skipped.
void KVCache::store_down(const NsKey& ns, std::span<const PageHash> hashes, std::span<const PageId> pages) {
  const uint32_t C = options_.chunk_pages;
  const uint32_t chunks = static_cast<uint32_t>(hashes.size()) / C;
  if (chunks > 0) note_disk_namespace(ns);
  for (Tier* tier : {static_cast<Tier*>(disk_.get()), remote_.get()}) {
    if (!tier || tier->degraded() || chunks == 0) continue;
    auto pd = std::make_unique<Pending>();
    TransferBatch batch;
    for (uint32_t c = 0; c < chunks; ++c) {
      const ChunkKey key = chunk_key(ns, hashes, c);
      if (options_.write_policy == WritePolicy::kSelective) {
        auto it = chunk_hits_.find(key.hash);
        if (it == chunk_hits_.end() || it->second < options_.selective_hits) continue;
      }
      if (tier->exists_prefix(ns.seed, {&key.hash, 1}) == 1) continue;
      StoreMove mv;
      mv.to = tier->kind();
      mv.key = key;
      mv.page_hashes.assign(hashes.begin() + size_t(c) * C, hashes.begin() + size_t(c + 1) * C);
      for (uint32_t p = c * C; p < (c + 1) * C; ++p) {
        mv.src.push_back(PageLoc::pool(pages[p]));
        pool_->ref(pages[p]);
        pd->refs.push_back(pages[p]);
      }
      batch.stores.push_back(std::move(mv));
    }
    if (batch.stores.empty()) continue;
    pd->bytes[static_cast<size_t>(tier->kind())] = batch.stores.size() * C * options_.geometry.page_bytes();
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
