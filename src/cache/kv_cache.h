// KVCache: the facade that ties the prefix index, the block pool, the host,
// disk and remote tiers, the transfer engine and the planner into one cache
// of KV pages that outlives requests (DESIGN §2).
//
// One request goes through it as:
//   lookup(ns, prompt)   → where every cached page of the prompt lives
//   plan(lookup)         → the planner's load-or-recompute decision (pure)
//   apply(lookup, plan)  → a CacheLease: the sequence's page table (shared
//                          device pages, fresh pages being loaded, fresh pages
//                          to compute) and per-layer readiness of the loads
//   ... the engine prefills, waiting on lease.wait_layer(l) before layer l ...
//   grow(lease, n)       → more pages as decoding goes on
//   commit(lease, tokens)→ the sequence's full pages enter the index; the write
//                          policy copies them down (host, disk) in the background;
//                          the lease's pages and locks are released.
// Dropping a lease without commit releases it without caching anything.
//
// Ownership of pages: the index holds one BlockPool reference on every device
// page it records and owns the host slots it records; a lease holds one
// reference on every page of its table. Eviction drops the index's
// reference, so a page in use by a running sequence is never freed under it.
// A request never fails because the cache is full: eviction demotes or drops
// cached pages; only pages held by running sequences are unavailable.
//
// Thread safety: owned by one control thread (DESIGN §5); not internally
// locked. Transfer workers run inside; their completions are applied by the
// control thread on the next call.
#pragma once

#include <array>
#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/cache_config.h"
#include "cache/tenant_quota.h"
#include "common/clock.h"
#include "index/prefix_index.h"
#include "memory/block_pool.h"
#include "planner/planner.h"
#include "tiers/disk_tier.h"
#include "tiers/host_tier.h"
#include "transfer/transfer_engine.h"

namespace kvtier {

// The library's options: the operator-facing CacheConfig (cache/cache_config.h:
// capacities, codecs, policies; one row each in its option table) and what
// only a program can give — the geometry, memory, injected tiers and costs.
struct KVCacheOptions : CacheConfig {
  KVGeometry geometry;
  // Where the pool's pages live: kCpu (host DRAM) or kCuda (GPU memory; needs
  // a CUDA build and device). With kCuda the host tier is pinned memory and
  // every move touching the pool goes through DeviceMemory::copy.
  MemoryBackend device = MemoryBackend::kCpu;
  // Caller-owned host memory for the pool (kCpu only; memory/external_memory.h):
  // the pool holds as many pages as fit in it and device_bytes is ignored.
  // Not owned; must outlive the cache. Empty: the pool allocates its own.
  std::span<std::byte> pool_memory;
  FileSystem* disk_fs = nullptr;             // the disk tier's storage seam (tests: fault injection); not owned
  // A ready disk key (DiskTierOptions::auth); null: disk_authenticate and
  // tier_secret_file decide (tiers/tier_factory.h).
  std::shared_ptr<const ChunkAuth> disk_auth;
  // A disk chunk store built by the caller, instead of the DiskTier that
  // disk_dir makes (same ChunkGeometry, codec disk_codec; e.g. the replay's
  // payload-less MetadataTier). At most one of disk_dir and disk.
  std::shared_ptr<Tier> disk;
  // A remote chunk store built by the caller (same ChunkGeometry, codec
  // remote_codec), instead of the one remote_url makes. At most one of them.
  std::shared_ptr<Tier> remote;
  CostProfile profile;                       // link speeds and compute rates for the planner
  ModelCost model_cost;
  LoadMode load_mode = LoadMode::kLayerMajor;  // how chunk loads are issued (docs/PERF.md, bench ttft)
  // Retention hints expire by it (tests and the replay: a ManualClock). Not owned; must outlive the cache.
  const Clock* clock = &Clock::system();

