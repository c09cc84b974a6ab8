// PrefixIndex: the radix tree that tells, for any prompt, how many of its
// leading whole pages are cached and where each one lives (DESIGN §4).
//
// Edges are runs of whole pages (Options::page_tokens tokens each); a
// trailing partial page of a prompt is never matched or cached. Every page
// records its chained hash (DESIGN §4, when Options::store_hashes) and its
// residency: a device page (BlockPool PageId) and/or a host slot (HostTier
// SlotId). Lower tiers are not tracked here; they are asked by hash, which is
// why match() also returns the hashes of the unmatched whole pages.
//
// Thread safety: none. The index is owned by one control thread (the
// scheduler's, DESIGN §5); callers serialise every call. Workers never touch
// it: their completions are applied by the control thread.
//
// Ownership: the index stores ids only and never touches KV bytes or does
// I/O. The caller owns the pages behind the ids: insert() reports how many
// leading pages were already present (the caller frees its duplicates) and
// evict() returns exactly the residencies it dropped (the caller frees or
// demotes them).
//
// Invariants (checked by check_invariants(), which the tests call):
//  I1  Namespaces never share a node: each namespace seed has its own root.
//  I2  Every non-root node holds >= 1 page; sibling edges start with
//      different first pages; node tokens are page-aligned.
//  I3  Every cached page has at least one residency (device or host): a page
//      that loses its last residency leaves the tree, which only happens to
//      the last page of a childless node (tail trimming), so the cached pages
//      of a namespace are always prefix-closed (no holes).
//  I4  lock_ref(parent) >= lock_ref(child); pages of nodes with lock_ref > 0
//      are "protected", all others "evictable"; both counts, per tier, are
//      kept incrementally and always equal a full recount.
//  I5  Eviction candidates for tier T are exactly the unlocked nodes that
//      hold T pages, whose children hold no T pages (leaves go first), and
//      that can give one up now: a page that also has a copy in the other
//      tier, or a T-only last page of a childless node, or (device, with
//      Options::device_demotes) any device-only page, which moves to the
//      host. Candidates live in a per-tier ordered set keyed by the policy,
//      so evict() never scans locked pages.
//  I6  retain_ref(parent) >= retain_ref(child). Pages of retained nodes
//      keep their host residency (no host candidacy) and never leave the
//      tree: on the device they only give up a page with a host copy, or
//      demote one, so a retained path is never trimmed and its handle stays
//      valid until unretain() or reset().
//  I7  Node handles carry a generation: a handle to a removed node is
//      detected (FailedPrecondition), never aliased.
//
// Cost: match and insert walk one probe of a flat hash table plus one memcmp
// per node on the path; per page they copy 24 bytes of results and hash only
// pages that are not cached yet (insert_matched reuses a match's walk and
// hashes). Nothing is allocated per token: result vectors are caller-owned
// and reused; node payloads live in a huge-page arena (payload_arena.h).
// Metadata per cached page is page_tokens*4 (token ids) + 8 (residency) + 16
// (hash, optional) bytes plus per-node overhead; metadata-only users (the
// replay simulator) pass synthetic PageIds and may turn store_hashes off.
#pragma once

#include <cstdint>
#include <array>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "index/edge_table.h"
#include "index/payload_arena.h"
#include "index/eviction_policy.h"
#include "index/tree_snapshot.h"
#include "kvtier/namespace.h"
#include "kvtier/types.h"

namespace kvtier {

// Where one cached page lives. Either id may be invalid, never both once
// the page is in the index.
struct PageLocation {
  PageId device;
  SlotId host;
  // The page's KV is approximate: it came from a lossy chunk codec, or was
  // computed attending to such KV. Kept with the page wherever it moves
  // (demotion, promotion); the cache never stores it down as exact.
  bool lossy = false;

