#include "sim/replay_cache.h"

#include "sim/metadata_tier.h"

namespace kvtier::sim_detail {

namespace {

// A page of a few bytes: the pool and host tier hold real pages, but no KV.
KVGeometry payload_less_geometry(uint32_t unit) {
  KVGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.head_dim = 1;
  g.dtype = DType::kF16;
  g.page_tokens = unit;
  return g;
}

// The cache needs a planner; its times are never used (the replay prices plans on its own model).
CostProfile placeholder_profile() {
  CostProfile p;
  p.gemm_flops_per_s = p.attn_flops_per_s = 1e12;
  for (TierLink& l : p.links) l = TierLink{0, 1e9};
  return p;
}

}  // namespace

Result<KVCacheOptions> replay_cache_options(const ReplayCacheOptions& o) {
  if (o.unit == 0 || o.chunk_pages == 0) return Status::InvalidArgument("replay cache: unit and chunk_pages must be > 0");
  if (o.device_pages < 2) return Status::InvalidArgument("replay cache: the device tier needs at least 2 pages");
  KVCacheOptions c;
  c.geometry = payload_less_geometry(o.unit);
  c.chunk_pages = o.chunk_pages;
  const size_t page_bytes = c.geometry.page_bytes();
  if (o.device_pages > UINT32_MAX || o.host_pages > UINT32_MAX)
    return Status::InvalidArgument("replay cache: at most 2^32-1 pages per tier");
  c.device_bytes = o.device_pages * page_bytes;
  c.host_bytes = o.host_pages * page_bytes;
  const ChunkGeometry cg{c.geometry, o.chunk_pages};
  if (o.disk_regions > 0) {
    KVTIER_ASSIGN_OR_RETURN(c.disk, MetadataTier::create({cg, TierKind::kDisk, o.disk_regions, o.disk_chunks_per_region,
                                                          o.disk_reclaim, o.clock}));
  }
  if (o.remote_chunks > 0) {
    KVTIER_ASSIGN_OR_RETURN(c.remote,
                            MetadataTier::create({cg, TierKind::kRemote, o.remote_chunks, 1, o.remote_reclaim, o.clock}));
  }
  c.write_policy = o.write_policy;
  c.selective_hits = o.selective_hits;
  c.eviction = o.eviction;
  c.hash = o.hash;
  c.max_retained_share = o.max_retained_share;
  c.clock = o.clock;
  c.transfer_workers = 0;  // inline
  c.profile = placeholder_profile();
  c.model_cost = ModelCost{.dense_flops_per_token = 1, .attn_flops_per_pair = 0, .num_layers = 1,
                           .kv_bytes_per_token = c.geometry.bytes_per_token()};
  return c;
}

Result<std::unique_ptr<ReplayCache>> ReplayCache::create(const ReplayCacheOptions& o) {
  auto clock = std::make_unique<ManualClock>();
  ReplayCacheOptions with_clock = o;
  with_clock.clock = clock.get();
  KVTIER_ASSIGN_OR_RETURN(KVCacheOptions co, replay_cache_options(with_clock));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<KVCache> c, KVCache::create(co));
  return std::unique_ptr<ReplayCache>(new ReplayCache(std::move(clock), std::move(c), o));
}

void ReplayCache::set_time_ms(double ms) {
  const auto t = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
  if (t <= now_) return;
  clock_->advance(t - now_);
  now_ = t;
}

Status ReplayCache::retain(const Namespace& ns, std::span<const TokenId> prompt, uint32_t whole_pages,
                           uint32_t seconds) {
  return cache_->retain(ns, prompt.first(size_t(whole_pages) * options_.unit), std::chrono::seconds(seconds)).status();
}

Status ReplayCache::prefetch(const Namespace& ns, std::span<const TokenId> prompt) {
  return cache_->prefetch(ns, prompt).status();
}

Status ReplayCache::request(const Namespace& ns, std::span<const TokenId> prompt, uint32_t whole_pages,
                            ReplayStep& out) {
  auto lease = cache_->acquire(ns, prompt, [&](const CacheLookup& L) {
    out.pages_by_tier = {};
    out.runs = L.runs;
    for (const CachedRun& r : L.runs) out.pages_by_tier[static_cast<size_t>(r.tier)] += r.pages;
    return cache_->planner().use_all(L.runs, L.prompt_tokens);
  });
  out.served = lease.ok();
  if (!lease.ok()) {
    if (lease.status().code() != StatusCode::kBusy) return lease.status();
    out.pages_by_tier = {};  // refused: the device cannot hold the prompt's pages
    out.runs.clear();
    return Status::Ok();
  }
  return cache_->commit(*lease, prompt.first(size_t(whole_pages) * options_.unit));
}

ReplayCacheStats ReplayCache::stats() const {
  const KVCacheStats s = cache_->stats();
  const size_t page_bytes = cache_->geometry().page_bytes();
  ReplayCacheStats r;
  for (int t = 0; t < kNumTiers; ++t) r.stored_pages[t] = s.bytes_stored_by_tier[t] / page_bytes;
  r.evictions[0] = s.evicted_pages_by_tier[0];
  r.evictions[1] = s.evicted_pages_by_tier[1];
  r.evictions[2] = s.disk.evictions;
  r.evictions[3] = s.remote.evictions;
  r.retain_hints = s.retain_hints;
  r.retain_expiries = s.retain_expiries;
  r.retain_yields = s.retain_yields;
  r.prefetched_pages = s.prefetched_pages;
  return r;
}

}  // namespace kvtier::sim_detail