  Status validate() const;
};

// Where the cached pages of one prompt live. Produced by lookup(), consumed by apply().
struct CacheLookup {
  NsKey ns;
  size_t prompt_tokens = 0;
  uint32_t lookup_pages = 0;        // whole pages considered (the last prompt token is always computed)
  MatchResult match;                // device/host pages from the index (may be cut to a chunk boundary)
  uint32_t index_pages = 0;         // leading pages served by the index
  uint32_t disk_pages = 0;          // following pages present on disk (whole chunks, then maybe a tail)
  uint32_t remote_pages = 0;        // following pages present remotely (whole chunks, then maybe a tail)
  std::vector<CachedRun> runs;      // the above as runs, in prompt order

  uint32_t cached_pages() const { return index_pages + disk_pages + remote_pages; }
};

// Counters of one request, for usage reporting.
struct LeaseReport {
  uint32_t reused_tokens_by_tier[kNumTiers] = {};  // in place (device) or loaded (others)
  uint32_t recomputed_cached_tokens = 0;
  uint64_t bytes_loaded_by_tier[kNumTiers] = {};
  uint64_t load_wait_ns = 0;  // time the caller spent blocked waiting for loads (wait_layer / wait_all)
  // Reused tokens whose KV is approximate (a lossy entry, or a page marked
  // lossy); known once the loads have finished (CacheLease::report()).
  uint32_t lossy_tokens = 0;
  uint32_t reused_tokens() const {
    uint32_t n = 0;
    for (uint32_t t : reused_tokens_by_tier) n += t;
    return n;
  }
};

class KVCache;

// Everything a CacheLease holds, behind its one pointer (so moves are the
// pointer's and no field can be left behind). Its members are the cache's to
// manage; only KVCache and CacheLease touch them.
struct CacheLeaseState {
  KVCache* cache_ = nullptr;  // null once released or committed
  NsKey ns_;
  std::vector<PageId> pages_;
  NodeHandle locked_;
  TransferHandle front_, back_;
  std::vector<PageId> scratch_;  // pages loaded only to complete a chunk; freed on release
  uint32_t recompute_begin_ = 0, recompute_end_ = 0, cached_end_ = 0;
  uint32_t in_place_prefix_ = 0;  // leading pages shared in place (never written by the engine)
  // Per cached page: its KV came from a lossy source. Loads are folded in by
  // fold_load_codecs() when they have finished.
  std::vector<bool> lossy_;
  std::vector<uint32_t> front_load_pages_, back_load_pages_;  // first page of each chunk load, per handle
  std::vector<PageHash> prompt_hashes_;  // chained hashes of the lookup's whole pages (commit reuses them)
  bool codecs_folded_ = false;
  bool decoding_ = false;  // grow() has released what only the loads needed
  bool layerwise_ = true;  // KVCacheOptions::layerwise
  LeaseReport report_;
  Plan plan_;

  Status wait_front_layer(LayerIdx l);
  Status wait_layer(LayerIdx l);
  bool loads_done() const { return front_.done() && back_.done(); }
  void wait_all();
  void fold_load_codecs();
  // report_.lossy_tokens from lossy_, with the cache-wide counter kept in step.
  void recount_lossy();
  // First page whose KV is lossy or computed from lossy KV (all later pages are too); UINT32_MAX: none.
  uint32_t lossy_from() const;
};

// The pages and pending loads of one running sequence. Move-only; owned by
// the control thread. Destroying it (or KVCache::release) waits for its loads
// and drops its references. A default-constructed or moved-from lease is
// invalid and holds nothing.
class CacheLease {
 public:
  CacheLease() = default;
  bool valid() const { return s_ && s_->cache_ != nullptr; }
  // Page table: page i holds positions [i*P, (i+1)*P).
  const std::vector<PageId>& pages() const { return state().pages_; }
  // Positions [0, recompute_begin) are in place or loaded before the front
  // recompute may read them; [recompute_begin, recompute_end) must be
  // computed first (their KV is not cached or not worth loading); positions
  // [recompute_end, cached_end) are loaded; the engine computes from cached_end.
  uint32_t recompute_begin() const { return state().recompute_begin_; }
  uint32_t recompute_end() const { return state().recompute_end_; }
  uint32_t cached_end() const { return state().cached_end_; }
  // Blocks until layer l of the loads that precede recompute_begin is in place.
  // Without layer-wise loading (KVCacheOptions::layerwise = false) both waits
  // block until every layer of those loads is in place, so prefill computes
  // nothing before the loads have finished.
  Status wait_front_layer(LayerIdx l) { return s_ ? s_->wait_front_layer(l) : Status::Ok(); }
  // Blocks until layer l of every load is in place.
  Status wait_layer(LayerIdx l) { return s_ ? s_->wait_layer(l) : Status::Ok(); }
  // True when every load (and copy) of the lease has finished; does not block.
  bool loads_done() const { return state().loads_done(); }
  // Waits for every load (used before recomputing after a failed load).
  void wait_all() {
    if (s_) s_->wait_all();
  }
  // The lease's counters. Lossy loads are folded in once every load has
  // finished, so read it after prefill (as usage reporting does).
  const LeaseReport& report();
  const Plan& plan() const { return state().plan_; }
  const NsKey& ns() const { return state().ns_; }