  bool on_device() const { return device.valid(); }
  bool on_host() const { return host.valid(); }
  bool any() const { return on_device() || on_host(); }
  bool in(TierKind t) const { return t == TierKind::kDevice ? on_device() : t == TierKind::kHost && on_host(); }
  bool operator==(const PageLocation&) const = default;
};

// A namespace as the index keys it: its chain seed (namespace_seed()), and
// the index's small id of its tenant (0: none), which the seed already
// determines; the id lets the index count and evict per tenant.
struct NsKey {
  PageHash seed;
  uint32_t tenant = 0;
  bool operator==(const NsKey&) const = default;
};
inline constexpr uint32_t kAnyTenant = UINT32_MAX;  // evict(): any tenant's pages

// Handle to a node: the deepest node of a matched or inserted path. Valid
// until that node is removed (eviction trims it away, or reset()); a stale
// handle is detected, not aliased.
class NodeHandle {
 public:
  constexpr NodeHandle() = default;
  bool valid() const { return index_ != UINT32_MAX; }
  bool operator==(const NodeHandle&) const = default;

 private:
  friend class PrefixIndex;
  constexpr NodeHandle(uint32_t index, uint32_t generation) : index_(index), generation_(generation) {}
  uint32_t index_ = UINT32_MAX;
  uint32_t generation_ = 0;
};

// Caller-owned; match() clears and refills it, reusing vector capacity.
struct MatchResult {
  uint32_t whole_pages = 0;    // whole pages in the prompt
  uint32_t matched_pages = 0;  // leading pages found in the index
  // Deepest node on the matched path (invalid when matched_pages == 0). It may
  // hold pages past the match (ending_at() cuts them off).
  NodeHandle deepest;
  std::vector<PageLocation> locations;  // matched_pages entries
  // whole_pages entries when store_hashes: [0, matched_pages) as stored,
  // then the chained hashes of the unmatched whole pages (so lower tiers can
  // be asked). Empty when store_hashes is off or the remainder was not asked for.
  std::vector<PageHash> hashes;
  // Where the match was made; the insert overload taking a MatchResult uses
  // them to resume at the deepest node instead of walking the tree again
  // (insert_matched).
  NsKey ns;
  uint64_t epoch = 0;

  size_t matched_tokens(uint32_t page_tokens) const { return size_t(matched_pages) * page_tokens; }
};

struct InsertResult {
  uint32_t already_present = 0;  // leading pages that were cached already (free the duplicates)
  uint32_t inserted = 0;         // pages added
  NodeHandle deepest;            // node holding the last page of the prompt (invalid for 0 whole pages)
};

struct EvictedPage {
  PageHash hash;          // zero when store_hashes is off
  PageLocation location;  // the residency before eviction (both ids, so a device page can be demoted)
  bool removed = false;   // the page left the index (it had no copy in the other tier)
};

// Caller-owned; evict() clears and refills it.
struct EvictResult {
  uint32_t freed = 0;  // residencies of the asked tier dropped (== pages.size())
  std::vector<EvictedPage> pages;
};

// A page's residency changed (kCleared: reset(), both tiers at once).
struct IndexEvent {
  KvEventKind kind = KvEventKind::kStored;
  TierKind tier = TierKind::kDevice;
  TierKind from = TierKind::kDevice;  // kMoved: the tier it left
  NsKey ns;
  PageHash hash;
  PageLocation location;
};

struct IndexStats {
  uint64_t namespaces = 0;
  uint64_t nodes = 0;  // non-root nodes
  uint64_t pages = 0;  // cached pages (any residency)
  uint64_t device_pages = 0;
  uint64_t host_pages = 0;
  uint64_t evictable_pages = 0;  // pages of unlocked nodes
  uint64_t protected_pages = 0;  // pages of locked nodes
  uint64_t evictable_device_pages = 0;
  uint64_t protected_device_pages = 0;
  uint64_t evictable_host_pages = 0;
  uint64_t protected_host_pages = 0;
  uint64_t retained_host_pages = 0;  // host pages of retained nodes (retain())
  uint64_t metadata_bytes = 0;  // every byte the index holds (estimate for std::set nodes)
};

class PrefixIndex {
 public:
  struct Options {
    uint32_t page_tokens = 16;
    HashAlgo hash_algo = HashAlgo::kXXH3_128;
    bool store_hashes = true;    // off: no hashing at all, hashes come back empty/zero
    bool record_events = false;  // on: events are queued for take_events()
    EvictionPolicyKind policy = EvictionPolicyKind::kLru;
    std::shared_ptr<const EvictionPolicy> custom_policy;  // overrides `policy` when set
    // Write-back: device evictions come with a DemoteFn, so a device-only
    // page of an inner node can go too (it moves to the host, no hole). Off,
    // only leaves' tails and pages with a host copy can (I5). A demotion that
    // fails keeps the page; evict() then moves on to the next candidate.
    bool device_demotes = false;
    Status validate() const;
  };

