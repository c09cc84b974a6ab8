#include "cache/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <limits>

#include "common/page_hash.h"
#include "common/stats.h"

namespace kvtier {

namespace {

// The planner's view of a tier that stores entries with `codec`: the
// fraction of raw bytes its entries take, and a decode rate measured here
// on one layer of a full chunk (median of 5; well under a millisecond).
TierEncoding tier_encoding(KvCodec codec, const ChunkGeometry& g) {
  TierEncoding e;
  if (!kv_codec_lossy(codec)) return e;
  const size_t raw_bytes = g.layer_bytes(g.chunk_pages), stored_bytes = g.stored_layer_bytes(g.chunk_pages, codec);
  e.stored_fraction = double(stored_bytes) / double(raw_bytes);
  std::vector<std::byte> raw(raw_bytes), stored(stored_bytes);
  if (!kv_encode_layer(codec, g.kv, g.chunk_pages, raw, stored).ok()) return e;
  std::vector<double> seconds;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!kv_decode_layer(codec, g.kv, g.chunk_pages, stored, raw).ok()) return e;
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  e.decode_bytes_per_s = double(raw_bytes) / std::max(median(seconds), 1e-9);
  return e;
}

}  // namespace

Status KVCacheOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(CacheConfig::validate());
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  if (BlockPoolOptions::pages_for_bytes(geometry, pool_memory.empty() ? device_bytes : pool_memory.size()) < 2)
    return Status::InvalidArgument("KVCache: device capacity must hold at least 2 pages of " +
                                   std::to_string(geometry.page_bytes()) + " bytes");
  if (!pool_memory.empty() && device != MemoryBackend::kCpu)
    return Status::InvalidArgument("KVCache: pool_memory (caller-owned host memory) needs the cpu device");
  if (host_bytes != 0 && host_bytes < geometry.page_bytes())
    return Status::InvalidArgument("KVCache: host capacity must be 0 or hold at least one page");
  if (!disk_dir.empty() && disk_bytes < 2 * disk_region_bytes)
    return Status::InvalidArgument("KVCache: disk capacity must hold at least 2 regions of " +
                                   std::to_string(disk_region_bytes) + " bytes");
  if (disk && !disk_dir.empty()) return Status::InvalidArgument("KVCache: give disk_dir or a disk tier, not both");
  if (remote && !remote_url.empty()) return Status::InvalidArgument("KVCache: give remote_url or a remote tier, not both");
  struct Given {
    const Tier* tier;
    const char* name;
    KvCodec codec;
  };
  for (const Given& g : {Given{disk.get(), "disk", disk_codec}, Given{remote.get(), "remote", remote_codec}}) {
    if (!g.tier) continue;
    if (!(g.tier->geometry().kv == geometry && g.tier->geometry().chunk_pages == chunk_pages))
      return Status::InvalidArgument(std::string("KVCache: the ") + g.name + " tier's chunk geometry differs from the cache's");
    if (g.tier->geometry().codec != g.codec)
      return Status::InvalidArgument(std::string("KVCache: the ") + g.name + " tier writes codec " +
                                     std::string(kv_codec_name(g.tier->geometry().codec)) + ", " + g.name +
                                     "_codec says " + std::string(kv_codec_name(g.codec)));
  }
  if (!disk_dir.empty()) KVTIER_RETURN_IF_ERROR(kv_codec_check(disk_codec, geometry));
  if (host_bytes > 0) KVTIER_RETURN_IF_ERROR(kv_codec_check(host_codec, geometry));
  KVTIER_RETURN_IF_ERROR(profile.validate());
  return model_cost.validate();
}

// ---------------------------------------------------------------- cache ----

KVCache::KVCache(const KVCacheOptions& o)
    : options_(o), events_(std::make_shared<KvEventLog>(KvEventLog::kCapacity, KvEventLog::kLinger, o.clock)) {}

KVCache::~KVCache() {
  if (transfer_) (void)drain();  // no transfer engine: create() failed before any transfer
  transfer_.reset();  // joins workers before the tiers and pool go away
}