 private:
  friend class KVCache;
  // Releases the lease to its cache (if still held), then frees the state.
  static void drop(CacheLeaseState* s) noexcept;
  struct Release {
    void operator()(CacheLeaseState* s) const noexcept { drop(s); }
  };
  explicit CacheLease(KVCache* cache);
  const CacheLeaseState& state() const;
  std::unique_ptr<CacheLeaseState, Release> s_;
};

struct KVCacheStats {
  uint64_t lookups = 0;
  uint64_t lookup_tokens = 0;
  uint64_t reused_tokens_by_tier[kNumTiers] = {};
  uint64_t recomputed_cached_tokens = 0;
  uint64_t bytes_loaded_by_tier[kNumTiers] = {};
  uint64_t bytes_stored_by_tier[kNumTiers] = {};
  uint64_t evicted_pages_by_tier[kNumTiers] = {};
  uint64_t demoted_pages = 0;  // device → host on eviction (write-back)
  uint64_t spilled_chunks = 0;  // chunk stores to disk/remote on host eviction (write-back)
  uint64_t load_failures = 0;  // loads that failed (corrupt, I/O); the request recomputed
  uint64_t host_copy_failures = 0;  // write-through host copies that failed: the page stays on the device only
  uint64_t lossy_tokens = 0;   // reused tokens whose KV came from lossy entries (LeaseReport::lossy_tokens)
  uint64_t prefetched_pages = 0;       // pages read ahead into the host tier and indexed there
  uint64_t prefetch_failures = 0;      // prefetched chunks dropped (failed or corrupt load)
  uint64_t prefetch_waits = 0;         // lookups that waited for a prefetch in flight
  uint64_t promoted_pages = 0;         // prefetched host pages copied on into free device pages
  uint64_t retain_hints = 0;           // retain() calls that retained something
  uint64_t retain_expiries = 0;        // hints that ran to their end
  uint64_t retain_yields = 0;          // hints let go early: over max_retained_share, the oldest yields
  uint64_t retain_used = 0;            // holds that ended at the request they were for (HoldEnd::kFirstUse)
  uint64_t retain_active = 0;          // hints in force now
  uint64_t plan_pages[3] = {};  // by PlanAction: in place, load, recompute
  uint64_t commits = 0;
  uint64_t cut_subtrees = 0;  // times host pages were dropped to free device pages stuck above them (cut_for_device)
  uint64_t quota_evicted_pages = 0;    // pages a tenant over its quota gave up (set_tenant_quotas), every tier
  // Each tenant's cached bytes on the device and the host (the index's
  // count) and on disk (its entries' bytes in the log, for the namespaces
  // this process has written), with its quota ("" is requests without a
  // tenant), for tenants with bytes or a quota.
  struct Tenant {
    std::string name;
    uint64_t device_bytes = 0, host_bytes = 0, disk_bytes = 0;
    TenantQuota quota;
  };
  std::vector<Tenant> tenants;
  IndexStats index;
  BlockPoolStats pool;
  uint32_t host_slots = 0, host_free_slots = 0;
  TierStats disk, remote;
  bool disk_present = false, remote_present = false;
  bool disk_degraded = false, remote_degraded = false;
};

class KVCache {
 public:
  static Result<std::unique_ptr<KVCache>> create(const KVCacheOptions& options);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  // Where the cached prefix of `tokens` lives, across every tier. Read-only
  // apart from recency bookkeeping. The last token is never cached (it must
  // be computed to produce logits), so at most (tokens.size()-1)/P pages match.
  Result<CacheLookup> lookup(const Namespace& ns, std::span<const TokenId> tokens);
  // Starts reading the disk and remote part of the cached prefix of
  // `tokens` into host slots in the background (a server calls this when a
  // request is queued). When the reads land — seen by any later call — those
  // pages join the index as host pages, so the prompt's own lookup finds
  // them one tier up; a chunk that fails to load or verify is dropped and
  // counted, never inserted. A lookup whose chunks are still being
  // prefetched waits for them instead of reading them again. Uses at most
  // half of the host tier's slots; reads nothing without a host tier.
  // Then, where device pages are free, the prompt's host-only pages (those
  // cached there now, and the read-ahead ones once they land) are copied on
  // into free device pages, at most half of those free and never by
  // evicting, so the request finds them in place; a lookup in the
  // namespace waits for those copies. Promoted pages are ordinary cached
  // device pages (evictable, counted against a tenant's device quota from
  // its next commit on).
  // With `hold` > 0 the prefix is also held like a retention hint
  // (retain()) for `hold`: what is cached now from this call, what the
  // read-ahead brings onto the host from when it lands. A read-ahead timed by
  // the client's deadline so keeps what it lifted until the request comes,
  // where plain LRU would let the traffic in between evict it again. With
  // HoldEnd::kFirstUse the hold also ends at the first lease (apply(),
  // acquire()) of a prompt that extends the held prefix: the request it was
  // for has started, and a hold kept past it would only make the next
  // read-ahead's hold yield. A lookup alone, or a lease refused (Busy), leaves it.
  // The hold covers the first `hold_tokens` of `tokens` (a message's
  // cache_control mark: the prefix through it). A hold that could not be
  // granted once landed (over the retention cap, or its tenant's host quota,
  // by itself) is not made, and makes no other hint yield: the call is then a
  // plain read-ahead.
  // Returns the prompt's cached pages (any tier), how many of them are
  // being read ahead now, and how many are being copied into the device now.
  struct PrefetchStart {
    uint32_t cached_pages = 0;
    uint32_t loading_pages = 0;
    uint32_t promoting_pages = 0;
  };
  enum class HoldEnd { kTime, kFirstUse };
  Result<PrefetchStart> prefetch(const Namespace& ns, std::span<const TokenId> tokens,
                                 Clock::duration hold = Clock::duration::zero(), HoldEnd end = HoldEnd::kTime,
                                 size_t hold_tokens = SIZE_MAX);
  // The leading whole pages of `tokens` (all but its last token) cached on
  // the device or host now: the index alone, no waiting, no counting.
  uint32_t cached_prefix_pages(const Namespace& ns, std::span<const TokenId> tokens);
  // Retention hint: keeps the cached whole pages of `tokens` in `ns` (the
  // prefix cached now) for `ttl`. On the host: they may leave the device
  // (down to their host copy) but are never evicted from the host or
  // dropped from the index while the hint holds (PrefixIndex::retain). On
  // the disk: the regions holding the prefix's whole chunks are skipped by
  // reclaim (Tier::retain). Each tier holds at most max_retained_share of
  // itself: past it the earliest hint yields (a hint never starves
  // unhinted traffic). A second hint on the same prefix extends it. Returns
  // the tokens retained in either tier (0: nothing cached, no host or disk
  // tier, or over the cap alone). Expiry is read from options().clock (the
  // disk's from TierEnv::clock, the same one), at every entry point.
  // With HoldEnd::kFirstUse the host's hold also ends early, as prefetch's.
  Result<uint32_t> retain(const Namespace& ns, std::span<const TokenId> tokens, Clock::duration ttl,
                          HoldEnd end = HoldEnd::kTime);
  // The content-addressed keys of the whole chunks of `tokens` under `ns`,
  // in prompt order: the keys the disk and remote tiers store them under.
  // Pure; at most (tokens.size()-1)/P pages count, as in lookup().
  std::vector<ChunkKey> chunk_keys(const Namespace& ns, std::span<const TokenId> tokens) const;
  // The planner's decision for a lookup, or, where its scratch pages would
  // not fit the device pool beside the prompt's, the plan that loads every
  // cached page (Planner::use_all). Pure.
  Plan plan(const CacheLookup& lookup) const;
  // Pins the pages the plan uses, allocates pages for every prompt position,
  // and submits loads. On failure nothing is held. Retry when a page the plan
  // reads from the index (in place, or from the host) is no longer where the
  // lookup found it: evicted since, its page or slot perhaps another
  // sequence's now (a lookup kept while other calls ran, or a prefetch landing
  // in apply's own poll). Look the prompt up again then (acquire() does).
  Result<CacheLease> apply(CacheLookup&& lookup, const Plan& plan);
  // A lookup's plan, chosen by the caller (acquire() asks it of each lookup it applies).
  using PlanChoice = std::function<Plan(const CacheLookup&)>;
  // lookup(), a plan (`choose`'s, else plan()) and apply(); where apply()
  // finds the lookup stale, the prompt is looked up again (not counted
  // again in the lookup statistics) and that lookup planned and applied, up
  // to four lookups in all; Busy (try later) if every one went stale.
  Result<CacheLease> acquire(const Namespace& ns, std::span<const TokenId> tokens, const PlanChoice& choose = {});
  // The same from `first`, a lookup the caller made of `tokens` under `ns`.
  Result<CacheLease> acquire(CacheLookup&& first, const Namespace& ns, std::span<const TokenId> tokens,
                             const PlanChoice& choose = {});
  // A lease for a sequence that uses no cache at all (the no-cache baseline).
  Result<CacheLease> fresh(const Namespace& ns, size_t tokens);
  // After a failed load: waits for the lease's transfers, counts the failure,
  // and returns the position from which the engine must recompute (the end of
  // the pages shared in place). The lease's report and the cache's counters
  // are corrected: tokens past that position count as recomputed, not
  // reused, and no bytes count as loaded for the lease. Pages the plan used
  // in place past that position become the lease's own (the engine writes
  // them; others share the originals); Busy, as any allocation the running
  // sequences exhaust, when the pool has none (the shared pages stay as they are).
  Result<uint32_t> fall_back(CacheLease& lease);
  // Makes the lease's page table cover at least `tokens` positions.
  Status grow(CacheLease& lease, size_t tokens);
  // Caches the whole pages of `tokens` (their KV is in the lease's pages) and releases the lease.
  // `tokens` begins with the prompt the lease was looked up for (its pages' hashes are reused).
  Status commit(CacheLease& lease, std::span<const TokenId> tokens);
  // Releases without caching.
  void release(CacheLease& lease);