  static Result<std::unique_ptr<PrefixIndex>> create(const Options& options);
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  const Options& options() const { return opts_; }
  uint32_t page_tokens() const { return P_; }
  // The namespace's key; a tenant seen for the first time gets the next id.
  NsKey namespace_key(const Namespace& ns);
  // The id of `tenant` ("" is 0), registered if new.
  uint32_t tenant_id(const std::string& tenant);
  // Tenants by id (0 is "", no tenant) and their cached pages in `tier`
  // (kDevice or kHost), kept where residency is counted. O(1).
  uint32_t tenant_count() const { return uint32_t(tenant_names_.size()); }
  const std::string& tenant_name(uint32_t id) const { return tenant_names_[id]; }
  uint64_t tenant_pages(uint32_t tenant, TierKind tier) const {
    if (tenant >= tenant_pages_.size() || (tier != TierKind::kDevice && tier != TierKind::kHost)) return 0;
    return tenant_pages_[tenant][tier == TierKind::kDevice ? 0 : 1];
  }

  // Longest cached page-aligned prefix of `tokens` in `ns`. Marks the walked
  // nodes used (policy bookkeeping), otherwise read-only. With
  // hash_remainder, also hashes the unmatched whole pages.
  void match(NsKey ns, std::span<const TokenId> tokens, MatchResult& out, bool hash_remainder = true);

  // Caches the whole pages of `tokens`. `locations` has one entry per whole
  // page (each with >= 1 valid id); entries of pages already present are
  // ignored (their stored residency stays; the caller frees its duplicate).
  // `hashes`, when not empty, must be the chained hashes of all whole pages
  // (MatchResult::hashes after a match with the remainder); otherwise the
  // index hashes the new pages itself. `priority` feeds the priority policy.
  Result<InsertResult> insert(NsKey ns, std::span<const TokenId> tokens, std::span<const PageLocation> locations,
                              std::span<const PageHash> hashes = {}, int32_t priority = 0);

  // The same, resuming from `matched` — the match() of these very tokens in
  // `ns` — and using its hashes: no second walk or memcmp of the matched
  // part. When the tree changed structurally since that match (an insert,
  // evict or reset), it falls back to the full insert above.
  Result<InsertResult> insert_matched(NsKey ns, std::span<const TokenId> tokens,
                                      std::span<const PageLocation> locations, const MatchResult& matched,
                                      int32_t priority = 0);

  // Protect / release the whole path from the namespace root to `node`.
  Status lock(NodeHandle node);
  Status unlock(NodeHandle node);
  // The node whose last page is the path's `pages`-th (counted from the
  // root; `node` or one of its ancestors holds it, as a match's `deepest`
  // holds its last matched page). Where that node holds pages past it, it is
  // split there first, so that
  // locking or retaining what was matched leaves those pages to eviction: a
  // lookup that matched part of another prompt's node must not pin the rest,
  // or a request that needs room evicted waits on its own lock.
  Result<NodeHandle> ending_at(NodeHandle node, uint32_t pages);

  // Retention: keep the path from the namespace root to `node` on the host
  // (I6) while the device stays free to evict it (down to the host copy).
  // Counted like locks; the caller (KVCache's retention table) bounds how
  // much it retains and when it lets go.
  Status retain(NodeHandle node);
  Status unretain(NodeHandle node);

  // Residency of page `page_index` (counted from the namespace root) on the
  // path to `node`, and changing it in place (the facade records a
  // write-through host copy, or a host page loaded back to the device). A
  // page may not lose its last residency this way: use evict().
  Result<PageLocation> location(NodeHandle node, uint32_t page_index) const;
  Status set_location(NodeHandle node, uint32_t page_index, PageLocation location);