Result<std::unique_ptr<KVCache>> KVCache::create(const KVCacheOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  std::unique_ptr<KVCache> c(new KVCache(o));
  const ChunkGeometry cg{o.geometry, o.chunk_pages};

  PrefixIndex::Options io;
  io.page_tokens = o.geometry.page_tokens;
  io.hash_algo = o.hash;
  io.policy = o.eviction;
  io.device_demotes = o.write_policy == WritePolicy::kWriteBack && o.host_bytes > 0;  // evict_device's demote hook
  KVTIER_ASSIGN_OR_RETURN(c->index_, PrefixIndex::create(io));

  const size_t pool_bytes = o.pool_memory.empty() ? o.device_bytes : o.pool_memory.size();
  BlockPoolOptions po = BlockPoolOptions::on(o.device, o.geometry, BlockPoolOptions::pages_for_bytes(o.geometry, pool_bytes));
  po.external = o.pool_memory;
  KVTIER_ASSIGN_OR_RETURN(c->pool_, BlockPool::create(po));

  // The tiers the options name, from the one factory; injected ones as given.
  TierEnv env;
  env.disk_fs = o.disk_fs;
  env.host_memory = host_memory_options(o.device);  // DMA straight from the arena beside a GPU
  env.host_evicts_chunks = false;                   // slots are owned by the index's eviction
  env.disk_auth = o.disk_auth;
  env.clock = o.clock;
  KVTIER_ASSIGN_OR_RETURN(TierSet tiers, make_tiers(o, cg, env));
  c->host_ = std::move(tiers.host);
  c->disk_ = o.disk ? o.disk : std::move(tiers.disk);
  c->remote_ = o.remote ? o.remote : std::move(tiers.remote);
  for (Tier* t : {c->disk_.get(), c->remote_.get()})
    if (t) t->set_event_log(c->events_);

  TransferEngineOptions to;
  to.workers = o.transfer_workers;
  to.load_mode = o.load_mode;
  to.pool = c->pool_.get();
  to.host = c->host_.get();
  to.tiers[static_cast<size_t>(TierKind::kDisk)] = c->disk_.get();
  to.tiers[static_cast<size_t>(TierKind::kRemote)] = c->remote_.get();
  KVTIER_ASSIGN_OR_RETURN(c->transfer_, TransferEngine::create(to));

  // Tiers that are absent cannot be loaded from.
  CostProfile prof = o.profile;
  prof.link(TierKind::kDevice) = TierLink{0, std::numeric_limits<double>::infinity()};
  if (!c->host_) prof.link(TierKind::kHost) = {};
  if (!c->disk_) prof.link(TierKind::kDisk) = {};
  if (!c->remote_) prof.link(TierKind::kRemote) = {};
  ModelCost cost = o.model_cost;  // loads from a tier with a codec move fewer bytes, then decode
  cost.encoding[static_cast<size_t>(TierKind::kDisk)] = tier_encoding(o.disk_codec, cg);
  cost.encoding[static_cast<size_t>(TierKind::kRemote)] = tier_encoding(o.remote_codec, cg);
  cost.encoding[static_cast<size_t>(TierKind::kHost)] = tier_encoding(o.host_codec, cg);
  KVTIER_ASSIGN_OR_RETURN(
      Planner pl, Planner::create(PlannerOptions{.page_tokens = o.geometry.page_tokens, .layerwise = o.layerwise}, prof, cost));
  c->planner_ = std::make_unique<Planner>(std::move(pl));
  return c;
}

ChunkKey KVCache::chunk_key(const NsKey& ns, std::span<const PageHash> hashes, uint32_t chunk) const {
  return ChunkKey{ns.seed, hashes[size_t(chunk + 1) * options_.chunk_pages - 1]};
}

std::vector<ChunkKey> KVCache::chunk_keys(const Namespace& ns, std::span<const TokenId> tokens) const {
  return stored_keys(ns, tokens, false);
}