  // Per-tenant budgets (the server reads them from its keys file; a new set
  // replaces the old). After every commit, a tenant over its device or host
  // budget gives up its own cached pages there, coldest first in the
  // eviction policy's order, until it is within it; other tenants' pages in
  // that tier are never taken for it (a page leaving the device still moves
  // down as any eviction does). Pages in use by running sequences stay (they
  // count, and go once released). On disk, a tenant over its budget gives up
  // its oldest entries (Tier::trim_namespaces): the log frees their space
  // when it reclaims their region, so the budget bounds what a tenant holds,
  // not how fast its writes age the log. The disk count covers the
  // namespaces written since start (a tenant's older entries, trimmed ones
  // included, count again from its first write after a restart, and are
  // trimmed again).
  void set_tenant_quotas(std::map<std::string, TenantQuota> quotas);
  // One tenant's bytes per tier and quota, as stats() lists them ("": no tenant).
  KVCacheStats::Tenant tenant_usage(const std::string& tenant);

  // Evicts up to `pages` cached pages from the device or host tier, leaves
  // first in policy order (what the cache does itself under pressure; exposed
  // for operators and tests).
  Status evict(TierKind tier, uint32_t pages);
  // Drops every cached page on the device and host tiers (leases keep their
  // pages; disk and remote entries stay until their own capacity reclaims them).
  // Returns the disk tier's flush error, if any, after dropping them.
  Status flush();
  // Applies finished background transfers; called by every entry point too.
  void poll();
  // Waits for every background store (tests, shutdown, `flush`).
  Status drain();