  // Drops up to n_pages residencies of `tier` (kDevice or kHost), leaves
  // first in policy order; never touches locked nodes. A page with a copy in
  // the other tier keeps that copy and its node; a page without leaves the
  // tree (tail pages of a leaf are trimmed so exactly n_pages can be freed).
  // Fewer than n_pages are freed only when no unlocked page can give up its
  // residency in `tier` now without leaving a hole (I3).
  //
  // Demotion (write-back): when evicting from the device, `demote` is asked
  // for a host slot for each device-only page about to be dropped; a valid
  // slot (whose bytes the hook has already filled) keeps the page cached on
  // the host instead. The hook must not call back into the index.
  using DemoteFn = std::function<SlotId(const PageLocation& location, const PageHash& hash)>;
  //
  // Spill (write-back below the host): when evicting from the host, a page
  // about to leave the index whose path depth (pages from the namespace
  // root, itself included) is a multiple of `run_pages` is offered to `fn`
  // with its namespace and the hashes and current locations of the last
  // run_pages pages of its path, itself last — one whole chunk, all still cached (eviction is
  // leaf-first and tail-first, so a chunk's last page leaves before the rest
  // of it). Needs store_hashes. The hook must not call back into the index.
  struct SpillHook {
    uint32_t run_pages;  // no initializer: a nested aggregate used as a default argument; value-initialize it
    std::function<void(NsKey ns, std::span<const PageHash> hashes, std::span<const PageLocation> locations)> fn;
  };
  // `tenant`: only that tenant's candidates, in the same order (a tenant
  // over its quota gives up its own cold pages first); kAnyTenant: all.
  Status evict(uint32_t n_pages, TierKind tier, EvictResult& out, const DemoteFn& demote = {},
               const SpillHook& spill = {}, uint32_t tenant = kAnyTenant);

  // The device's way out when evict() frees too few device pages: a
  // device-only page cannot go while host-only pages follow it on its path,
  // later in its node or below it (dropping it would leave a hole, I3), and
  // while it is not the tail of a childless node. Each eviction that leads
  // there is legal on its own (the host drops the copy of a page the device
  // holds, the device drops the copy of a later page the host holds), and
  // write-through reaches it. Such nodes (unlocked, unretained, their
  // children holding no device pages, not candidates) are taken in policy
  // order until they hold n_pages device pages, and what follows their last
  // device page is cut off: every page there leaves the index and comes back
  // in `out` with both its residencies, which the caller frees. The next
  // evict() then finds each such node a childless leaf ending in a
  // device-only page. Gives up host pages for device room, so a cache calls
  // it only after evict() fell short; `out.freed` counts the pages cut.
  Status cut_below_device_only(uint32_t n_pages, EvictResult& out, uint32_t tenant = kAnyTenant);

  // Drops everything (all namespaces). Outstanding handles become stale.
  void reset();

  // Cached pages resident in `tier` (kDevice or kHost; 0 for others). O(1).
  uint64_t tier_pages(TierKind tier) const {
    return tier == TierKind::kDevice ? tier_pages_[0] : tier == TierKind::kHost ? tier_pages_[1] : 0;
  }
  IndexStats stats() const;  // O(1): every count is kept incrementally
  // A copy of the tree for display, reduced to options.max_nodes records
  // (index/tree_snapshot.h). O(nodes); read-only (no recency bookkeeping).
  TreeSnapshot snapshot(const TreeSnapshotOptions& options) const;
  // Moves queued events (record_events) into `out` (appended).
  void take_events(std::vector<IndexEvent>& out);
  // Turns event recording on or off from now on (off drops what is queued).
  void set_record_events(bool on);
  bool record_events() const { return opts_.record_events; }
  // The hashes of every cached page resident on the device and on the host
  // (a page in both is in both), appended. O(pages); empty without store_hashes.
  void resident_hashes(std::vector<PageHash>& device, std::vector<PageHash>& host) const;
  // Full O(size) recount of every invariant above; for tests.
  Status check_invariants() const;

 private:
  struct Node;
  struct CandEntry {
    EvictKey key;
    uint32_t node;
    auto operator<=>(const CandEntry&) const = default;
  };

  explicit PrefixIndex(const Options& options);