std::vector<ChunkKey> KVCache::stored_keys(const Namespace& ns, std::span<const TokenId> tokens, bool tail) const {
  const uint32_t P = options_.geometry.page_tokens;
  const size_t pages = tokens.empty() ? 0 : (tokens.size() - 1) / P;
  const NsKey key{namespace_seed(ns, options_.hash)};  // the seed alone names chunks
  std::vector<PageHash> hashes;
  hash_pages(options_.hash, key.seed, tokens.first(pages * P), P, hashes);
  std::vector<ChunkKey> keys;
  for (uint32_t c = 0; c < pages / options_.chunk_pages; ++c) keys.push_back(chunk_key(key, hashes, c));
  if (tail && pages % options_.chunk_pages != 0) keys.push_back(ChunkKey{key.seed, hashes.back()});
  return keys;
}

Result<CacheLookup> KVCache::lookup(const Namespace& ns, std::span<const TokenId> tokens) {
  KVTIER_ASSIGN_OR_RETURN(CacheLookup L, find(ns, tokens));
  if (options_.write_policy == WritePolicy::kSelective) {
    const uint32_t C = options_.chunk_pages;
    for (uint32_t c = 0; c < L.cached_pages() / C; ++c) ++chunk_hits_[chunk_key(L.ns, L.match.hashes, c).hash];
    if (chunk_hits_.size() > (size_t(1) << 20)) chunk_hits_.clear();  // bounded memory
  }
  ++stats_.lookups;
  stats_.lookup_tokens += tokens.size();
  return L;
}

Result<CacheLookup> KVCache::find(const Namespace& ns, std::span<const TokenId> tokens) {
  if (tokens.empty()) return Status::InvalidArgument("lookup: empty prompt");
  poll();
  const uint32_t P = options_.geometry.page_tokens, C = options_.chunk_pages;
  CacheLookup L;
  L.ns = index_->namespace_key(ns);
  L.prompt_tokens = tokens.size();
  L.lookup_pages = static_cast<uint32_t>((tokens.size() - 1) / P);
  index_->match(L.ns, tokens.first(size_t(L.lookup_pages) * P), L.match, /*hash_remainder=*/true);
  // Host pages being copied into the device (prefetch): wait, they are found there.
  if (!promotions_.empty() && await_promotions(L.ns)) return find(ns, tokens);
  const uint32_t m = L.match.matched_pages;
  L.index_pages = m;

  // Lower tiers hold whole chunks, asked by the hash of each chunk's last
  // page, and prompts' tails (store_down): after the whole chunks, a run of
  // fewer than C pages, asked longest first.
  const uint32_t total_chunks = L.lookup_pages / C, c0 = m / C;
  Tier* disk = disk_ && disk_->readable() ? disk_.get() : nullptr;
  Tier* remote = remote_ && remote_->readable() ? remote_.get() : nullptr;
  if (!disk && !remote) return with_runs(std::move(L));
  std::vector<PageHash> keys;
  for (uint32_t c = c0; c < total_chunks; ++c) keys.push_back(chunk_key(L.ns, L.match.hashes, c).hash);
  // Chunks already being read ahead: wait for them, they land in the index.
  if (!keys.empty() && await_prefetches(L.ns, keys)) return find(ns, tokens);
  const uint32_t dk = disk && !keys.empty() ? static_cast<uint32_t>(disk->exists_prefix(L.ns.seed, keys)) : 0;
  const uint32_t rk =
      remote && dk < keys.size() ? static_cast<uint32_t>(remote->exists_prefix(L.ns.seed, std::span(keys).subspan(dk))) : 0;
  const uint32_t base = (c0 + dk + rk) * C;
  keys = tail_keys(L, base);
  if (!keys.empty() && await_prefetches(L.ns, keys)) return find(ns, tokens);
  // The tail continues the lower tiers' run: on the disk only where no remote chunk comes before it.
  const size_t on_disk = disk && rk == 0 ? disk->exists_first(L.ns.seed, keys) : keys.size();
  const size_t on_remote = on_disk == keys.size() && remote ? remote->exists_first(L.ns.seed, keys) : keys.size();
  const size_t first = std::min(on_disk, on_remote);
  const uint32_t tail = first < keys.size() ? static_cast<uint32_t>(keys.size() - first) + (base > m ? 0 : m - base) : 0;
  // The lower tiers extend the match past the index: their first chunk may
  // start before the index's end, so the index part ends at that chunk.
  if (base + tail > m) {
    L.index_pages = c0 * C;
    L.disk_pages = dk * C + (on_disk < keys.size() ? tail : 0);
    L.remote_pages = rk * C + (on_disk < keys.size() ? 0 : tail);
  }
  return with_runs(std::move(L));
}