  KVCacheStats stats() const;

  // What the cache gains and loses, for a listener that follows it (GET
  // /v1/cache/events; tiers/kv_events.h): the index's page events and the
  // disk and remote tiers' chunk events, recorded only while the log has a
  // listener. The log is thread-safe; publish_events() and event_snapshot()
  // are the control thread's.
  const std::shared_ptr<KvEventLog>& events() const { return events_; }
  // Moves the index's events into the log (every entry point does too).
  void publish_events();
  // Everything the cache holds on the device, host and disk now, with the log's number then.
  KvSnapshot event_snapshot();

  const KVCacheOptions& options() const { return options_; }
  const KVGeometry& geometry() const { return options_.geometry; }
  BlockPool& pool() { return *pool_; }
  PrefixIndex& index() { return *index_; }
  Tier* disk() { return disk_.get(); }
  HostTier* host() { return host_.get(); }
  const Planner& planner() const { return *planner_; }

 private:
  // A background transfer and the page references that keep its sources alive.
  struct Pending {
    TransferHandle handle;
    std::vector<PageId> refs;        // pool pages read by the batch
    std::vector<SlotId> slots;       // host slots freed once the batch is done (spilled pages)
    bool writes_host = false;        // writes host slots (must land before a slot is reused or read)
    bool reads_host = false;         // reads host slots (must finish before a slot is freed)
    uint64_t bytes[kNumTiers] = {};
    // Write-through host copies, in the batch's order: where the index points at each slot, so
    // that a copy that failed leaves the index (settle_host_copies).
    struct HostCopy {
      NodeHandle node;
      uint32_t page = 0;
      SlotId slot;
    };
    std::vector<HostCopy> host_copies;
    bool settled = false;
  };
  // One retention hint in force (retain()).
  struct Retention {
    NodeHandle node;
    Clock::time_point until;
    HoldEnd end = HoldEnd::kTime;
    uint32_t pages = 0;  // the held prefix's pages, and the chained hash of its last one:
    PageHash last;       // a lookup whose prompt has it there extends the prefix (kFirstUse)
    uint32_t tenant = 0;  // whose host quota its pages count against
  };
  // retain() on the host tier: the hint's node in the retention table; the pages retained (0: none).
  uint32_t retain_on_host(const NsKey& ns, std::span<const TokenId> tokens, Clock::time_point until,
                          HoldEnd end = HoldEnd::kTime);
  // Lets go of the kFirstUse holds whose prefix the lookup `L` extends.
  void end_used_holds(const CacheLookup& L);
  // Host copies for the device-only pages of a matched path about to be retained (how many were asked for).
  uint32_t copy_path_to_host(const MatchResult& m);
  // The host pages hints may hold (max_retained_share of the host tier), and
  // letting go of hints until they hold no more than `cap`: the oldest of the
  // tenant whose hints hold the most pages first.
  uint64_t retained_cap() const;
  void yield_retained(uint64_t cap);
  size_t next_to_yield() const;  // the index in retained_ of the hint that yields next
  // Lets go of hints whose time is up (all of them with `all`), oldest first.
  void expire_retained(bool all = false);
  void let_go(size_t i);
  // Chunks being read ahead into host slots (prefetch()).
  struct Prefetch {
    NsKey ns;
    std::vector<TokenId> tokens;      // the prompt's whole pages up to the last prefetched one
    std::vector<PageHash> hashes;     // their chained hashes
    uint32_t first_page = 0;          // pages before it were indexed when the prefetch began
    std::vector<SlotId> slots;        // one per page from first_page on
    std::vector<PageHash> chunk_keys; // what a lookup waits on
    std::vector<TierKind> chunk_from; // where each chunk is read from
    Clock::duration hold{};           // held on the host this long once landed (prefetch's `hold`)
    size_t hold_tokens = SIZE_MAX;    // of `tokens`, the leading ones held
    HoldEnd hold_end = HoldEnd::kTime;
    TransferHandle handle;
  };
  // Host-only pages of a prompt being copied into free device pages (promote()).
  struct Promotion {
    NsKey ns;
    NodeHandle node;            // the prompt's deepest cached node, locked while the copies run
    std::vector<uint32_t> at;   // the pages' positions in the prompt
    std::vector<PageId> pages;  // their new device pages (one reference each, ours until indexed)
    TransferHandle handle;
  };
  friend class CacheLease;
  friend struct CacheLeaseState;  // its lossy-token counts feed stats_
  explicit KVCache(const KVCacheOptions& o);
  // release() and commit() on the lease's state (CacheLease::Release calls the first).
  void release_state(CacheLeaseState& lease);
  Status commit_state(CacheLeaseState& lease, std::span<const TokenId> tokens);
  // apply() in steps: what the plan does with each cached page, then pin
  // what is shared, allocate what is fresh, submit the loads, count.
  struct PageActions;
  Status pin(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a);
  // fall_back's last step: private pages for the pages used in place past the leading run.
  Status own_pages_after_in_place_prefix(CacheLeaseState& lease);
  // Once the lease's loads have landed: its index lock narrowed to the pages it uses in place.
  void narrow_lock_to_in_place(CacheLeaseState& lease);
  // Retry unless every index page the plan reads is where the lookup found it.
  Status check_current(const CacheLookup& L, const PageActions& a) const;
  // The pages `tokens` positions take; NoSpace past the pool (a huge count wrapped to few pages).
  Result<uint32_t> pages_for(size_t tokens) const;
  Status allocate(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a, uint32_t fresh);
  // Scratch pages for the pages of lower-tier chunks that are not loaded (each chunk lands whole).
  uint32_t scratch_pages(const CacheLookup& L, const PageActions& a) const;
  Status submit_loads(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a);
  void account(CacheLeaseState& lease, const CacheLookup& L, const PageActions& a);
  // lookup() without its bookkeeping (lookup counters, selective hit counts).
  Result<CacheLookup> find(const Namespace& ns, std::span<const TokenId> tokens);
  // The keys of the tail chunks that could follow page `base` past the index's match, longest first.
  std::vector<PageHash> tail_keys(const CacheLookup& L, uint32_t base) const;
  // chunk_keys(), and with `tail` the key of the prompt's tail chunk after them (store_down).
  std::vector<ChunkKey> stored_keys(const Namespace& ns, std::span<const TokenId> tokens, bool tail) const;
  // L with its runs (device/host from the index, then disk, then remote).
  CacheLookup with_runs(CacheLookup&& L) const;
  // Waits for the prefetches reading any of `keys`; true when it waited.
  bool await_prefetches(const NsKey& ns, std::span<const PageHash> keys);
  // Indexes what a finished prefetch read (or frees its slots), then promotes it.
  void finish_prefetch(Prefetch& pf);
  uint32_t read_ahead_pages(const CacheLookup& L) const;
  bool read_ahead_hold_fits(const CacheLookup& L, size_t hold_tokens) const;
  // Starts copying the host-only cached pages of `tokens` (whole pages) into
  // free device pages, at most half of those free; returns how many.
  uint32_t promote(const NsKey& ns, std::span<const TokenId> tokens);
  // Gives each page of a finished promotion to the index as its device copy (or frees it).
  void finish_promotion(Promotion& pr);
  // Waits for the background writes into host slots: a slot about to be read (a load, a
  // promotion) may still be receiving a write-through copy.
  void await_host_writes();
  // Waits for the write-through host copies and takes every one that failed out of the index (the
  // page keeps its device copy; the slot is freed): its slot holds stale bytes. Before a device
  // eviction, which could leave such a slot as the page's only copy.
  void settle_host_copies();
  void settle(Pending& pd);
  // A host copy that never landed: its slot leaves the index and is freed, the page keeping its
  // device copy. False when the index no longer points at the slot (dropped since).
  bool drop_host_copy(const Pending::HostCopy& hc);
  // Waits for the promotions in `ns`; true when there were any.
  bool await_promotions(const NsKey& ns);
  Status allocate_pages(uint32_t n, std::vector<PageId>& out);
  // Up to n host slots (evicting cached host pages as needed); returns how many.
  uint32_t allocate_slots(uint32_t n, std::vector<SlotId>& out);
  // `move_down`: apply the write policy's demotion/spill (false when flushing).
  // `tenant`: only that tenant's pages (PrefixIndex::evict).
  Status evict_device(uint32_t n, bool move_down = true, uint32_t tenant = kAnyTenant);
  // When evict_device() can free nothing more: drops the host pages below
  // device-only pages that could not go (PrefixIndex::cut_below_device_only),
  // so that the next evict_device() can. False: nothing to cut.
  bool cut_for_device(uint32_t n);
  Status evict_host(uint32_t n, bool move_down = true, uint32_t tenant = kAnyTenant);
  // Brings every tenant over a quota back within it (kv_cache_quota.cc).
  void enforce_quotas();
  // enforce_quotas() on the host: the tenant's oldest hints yield while it holds more than `allowed_pages`.
  void yield_hints_over(uint32_t tenant, uint64_t allowed_pages);
  // The tenant's host quota in pages (UINT64_MAX: none).
  uint64_t host_quota_pages(uint32_t tenant) const;
  // Records that `ns` writes to disk: a tenant's disk bytes are those of its namespaces there.
  void note_disk_namespace(const NsKey& ns);
  // The bytes of a tenant's namespaces on disk (0 without a disk tier).
  uint64_t tenant_disk_bytes(uint32_t tenant) const;
  std::vector<KVCacheStats::Tenant> tenant_stats() const;
  KVCacheStats::Tenant tenant_record(uint32_t id) const;
  // commit() in steps (kv_cache_store.cc), and the write policy
  // (kv_cache_write.cc): host copies of the committed pages, then whole
  // chunks down to disk and remote.
  struct Committed;
  Committed claim_pages(const CacheLeaseState& lease, const InsertResult& ins, std::span<const PageLocation> locs);
  void copy_to_host(const NodeHandle& deepest, Committed& c);
  void store_down(const NsKey& ns, std::span<const PageHash> hashes, std::span<const PageId> pages,
                  uint32_t prompt_pages);
  ChunkKey chunk_key(const NsKey& ns, std::span<const PageHash> hashes, uint32_t chunk) const;