  uint64_t page_key(const TokenId* page) const;
  uint32_t find_child(uint32_t parent, const TokenId* page) const;
  uint32_t common_pages(const Node& child, const TokenId* q, uint32_t avail) const;
  uint32_t alloc_node();
  void free_node(uint32_t id);
  uint32_t root_of(NsKey ns, bool create);
  uint32_t split(uint32_t id, uint32_t at);
  Status check_insert(std::span<const TokenId> tokens, std::span<const PageLocation> locations,
                      std::span<const PageHash> hashes) const;
  Result<InsertResult> finish_insert(uint32_t node, uint32_t pos, std::span<const TokenId> tokens,
                                     std::span<const PageLocation> locations, std::span<const PageHash> hashes,
                                     int32_t priority);
  void touch(Node& n, int32_t priority);
  size_t payload_bytes(uint32_t pages) const;
  // Gives `n` a fresh block of exactly `count` pages copied from `src` pages [first, first+count).
  void fill_payload(Node& n, const Node& src, uint32_t first, uint32_t count);
  void alloc_payload(Node& n, uint32_t cap);
  void release_payload(Node& n);
  void repack(Node& n, uint32_t first);  // pages [first, n) move to an exact block
  void adopt_payload(Node& n, const Node& from);
  bool wasteful(const Node& n) const;  // over half of its block is dead
  void compact();
  const Node* live(NodeHandle h) const;
  // lock/unlock (ref = lock_ref) and retain/unretain (retain_ref): `sign` on the path from h to its root.
  Status change_path_ref(NodeHandle h, uint32_t Node::*ref, int sign, const char* what);
  Status page_ref(NodeHandle h, uint32_t page_index, uint32_t& node, uint32_t& slot) const;

  // Residency bookkeeping (prefix_index_evict.cc).
  void count_page(Node& n, PageLocation loc, int sign);
  void tiers_changed(uint32_t id, const uint32_t old_tier_pages[2]);
  void refresh(uint32_t id);
  // Whether node n belongs in tier t's candidate set (I5): the one rule refresh() and check_invariants() apply.
  bool candidate(const Node& n, int t) const;
  void rekey(Node& n, uint32_t id);
  void evict_from(uint32_t id, int t, uint32_t& need, EvictResult& out, const DemoteFn& demote, const SpillHook& spill);
  // Offers the chunk ending at page i of node id to the spill hook (see evict()).
  void offer_spill(uint32_t id, uint32_t i, const SpillHook& spill);
  void remove_leaf(uint32_t id);
  // Queues the event of page `h` leaving tier t (or moving down, demoted).
  void record_left(const Node& n, int t, const PageHash& h, PageLocation loc, bool demoted);
  // Removes node `id`'s pages from `keep` on (and the node, for 0); it has no children.
  void drop_tail(uint32_t id, uint32_t keep, EvictResult& out);
  // Removes every node below `id`, then its pages past its last device page (cut_below_device_only).
  void cut_below(uint32_t id, EvictResult& out);
  void emit(KvEventKind kind, int t, const Node& n, uint32_t slot, PageLocation loc);
  // check_invariants() in parts (prefix_index_evict.cc).
  struct InvariantTally;
  Status check_node(uint32_t id, InvariantTally& t) const;
  Status check_links(const InvariantTally& t) const;
  Status check_edges() const;

  Options opts_;
  uint32_t P_;
  std::shared_ptr<const EvictionPolicy> policy_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  index_detail::EdgeTable edges_;
  index_detail::PayloadArena arena_;
  std::unordered_map<PageHash, uint32_t, PageHashHasher> roots_;
  std::set<CandEntry> cand_[2];  // eviction candidates per tier (device, host)
  std::vector<IndexEvent> events_;
  std::vector<PageHash> scratch_hashes_;
  uint64_t tick_ = 0;
  uint64_t epoch_ = 1;  // bumped by every structural change (resumable matches)
  uint64_t live_nodes_ = 0;  // non-root
  uint64_t pages_ = 0;
  uint64_t tier_pages_[2] = {};
  uint64_t protected_pages_ = 0;
  uint64_t protected_tier_[2] = {};
  uint64_t retained_host_ = 0;  // host pages of nodes with retain_ref > 0
  std::vector<std::string> tenant_names_{std::string()};       // by tenant id; 0: none
  std::unordered_map<std::string, uint32_t> tenant_ids_{{std::string(), 0u}};
  std::vector<std::array<uint64_t, 2>> tenant_pages_{{0, 0}};  // per tenant id: device, host
};

}  // namespace kvtier