// The keys of the tail chunks (fewer than C pages, store_down) that could
// follow page `base` and reach past the index's match, longest first.
std::vector<PageHash> KVCache::tail_keys(const CacheLookup& L, uint32_t base) const {
  const uint32_t m = L.match.matched_pages;
  const uint32_t most = std::min(options_.chunk_pages - 1, L.lookup_pages - base);
  const uint32_t least = base > m ? 1 : m - base + 1;
  std::vector<PageHash> keys;
  for (uint32_t k = most; k >= least && k > 0; --k) keys.push_back(L.match.hashes[base + k - 1]);
  return keys;
}

CacheLookup KVCache::with_runs(CacheLookup&& L) const {
  for (uint32_t p = 0; p < L.index_pages; ++p) {
    const TierKind t = L.match.locations[p].on_device() ? TierKind::kDevice : TierKind::kHost;
    if (!L.runs.empty() && L.runs.back().tier == t) {
      ++L.runs.back().pages;
    } else {
      L.runs.push_back({t, 1});
    }
  }
  if (L.disk_pages) L.runs.push_back({TierKind::kDisk, L.disk_pages});
  if (L.remote_pages) L.runs.push_back({TierKind::kRemote, L.remote_pages});
  return L;
}

// Per cached page: the plan's action and the tier it is read from; the
// recompute range [b, x) in pages (b == M: none). Pages inside it are
// computed by the engine, so they are never shared.
struct KVCache::PageActions {
  std::vector<PlanAction> action;
  std::vector<TierKind> tier;
  uint32_t b = 0, x = 0;

  PageActions(const Plan& plan, uint32_t M) : action(M, PlanAction::kRecompute), tier(M, TierKind::kDevice), b(M), x(M) {
    for (const PlanSegment& s : plan.segments) {
      for (uint32_t p = s.first_page; p < s.first_page + s.pages && p < M; ++p) {
        action[p] = s.action;
        tier[p] = s.tier;
      }
      if (s.action == PlanAction::kRecompute) {
        b = std::min(b, s.first_page);
        x = s.first_page + s.pages;
      }
    }
    if (b == M) x = M;
    for (uint32_t p = b; p < x; ++p) action[p] = PlanAction::kRecompute;
  }
  uint32_t pages() const { return static_cast<uint32_t>(action.size()); }
  // The leading pages used in place.
  uint32_t in_place_prefix() const {
    uint32_t n = 0;
    while (n < pages() && action[n] == PlanAction::kInPlace) ++n;
    return n;
  }
};

// A plan that recomputes the middle of a chunk still loads that chunk whole,
// into scratch pages; with a prompt near the pool's size those could never
// all be had (apply() would answer Busy for ever, and a server's queue stall
// behind it): such a prompt loads every cached page instead, which needs only
// its own pages (a request's prompt and max_tokens fit the pool, api.cc).
Plan KVCache::plan(const CacheLookup& L) const {
  Plan p = planner_->plan(L.runs, L.prompt_tokens);
  if (p.recompute_pages == 0) return p;
  const uint32_t P = options_.geometry.page_tokens;
  const uint64_t pages = (L.prompt_tokens + P - 1) / P + scratch_pages(L, PageActions(p, L.cached_pages()));
  return pages <= pool_->num_pages() ? p : planner_->use_all(L.runs, L.prompt_tokens);
}