  KVCacheOptions options_;
  std::shared_ptr<KvEventLog> events_;  // lingers by options_.clock
  std::vector<IndexEvent> index_events_;  // publish_events()' scratch
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<HostTier> host_;
  std::shared_ptr<Tier> disk_;  // a DiskTier (disk_dir) or the caller's (KVCacheOptions::disk)
  std::shared_ptr<Tier> remote_;
  std::unique_ptr<TransferEngine> transfer_;
  std::unique_ptr<Planner> planner_;
  std::deque<std::unique_ptr<Pending>> pending_;
  std::deque<std::unique_ptr<Prefetch>> prefetches_;
  std::deque<std::unique_ptr<Promotion>> promotions_;
  std::deque<Retention> retained_;  // in the order given or last extended: the front yields first
  std::map<std::string, TenantQuota> quotas_;  // set_tenant_quotas
  // Per tenant id: the namespace seeds it has written to disk, and the set's size when last pruned.
  struct DiskSeeds {
    std::vector<PageHash> seeds;
    size_t pruned_at = 0;
  };
  std::map<uint32_t, DiskSeeds> disk_seeds_;
  Clock::time_point next_expiry_ = Clock::time_point::max();  // no hint ends before it
  std::unordered_map<PageHash, uint32_t, PageHashHasher> chunk_hits_;  // selective policy
  EvictResult evict_scratch_;
  MatchResult peek_;  // cached_prefix_pages()' scratch
  KVCacheStats stats_;
};

}  // namespace kvtier
