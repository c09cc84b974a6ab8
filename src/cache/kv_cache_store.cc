// KVCache: commit (the pages enter the index; the write policy, in
// kv_cache_write.cc, sends them down), eviction and demotion, and
// background-transfer bookkeeping.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "cache/kv_cache.h"
#include "cache/kv_cache_committed.h"
#include "common/page_hash.h"

namespace kvtier {

Status KVCache::commit(CacheLease& lease, std::span<const TokenId> tokens) {
  if (!lease.valid()) return Status::FailedPrecondition("commit: lease is not active");
  Status st = commit_state(*lease.s_, tokens);
  lease.s_.reset();  // commit_state released it, whatever the outcome
  enforce_quotas();
  return st;
}

Status KVCache::commit_state(CacheLeaseState& lease, std::span<const TokenId> tokens) {
  poll();
  const uint32_t P = options_.geometry.page_tokens;
  const uint32_t W = static_cast<uint32_t>(std::min<size_t>(tokens.size() / P, lease.pages_.size()));
  // The lock is released before the insert (an insert may split the locked node).
  if (lease.locked_.valid()) (void)index_->unlock(lease.locked_);
  lease.locked_ = NodeHandle();
  if (W == 0) {
    release_state(lease);
    return Status::Ok();
  }
  // The lookup hashed the prompt's pages already: only the pages past them are hashed here.
  std::vector<PageHash> hashes = std::move(lease.prompt_hashes_);
  if (hashes.size() > W) hashes.resize(W);
  const size_t known = hashes.size();
  hash_pages(options_.hash, known ? hashes.back() : lease.ns_.seed, tokens.subspan(known * P, (W - known) * P), P, hashes);
  // From the first lossy page on, every page is lossy: it is, or it was computed attending to one.
  lease.wait_all();
  lease.fold_load_codecs();
  const uint32_t lossy_from = std::min(lease.lossy_from(), W);
  std::vector<PageLocation> locs(W);
  for (uint32_t i = 0; i < W; ++i) locs[i] = PageLocation{lease.pages_[i], SlotId(), i >= lossy_from};
  auto ins = index_->insert(lease.ns_, tokens.first(size_t(W) * P), locs, hashes);
  if (!ins.ok()) {
    release_state(lease);
    return ins.status();
  }
  ++stats_.commits;

  Committed c = claim_pages(lease, *ins, locs);
  if (options_.write_policy != WritePolicy::kWriteBack) {
    copy_to_host(ins->deepest, c);
    // Lossy KV never goes down: entries there are labelled only by their own codec.
    store_down(lease.ns_, std::span(hashes).first(lossy_from), lease.pages_, static_cast<uint32_t>(known));
  }
  for (uint32_t i = 0; i < lease.pages_.size(); ++i)
    if (i >= W || !c.taken[i]) pool_->unref(lease.pages_[i]);
  for (PageId p : lease.scratch_) pool_->unref(p);
  lease.pages_.clear();
  lease.scratch_.clear();
  lease.front_ = TransferHandle();
  lease.back_ = TransferHandle();
  lease.cache_ = nullptr;
  return Status::Ok();
}

// Pages the index now holds through the lease's reference: the new ones, and
// present ones whose device copy had been evicted (promotion); each page's
// device copy and lossy mark as the index now records them.
KVCache::Committed KVCache::claim_pages(const CacheLeaseState& lease, const InsertResult& ins, std::span<const PageLocation> locs) {
  const uint32_t W = static_cast<uint32_t>(locs.size());
  Committed c;
  c.taken.assign(W, false);
  c.device.resize(W);
  c.lossy.resize(W);
  for (uint32_t i = 0; i < W; ++i) {
    c.device[i] = lease.pages_[i];
    c.lossy[i] = locs[i].lossy;
    if (i >= ins.already_present) {
      c.taken[i] = true;
      c.need_host.push_back(i);
      continue;
    }
    auto loc = index_->location(ins.deepest, i);
    if (!loc.ok()) continue;
    c.lossy[i] = loc->lossy;
    if (loc->on_device()) {
      c.device[i] = loc->device;
    } else {
      c.lossy[i] = loc->lossy || locs[i].lossy;  // promotion: our device copy joins the host one
      c.taken[i] = index_->set_location(ins.deepest, i, {lease.pages_[i], loc->host, c.lossy[i]}).ok();
    }
    if (!loc->on_host() && (c.taken[i] || loc->on_device())) c.need_host.push_back(i);
  }
  return c;
}

Status KVCache::allocate_pages(uint32_t n, std::vector<PageId>& out) {
  // More than the whole pool can never be had: fail before evicting anything.
  while (n <= pool_->num_pages() && pool_->free_pages() < n) {
    const uint64_t before = stats_.evicted_pages_by_tier[0];
    KVTIER_RETURN_IF_ERROR(evict_device(n - pool_->free_pages()));
    if (stats_.evicted_pages_by_tier[0] == before) {
      // Pages held by background stores come back once those finish; pages being
      // promoted (prefetch) become evictable once theirs land.
      if (pending_.empty() && promotions_.empty()) {
        if (!cut_for_device(n - pool_->free_pages())) break;
        continue;
      }
      (void)(pending_.empty() ? promotions_.front()->handle : pending_.front()->handle).wait_all();
      poll();
    }
  }
  Status st = pool_->allocate(n, out);
  if (!st.ok())
    return Status::Busy("device KV pool exhausted by running sequences (" + std::to_string(n) + " pages asked, " +
                        std::to_string(pool_->free_pages()) + " free of " + std::to_string(pool_->num_pages()) + ")");
  return st;
}

bool KVCache::cut_for_device(uint32_t n) {
  if (!index_->cut_below_device_only(n, evict_scratch_).ok() || evict_scratch_.pages.empty()) return false;
  // No transfer is pending (allocate_pages comes here only then): the slots are free to go.
  for (const EvictedPage& e : evict_scratch_.pages) {
    if (e.location.on_device()) pool_->unref(e.location.device), ++stats_.evicted_pages_by_tier[0];
    if (e.location.on_host()) host_->free_slot(e.location.host), ++stats_.evicted_pages_by_tier[1];
  }
  ++stats_.cut_subtrees;
  return true;
}

// Device eviction. With write-back, a page without a host copy is first
// copied to a host slot (demotion) so it stays cached one tier down.
Status KVCache::evict_device(uint32_t n, bool move_down, uint32_t tenant) {
  settle_host_copies();  // a failed copy's slot must not outlive the page's device copy
  PrefixIndex::DemoteFn demote;
  if (move_down && options_.write_policy == WritePolicy::kWriteBack && host_) {
    // Room first (host eviction cannot run inside the device eviction), then
    // each dropped device page is copied into a free slot.
    // A tenant over its device quota makes that room from its own host pages, never another's
    // (without room a page is dropped instead of demoted).
    const uint32_t want = std::min(n, host_->num_slots());
    if (host_->free_slots() < want) {
      (void)evict_host(want - host_->free_slots(), true, tenant);
      // Slots that feed a spill come back once it is done.
      for (auto& pd : pending_)
        if (pd->reads_host) (void)pd->handle.wait_all();
      poll();
    }
    // Raw slots: a lossy host codec is refused with write_back (KVCacheOptions::validate).
    demote = [this](const PageLocation& loc, const PageHash&) {
      auto slot = host_->allocate_slot();
      if (!slot.ok()) return SlotId();
      const ByteCopy c{host_->slot(*slot), pool_->page(loc.device), options_.geometry.page_bytes()};
      if (!pool_->memory().copy({&c, 1}).ok()) {
        host_->free_slot(*slot);
        return SlotId();  // the page is dropped instead of demoted
      }
      ++stats_.demoted_pages;
      stats_.bytes_stored_by_tier[static_cast<size_t>(TierKind::kHost)] += options_.geometry.page_bytes();
      return *slot;
    };
  }
  KVTIER_RETURN_IF_ERROR(index_->evict(n, TierKind::kDevice, evict_scratch_, demote, {}, tenant));
  for (const EvictedPage& e : evict_scratch_.pages) {
    pool_->unref(e.location.device);
    ++stats_.evicted_pages_by_tier[0];
  }
  return Status::Ok();
}

uint32_t KVCache::allocate_slots(uint32_t n, std::vector<SlotId>& out) {
  if (!host_) return 0;
  if (host_->free_slots() < n && !evict_host(n - host_->free_slots()).ok()) return 0;
  const uint32_t k = std::min(n, host_->free_slots());
  return host_->allocate_slots(k, out).ok() ? k : 0;
}

// Host eviction. With write-back, each whole chunk whose last page leaves
// the index is first stored to disk and the remote store (spilled) from
// where its pages are; the slots it reads are freed once that store is done.
Status KVCache::evict_host(uint32_t n, bool move_down, uint32_t tenant) {
  if (!host_) return Status::Ok();
  // A slot about to be freed may still be receiving a copy or feeding a spill.
  for (auto& pd : pending_)
    if (pd->writes_host || pd->reads_host) (void)pd->handle.wait_all();
  poll();
  auto spill = std::make_unique<Pending>();
  spill->reads_host = true;
  TransferBatch batch;
  std::vector<Tier*> below;
  for (Tier* t : {static_cast<Tier*>(disk_.get()), remote_.get()})
    if (t && !t->degraded()) below.push_back(t);
  PrefixIndex::SpillHook hook{};
  if (move_down && options_.write_policy == WritePolicy::kWriteBack && !below.empty()) {
    hook.run_pages = options_.chunk_pages;
    hook.fn = [&](NsKey ns, std::span<const PageHash> hashes, std::span<const PageLocation> locs) {
      if (std::any_of(locs.begin(), locs.end(), [](const PageLocation& l) { return l.lossy; })) return;  // never stored as exact
      note_disk_namespace(ns);
      for (Tier* tier : below) {
        if (tier->exists_prefix(ns.seed, hashes.last(1)) == 1) continue;
        StoreMove mv;
        mv.to = tier->kind();
        mv.key = ChunkKey{ns.seed, hashes.back()};
        mv.page_hashes.assign(hashes.begin(), hashes.end());
        for (const PageLocation& l : locs) {
          if (l.on_device()) {
            mv.src.push_back(PageLoc::pool(l.device));
            pool_->ref(l.device);
            spill->refs.push_back(l.device);
          } else {
            mv.src.push_back(PageLoc::host(l.host));
          }
        }
        spill->bytes[static_cast<size_t>(tier->kind())] += size_t(options_.chunk_pages) * options_.geometry.page_bytes();
        batch.stores.push_back(std::move(mv));
      }
    };
  }
  KVTIER_RETURN_IF_ERROR(index_->evict(n, TierKind::kHost, evict_scratch_, {}, hook, tenant));
  // Slots read by the spill batch stay allocated until it is done.
  std::unordered_set<uint32_t> read_slots;
  for (const StoreMove& mv : batch.stores)
    for (const PageLoc& l : mv.src)
      if (l.tier == TierKind::kHost) read_slots.insert(l.index);
  for (const EvictedPage& e : evict_scratch_.pages) {
    if (read_slots.count(e.location.host.value()))
      spill->slots.push_back(e.location.host);
    else
      host_->free_slot(e.location.host);
    ++stats_.evicted_pages_by_tier[1];
  }
  if (batch.stores.empty()) return Status::Ok();
  stats_.spilled_chunks += batch.stores.size();
  auto h = transfer_->submit(std::move(batch));
  if (!h.ok()) {  // nothing was queued: release at once
    for (PageId p : spill->refs) pool_->unref(p);
    for (SlotId s : spill->slots) host_->free_slot(s);
    return Status::Ok();
  }
  spill->handle = std::move(h).value();
  pending_.push_back(std::move(spill));
  return Status::Ok();
}

Status KVCache::evict(TierKind tier, uint32_t pages) {
  poll();
  if (tier == TierKind::kDevice) return evict_device(pages);
  if (tier == TierKind::kHost) return evict_host(pages);
  return Status::InvalidArgument("evict: only the device and host tiers are evicted by the cache");
}

namespace {

// Applies `finish` to each transfer of `q` that is done (they finish in any
// order) and drops it. The done ones leave `q` before any is finished: a
// finish may poll() again (a hold's host copies make room on the host, and
// evict_host polls), and that inner call must not erase under this loop.
template <typename T, typename Fn>
void finish_done(std::deque<std::unique_ptr<T>>& q, Fn&& finish) {
  std::vector<std::unique_ptr<T>> done;
  for (auto it = q.begin(); it != q.end();) {
    if (!(*it)->handle.done()) {
      ++it;
      continue;
    }
    done.push_back(std::move(*it));
    it = q.erase(it);
  }
  for (auto& t : done) finish(*t);
}

}  // namespace

void KVCache::poll() {
  (void)transfer_->poll_completions();  // results are read through the handles
  expire_retained();
  const uint64_t landed = stats_.prefetched_pages + stats_.promoted_pages;
  finish_done(prefetches_, [this](Prefetch& pf) { finish_prefetch(pf); });  // may start promotions
  finish_done(promotions_, [this](Promotion& pr) { finish_promotion(pr); });
  // Read-ahead and promoted pages count against their tenant's quotas as they land, as a commit's do.
  if (!quotas_.empty() && stats_.prefetched_pages + stats_.promoted_pages != landed) enforce_quotas();
  while (!pending_.empty() && pending_.front()->handle.done()) {
    Pending& pd = *pending_.front();
    settle(pd);
    for (int t = 0; t < kNumTiers; ++t) stats_.bytes_stored_by_tier[t] += pd.bytes[t];
    for (PageId p : pd.refs) pool_->unref(p);
    for (SlotId s : pd.slots) host_->free_slot(s);
    pending_.pop_front();
  }
  publish_events();
}

void KVCache::publish_events() {
  const bool on = events_->active();
  if (index_->record_events() != on) index_->set_record_events(on);
  if (!on) return;
  index_events_.clear();
  index_->take_events(index_events_);
  std::vector<KvEvent> out;
  out.reserve(index_events_.size());
  for (const IndexEvent& e : index_events_) {
    if (e.kind == KvEventKind::kCleared) {  // the index holds both tiers' pages
      out.push_back(KvEvent{KvEventKind::kCleared, TierKind::kDevice, TierKind::kDevice, KvEventUnit::kPage, {}});
      out.push_back(KvEvent{KvEventKind::kCleared, TierKind::kHost, TierKind::kHost, KvEventUnit::kPage, {}});
      continue;
    }
    out.push_back(KvEvent{e.kind, e.tier, e.from, KvEventUnit::kPage, e.hash});
  }
  events_->append(out);
}

KvSnapshot KVCache::event_snapshot() {
  publish_events();
  KvSnapshot s;
  // The number first: a change after it is in the snapshot, in the events after it, or both, which a
  // reader applying them to sets of hashes takes the same way.
  s.seq = events_->seq();
  index_->resident_hashes(s.device, s.host);
  if (disk_) s.disk = disk_->held_chunks();
  return s;
}

void KVCache::await_host_writes() {
  for (auto& pd : pending_)
    if (pd->writes_host) (void)pd->handle.wait_all();
}

Status KVCache::drain() {
  for (auto& pd : pending_) (void)pd->handle.wait_all();
  for (auto& pf : prefetches_) (void)pf->handle.wait_all();
  poll();  // a finished prefetch may start promotions
  for (auto& pr : promotions_) (void)pr->handle.wait_all();
  poll();
  Status st;
  if (disk_) st = disk_->flush();
  return st;
}

Status KVCache::flush() {
  const Status drained = drain();  // a failed disk is reported after the pages are dropped all the same
  expire_retained(/*all=*/true);  // flushing drops what hints kept too
  // Device pages of inner nodes whose children are host-only go once those
  // children have: alternate until a round frees nothing (locked pages stay).
  auto residencies = [&] { return index_->tier_pages(TierKind::kDevice) + index_->tier_pages(TierKind::kHost); };
  for (uint64_t before = UINT64_MAX; residencies() != before;) {
    before = residencies();
    KVTIER_RETURN_IF_ERROR(evict_device(std::numeric_limits<uint32_t>::max(), /*move_down=*/false));
    KVTIER_RETURN_IF_ERROR(evict_host(std::numeric_limits<uint32_t>::max(), /*move_down=*/false));
  }
  chunk_hits_.clear();
  return drained;
}

KVCacheStats KVCache::stats() const {
  KVCacheStats s = stats_;
  s.retain_active = retained_.size();
  s.tenants = tenant_stats();
  s.index = index_->stats();
  s.pool = pool_->stats();
  if (host_) {
    s.host_slots = host_->num_slots();
    s.host_free_slots = host_->free_slots();
  }
  if (disk_) {
    s.disk_present = true;
    s.disk = disk_->stats();
    s.disk_degraded = disk_->degraded();
  }
  if (remote_) {
    s.remote_present = true;
    s.remote = remote_->stats();
    s.remote_degraded = remote_->degraded();
  }
  return s;
}

}  // namespace kvtier