// What submit_loads() consumes: a chunk read from a lower tier lands whole,
// so each of its pages that is not loaded (used in place, or recomputed)
// needs a page to land in.
uint32_t KVCache::scratch_pages(const CacheLookup& L, const PageActions& a) const {
  const uint32_t C = options_.chunk_pages;
  uint32_t scratch = 0;
  for (uint32_t lo = L.index_pages; lo < a.pages(); lo += C) {  // whole chunks, then maybe a tail
    const uint32_t hi = std::min(lo + C, a.pages());
    uint32_t loads = 0;
    for (uint32_t p = lo; p < hi; ++p) loads += a.action[p] == PlanAction::kLoad;
    if (loads > 0) scratch += hi - lo - loads;
  }
  return scratch;
}

Result<CacheLease> KVCache::apply(CacheLookup&& L, const Plan& plan) {
  poll();
  const uint32_t P = options_.geometry.page_tokens;
  if (plan.cached_pages != L.cached_pages()) return Status::InvalidArgument("apply: the plan does not belong to this lookup");
  CacheLease held(this);
  CacheLeaseState& lease = *held.s_;
  lease.ns_ = L.ns;
  lease.plan_ = plan;
  const PageActions a(plan, L.cached_pages());
  lease.pages_.assign(static_cast<uint32_t>((L.prompt_tokens + P - 1) / P), PageId());
  Status st = pin(lease, L, a);
  if (st.ok()) {
    const auto shared = std::count_if(lease.pages_.begin(), lease.pages_.end(), [](PageId p) { return p.valid(); });
    st = allocate(lease, L, a, static_cast<uint32_t>(lease.pages_.size() - shared));
  }
  if (st.ok()) st = submit_loads(lease, L, a);
  if (!st.ok()) return st;  // `held` releases what was taken
  account(lease, L, a);
  end_used_holds(L);  // the request a hold was for has its lease (not merely looked: it may be Busy)
  lease.prompt_hashes_ = std::move(L.match.hashes);
  lease.prompt_hashes_.resize(std::min<size_t>(lease.prompt_hashes_.size(), L.lookup_pages));
  return held;
}

// The index path stays locked as far as the plan reads it (in place, or
// copied from the host), and every page used in place gets a reference.
// Matched pages past that (recomputed, or loaded with a lower tier's chunk)
// stay evictable: locked, device copies the lease does not use would hold
// pool pages it may need.
Status KVCache::pin(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a) {
  KVTIER_RETURN_IF_ERROR(check_current(L, a));
  uint32_t used = std::min(L.index_pages, a.pages());
  while (used > 0 && !(a.action[used - 1] == PlanAction::kInPlace ||
                       (a.action[used - 1] == PlanAction::kLoad && a.tier[used - 1] == TierKind::kHost)))
    --used;
  if (used > 0 && L.match.deepest.valid()) {
    KVTIER_ASSIGN_OR_RETURN(const NodeHandle read, index_->ending_at(L.match.deepest, used));
    KVTIER_RETURN_IF_ERROR(index_->lock(read));
    lease.locked_ = read;
  }
  for (uint32_t p = 0; p < a.pages(); ++p) {
    if (a.action[p] != PlanAction::kInPlace) continue;
    lease.pages_[p] = L.match.locations[p].device;
    pool_->ref(lease.pages_[p]);
  }
  return Status::Ok();
}

Status KVCache::check_current(const CacheLookup& L, const PageActions& a) const {
  for (uint32_t p = 0; p < std::min(L.index_pages, a.pages()); ++p) {
    const bool in_place = a.action[p] == PlanAction::kInPlace;
    if (!in_place && !(a.action[p] == PlanAction::kLoad && a.tier[p] == TierKind::kHost)) continue;
    const Result<PageLocation> now = index_->location(L.match.deepest, p);
    const PageLocation& then = L.match.locations[p];
    if (!now.ok() || (in_place ? now->device != then.device : now->host != then.host))
      return Status::Retry("apply: the lookup is stale (page " + std::to_string(p) +
                           " it found was evicted since); look the prompt up again");
  }
  return Status::Ok();
}

Result<CacheLease> KVCache::acquire(const Namespace& ns, std::span<const TokenId> tokens, const PlanChoice& choose) {
  KVTIER_ASSIGN_OR_RETURN(CacheLookup first, lookup(ns, tokens));
  return acquire(std::move(first), ns, tokens, choose);
}

Result<CacheLease> KVCache::acquire(CacheLookup&& first, const Namespace& ns, std::span<const TokenId> tokens,
                                    const PlanChoice& choose) {
  const auto planned = [&](CacheLookup&& look) {
    const Plan p = choose ? choose(look) : plan(look);
    return apply(std::move(look), p);
  };
  // apply() lands read-aheads first, which may evict what the new lookup found too: a few lookups,
  // then Busy (the caller's "later"), never the request's error.
  constexpr int kLookups = 4;
  Result<CacheLease> lease = planned(std::move(first));
  for (int n = 1; !lease.ok() && lease.status().code() == StatusCode::kRetry; ++n) {
    if (n == kLookups) return Status::Busy("acquire: " + std::to_string(n) + " lookups in a row went stale; " + lease.status().message());
    KVTIER_ASSIGN_OR_RETURN(CacheLookup again, find(ns, tokens));  // the same request's lookup: counted once
    lease = planned(std::move(again));
  }
  return lease;
}

// Every fresh page at once, and scratch pages for the parts of lower-tier
// chunks that are not loaded (scratch_pages: those chunks still land whole).
Status KVCache::allocate(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a, uint32_t fresh) {
  std::vector<PageId> got;
  KVTIER_RETURN_IF_ERROR(allocate_pages(fresh + scratch_pages(L, a), got));
  size_t gi = 0;
  for (PageId& pg : lease.pages_)
    if (!pg.valid()) pg = got[gi++];
  lease.scratch_.assign(got.begin() + gi, got.end());
  return Status::Ok();
}

// Host pages are page copies; disk/remote pages are whole-chunk loads. Loads
// before the recompute range go in the front handle, the rest in the back.
Status KVCache::submit_loads(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a) {
  const uint32_t C = options_.chunk_pages;
  TransferBatch front, back;
  bool host_loads = false;
  size_t si = 0;
  for (uint32_t p = 0; p < L.index_pages; ++p) {
    if (a.action[p] != PlanAction::kLoad) continue;
    host_loads = true;
    (p < a.b ? front : back).copies.push_back({PageLoc::host(L.match.locations[p].host), PageLoc::pool(lease.pages_[p])});
  }
  for (uint32_t lo = L.index_pages; lo < a.pages(); lo += C) {  // whole chunks, then maybe a tail
    const uint32_t hi = std::min(lo + C, a.pages());
    bool any = false;
    for (uint32_t p = lo; p < hi; ++p) any |= a.action[p] == PlanAction::kLoad;
    if (!any) continue;
    LoadMove mv;
    mv.from = a.tier[lo];
    mv.key = ChunkKey{L.ns.seed, L.match.hashes[hi - 1]};
    for (uint32_t p = lo; p < hi; ++p)
      mv.dst.push_back(PageLoc::pool(a.action[p] == PlanAction::kLoad ? lease.pages_[p] : lease.scratch_[si++]));
    (lo < a.b ? lease.front_load_pages_ : lease.back_load_pages_).push_back(lo);
    (lo < a.b ? front : back).loads.push_back(std::move(mv));
  }
  if (host_loads) await_host_writes();
  for (auto [batch, handle] : {std::pair{&front, &lease.front_}, std::pair{&back, &lease.back_}}) {
    if (batch->copies.empty() && batch->loads.empty()) continue;
    KVTIER_ASSIGN_OR_RETURN(*handle, transfer_->submit(std::move(*batch)));
  }
  return Status::Ok();
}

// Where the engine starts (a recompute range that reaches the end of the
// cached pages merges with the suffix into one prefill), which pages are
// lossy, and the lease's and the cache's counters.
void KVCache::account(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a) {
  const uint32_t P = options_.geometry.page_tokens, M = a.pages();
  lease.in_place_prefix_ = a.in_place_prefix();
  if (a.x == M) {
    lease.recompute_begin_ = lease.recompute_end_ = 0;
    lease.cached_end_ = a.b * P;
  } else {
    lease.recompute_begin_ = a.b * P;
    lease.recompute_end_ = a.x * P;
    lease.cached_end_ = M * P;
  }
  lease.lossy_.assign(M, false);  // index pages now; lossy loads once they have landed
  const bool lossy_host = kv_codec_lossy(options_.host_codec);
  for (uint32_t p = 0; p < L.index_pages; ++p)
    lease.lossy_[p] = a.action[p] != PlanAction::kRecompute &&
                      (L.match.locations[p].lossy || (a.action[p] == PlanAction::kLoad && a.tier[p] == TierKind::kHost && lossy_host));
  for (uint32_t p = 0; p < M; ++p) {
    const size_t t = static_cast<size_t>(a.tier[p]);
    ++stats_.plan_pages[static_cast<size_t>(a.action[p])];
    if (a.action[p] == PlanAction::kRecompute) {
      lease.report_.recomputed_cached_tokens += P;
    } else {
      lease.report_.reused_tokens_by_tier[t] += P;
      if (a.action[p] == PlanAction::kLoad) lease.report_.bytes_loaded_by_tier[t] += options_.geometry.page_bytes();
    }
  }
  for (int t = 0; t < kNumTiers; ++t) {
    stats_.reused_tokens_by_tier[t] += lease.report_.reused_tokens_by_tier[t];
    stats_.bytes_loaded_by_tier[t] += lease.report_.bytes_loaded_by_tier[t];
  }
  stats_.recomputed_cached_tokens += lease.report_.recomputed_cached_tokens;
}

Result<CacheLease> KVCache::fresh(const Namespace& ns, size_t tokens) {
  poll();
  CacheLease held(this);
  held.s_->ns_ = index_->namespace_key(ns);
  KVTIER_ASSIGN_OR_RETURN(const uint32_t pages, pages_for(tokens));
  KVTIER_RETURN_IF_ERROR(allocate_pages(pages, held.s_->pages_));
  return held;
}

Result<uint32_t> KVCache::pages_for(size_t tokens) const {
  const uint32_t P = options_.geometry.page_tokens;
  if (tokens > uint64_t(pool_->num_pages()) * P)  // before rounding up: (tokens + P - 1) could wrap
    return Status::NoSpace(std::to_string(tokens) + " tokens need more pages than the pool has (" +
                           std::to_string(pool_->num_pages()) + ")");
  return static_cast<uint32_t>((tokens + P - 1) / P);
}

Result<uint32_t> KVCache::fall_back(CacheLease& held) {
  if (!held.valid()) return 0u;
  CacheLeaseState& lease = *held.s_;
  lease.wait_all();
  ++stats_.load_failures;
  const uint32_t pos = lease.in_place_prefix_ * options_.geometry.page_tokens;
  // Only the pages shared in place are still reused; what apply() counted as
  // reused or loaded beyond them is recomputed now, in the lease's report and
  // in the cache-wide counters alike.
  LeaseReport& rep = lease.report_;
  for (int t = 0; t < kNumTiers; ++t) {
    const uint32_t kept = t == static_cast<int>(TierKind::kDevice) ? std::min(rep.reused_tokens_by_tier[t], pos) : 0;
    const uint32_t recomputed = rep.reused_tokens_by_tier[t] - kept;
    rep.reused_tokens_by_tier[t] = kept;
    rep.recomputed_cached_tokens += recomputed;
    stats_.reused_tokens_by_tier[t] -= recomputed;
    stats_.recomputed_cached_tokens += recomputed;
    stats_.bytes_loaded_by_tier[t] -= rep.bytes_loaded_by_tier[t];
    rep.bytes_loaded_by_tier[t] = 0;
  }
  lease.recompute_begin_ = lease.recompute_end_ = 0;
  lease.cached_end_ = pos;
  // Only the in-place pages are still used; what the failed loads brought does not count.
  for (size_t p = lease.in_place_prefix_; p < lease.lossy_.size(); ++p) lease.lossy_[p] = false;
  lease.codecs_folded_ = true;
  lease.recount_lossy();
  KVTIER_RETURN_IF_ERROR(own_pages_after_in_place_prefix(lease));
  return pos;
}

// A page used in place past the leading run (one whose host copy failed stays on the device between
// host-only pages, and the plan uses it there) is written by the recompute from the end of that run:
// the lease takes a page of its own for it, and the shared one stays as it is for its other readers.
Status KVCache::own_pages_after_in_place_prefix(CacheLeaseState& lease) {
  const PageActions a(lease.plan_, lease.plan_.cached_pages);
  std::vector<uint32_t> shared;
  for (uint32_t p = lease.in_place_prefix_; p < a.pages(); ++p)
    if (a.action[p] == PlanAction::kInPlace) shared.push_back(p);
  if (shared.empty()) return Status::Ok();
  std::vector<PageId> own;
  KVTIER_RETURN_IF_ERROR(allocate_pages(static_cast<uint32_t>(shared.size()), own));
  for (size_t i = 0; i < shared.size(); ++i) {
    pool_->unref(lease.pages_[shared[i]]);
    lease.pages_[shared[i]] = own[i];
  }
  return Status::Ok();
}

// Evicting a page the lease uses in place would free nothing (the lease holds it), so the path
// stays locked through the last one. The host copies it loaded need no protecting once they have
// landed, and device copies that others add to those pages later (a commit of the same prompt, a
// read-ahead) must stay evictable: locked for the sequence's life, they left one decoding alone
// short of pages that nothing could free, and it failed with Busy.
void KVCache::narrow_lock_to_in_place(CacheLeaseState& lease) {
  if (!lease.locked_.valid()) return;
  const PageActions a(lease.plan_, lease.plan_.cached_pages);
  uint32_t used = a.pages();
  while (used > 0 && a.action[used - 1] != PlanAction::kInPlace) --used;
  NodeHandle keep;
  if (used > 0) {
    const Result<NodeHandle> at = index_->ending_at(lease.locked_, used);
    if (!at.ok() || !index_->lock(*at).ok()) return;  // the wider lock stays
    keep = *at;
  }
  (void)index_->unlock(lease.locked_);
  lease.locked_ = keep;
}

Status KVCache::grow(CacheLease& held, size_t tokens) {
  if (!held.valid()) return Status::FailedPrecondition("grow: lease is not active");
  CacheLeaseState& lease = *held.s_;
  KVTIER_ASSIGN_OR_RETURN(const uint32_t need, pages_for(tokens));
  // Decoding: the prefill waited for every layer of its chunk loads, so what
  // only the loads needed goes before the sequence asks for more pages: the
  // pages that took the parts of chunks it did not load (a prompt near the
  // pool's size would otherwise find none) and the lock on the host pages it
  // read. Their transfers may still be retiring: that is waited for (a
  // moment), not left to a later grow (under TSan one in three first grows
  // found them not yet done and kept the pages).
  if (!lease.decoding_) {
    lease.wait_all();
    for (PageId p : lease.scratch_) pool_->unref(p);
    lease.scratch_.clear();
    narrow_lock_to_in_place(lease);
    lease.decoding_ = true;
  }
  if (lease.pages_.size() >= need) return Status::Ok();
  return allocate_pages(need - static_cast<uint32_t>(lease.pages_.size()), lease.pages_);
}

void KVCache::release(CacheLease& lease) { lease.s_.reset(); }

void KVCache::release_state(CacheLeaseState& lease) {
  if (!lease.cache_) return;
  lease.front_ = TransferHandle();  // waits for (or cancels) loads into our pages
  lease.back_ = TransferHandle();
  if (lease.locked_.valid()) (void)index_->unlock(lease.locked_);
  for (PageId p : lease.pages_)
    if (p.valid()) pool_->unref(p);  // a failed apply leaves unfilled slots
  for (PageId p : lease.scratch_) pool_->unref(p);
  lease.pages_.clear();
  lease.scratch_.clear();
  lease.locked_ = NodeHandle();
  lease.cache_ = nullptr;
}

}  // namespace kvtier
