// PrefixIndex: tree walking, insertion, locking and in-place residency
// changes. Eviction, candidate bookkeeping and the invariant check live in
// prefix_index_evict.cc.
#include "index/prefix_index.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/page_hash.h"
#include "index/prefix_index_node.h"

namespace kvtier {

Status PrefixIndex::Options::validate() const {
  if (page_tokens == 0 || page_tokens > 1u << 20)
    return Status::InvalidArgument("page_tokens must be in [1, 2^20], got " + std::to_string(page_tokens));
  return Status::Ok();
}

Result<std::unique_ptr<PrefixIndex>> PrefixIndex::create(const Options& options) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  return std::unique_ptr<PrefixIndex>(new PrefixIndex(options));
}

PrefixIndex::PrefixIndex(const Options& options)
    : opts_(options),
      P_(options.page_tokens),
      policy_(options.custom_policy ? options.custom_policy : make_eviction_policy(options.policy)) {}

PrefixIndex::~PrefixIndex() = default;

uint64_t PrefixIndex::page_key(const TokenId* page) const { return checksum64(page, size_t(P_) * sizeof(TokenId)); }

uint32_t PrefixIndex::find_child(uint32_t parent, const TokenId* page) const {
  const size_t bytes = size_t(P_) * sizeof(TokenId);
  return edges_.find(parent, page_key(page),
                     [&](uint32_t c) { return std::memcmp(nodes_[c].tokens, page, bytes) == 0; });
}

// Pages of `child` equal to the query pages at q (the first already known
// equal), looking at most `avail` query pages far.
uint32_t PrefixIndex::common_pages(const Node& child, const TokenId* q, uint32_t avail) const {
  const uint32_t limit = std::min(child.n_pages(), avail);
  if (limit <= 1) return limit;
  const TokenId* a = child.tokens;
  const size_t page_bytes = size_t(P_) * sizeof(TokenId);
  // One memcmp over the whole run is the common case; only a mismatch pays the page-wise search.
  if (std::memcmp(a + P_, q + P_, (limit - 1) * page_bytes) == 0) return limit;
  for (uint32_t j = 1; j < limit; ++j)
    if (std::memcmp(a + size_t(j) * P_, q + size_t(j) * P_, page_bytes) != 0) return j;
  return limit;
}

uint32_t PrefixIndex::alloc_node() {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  const uint32_t gen = n.generation;
  n = Node{};
  n.generation = gen;
  n.live = true;
  return id;
}

void PrefixIndex::free_node(uint32_t id) {
  Node& n = nodes_[id];
  release_payload(n);
  const uint32_t gen = n.generation + 1;
  n = Node{};
  n.generation = gen;
  free_.push_back(id);
}

size_t PrefixIndex::payload_bytes(uint32_t pages) const {
  return size_t(pages) * ((opts_.store_hashes ? sizeof(PageHash) : 0) + sizeof(PageLocation) + size_t(P_) * sizeof(TokenId));
}

void PrefixIndex::alloc_payload(Node& n, uint32_t cap) {
  n.block = arena_.allocate(payload_bytes(cap));
  n.cap = cap;
  std::byte* p = n.block.ptr;
  n.hashes = opts_.store_hashes ? reinterpret_cast<PageHash*>(p) : nullptr;
  p += opts_.store_hashes ? size_t(cap) * sizeof(PageHash) : 0;
  n.locs = reinterpret_cast<PageLocation*>(p);
  n.tokens = reinterpret_cast<TokenId*>(p + size_t(cap) * sizeof(PageLocation));
}

void PrefixIndex::release_payload(Node& n) {
  arena_.release(n.block);
  n.block = index_detail::ArenaBlock{};
  n.hashes = nullptr;
  n.locs = nullptr;
  n.tokens = nullptr;
  n.n = n.cap = 0;
}

void PrefixIndex::fill_payload(Node& n, const Node& src, uint32_t first, uint32_t count) {
  alloc_payload(n, count);
  n.n = count;
  if (opts_.store_hashes) std::memcpy(n.hashes, src.hashes + first, size_t(count) * sizeof(PageHash));
  std::memcpy(n.locs, src.locs + first, size_t(count) * sizeof(PageLocation));
  std::memcpy(n.tokens, src.tokens + size_t(first) * P_, size_t(count) * P_ * sizeof(TokenId));
}

// Moves the payloads out of sparse arena chunks so freed chunks go back to
// the system. O(nodes); runs only when the arena reports fragmentation.
void PrefixIndex::compact() {
  for (Node& n : nodes_) {
    if (n.live && n.n > 0 && arena_.sparse(n.block)) repack(n, 0);
  }
}

void PrefixIndex::repack(Node& n, uint32_t first) {
  Node moved;
  fill_payload(moved, n, first, n.n - first);
  release_payload(n);
  adopt_payload(n, moved);
}

void PrefixIndex::adopt_payload(Node& n, const Node& from) {
  n.block = from.block;
  n.n = from.n;
  n.cap = from.cap;
  n.hashes = from.hashes;
  n.locs = from.locs;
  n.tokens = from.tokens;
}

bool PrefixIndex::wasteful(const Node& n) const { return n.block.bytes > 2 * payload_bytes(n.n) + 4096; }

uint32_t PrefixIndex::tenant_id(const std::string& tenant) {
  auto [it, fresh] = tenant_ids_.emplace(tenant, uint32_t(tenant_names_.size()));
  if (fresh) {
    tenant_names_.push_back(tenant);
    tenant_pages_.push_back({0, 0});
  }
  return it->second;
}

NsKey PrefixIndex::namespace_key(const Namespace& ns) { return NsKey{namespace_seed(ns, opts_.hash_algo), tenant_id(ns.tenant)}; }

uint32_t PrefixIndex::root_of(NsKey ns, bool create) {
  auto it = roots_.find(ns.seed);
  if (it != roots_.end()) return it->second;
  if (!create) return kNoNode;
  const uint32_t id = alloc_node();
  Node& r = nodes_[id];
  r.is_root = true;
  r.root = id;
  r.ns_seed = ns.seed;
  r.tenant = ns.tenant < tenant_pages_.size() ? ns.tenant : 0;
  roots_.emplace(ns.seed, id);
  return id;
}

void PrefixIndex::touch(Node& n, int32_t priority) {
  n.usage.last_access = tick_;
  ++n.usage.hits;
  n.usage.priority = std::max(n.usage.priority, priority);
  if (n.in_cand[kDev] || n.in_cand[kHost]) rekey(n, static_cast<uint32_t>(&n - nodes_.data()));
}

void PrefixIndex::match(NsKey ns, std::span<const TokenId> tokens, MatchResult& out, bool hash_remainder) {
  out.whole_pages = static_cast<uint32_t>(tokens.size() / P_);
  out.matched_pages = 0;
  out.deepest = NodeHandle();
  out.locations.clear();
  out.hashes.clear();
  out.ns = ns;
  out.epoch = epoch_;
  ++tick_;
  const uint32_t n_whole = out.whole_pages;
  uint32_t pos = 0;
  PageHash prev = ns.seed;
  uint32_t node = root_of(ns, /*create=*/false);
  if (node != kNoNode) {
    while (pos < n_whole) {
      const TokenId* q = tokens.data() + size_t(pos) * P_;
      const uint32_t c = find_child(node, q);
      if (c == kNoNode) break;
      Node& child = nodes_[c];
      const uint32_t m = common_pages(child, q, n_whole - pos);
      out.locations.insert(out.locations.end(), child.locs, child.locs + m);
      if (opts_.store_hashes) out.hashes.insert(out.hashes.end(), child.hashes, child.hashes + m);
      touch(child, child.usage.priority);
      out.deepest = NodeHandle(c, child.generation);
      pos += m;
      if (m < child.n_pages()) break;
      node = c;
    }
    if (pos > 0 && opts_.store_hashes) prev = out.hashes.back();
  }
  out.matched_pages = pos;
  if (opts_.store_hashes && hash_remainder && pos < n_whole)
    hash_pages(opts_.hash_algo, prev, tokens.subspan(size_t(pos) * P_, size_t(n_whole - pos) * P_), P_, out.hashes);
}

// Splits node `id` after `at` pages (0 < at < n_pages): a new node takes the
// head and becomes the parent; `id` keeps the tail, so handles to the deepest
// node (and the locks taken through them) stay right.
uint32_t PrefixIndex::split(uint32_t id, uint32_t at) {
  ++epoch_;
  const uint32_t h = alloc_node();  // may reallocate nodes_: take references after
  Node& x = nodes_[id];
  Node& head = nodes_[h];
  const uint32_t old_tp[2] = {x.tier_pages[kDev], x.tier_pages[kHost]};
  head.parent = x.parent;
  head.root = x.root;
  head.start_page = x.start_page;
  head.lock_ref = x.lock_ref;
  head.retain_ref = x.retain_ref;
  head.n_children = 1;
  head.first_key = x.first_key;
  head.usage = x.usage;
  // Only the smaller side is copied; the larger keeps the old block, whose
  // other part becomes dead space (at most half of it; repacked later if it grows).
  if (at <= x.n - at) {
    fill_payload(head, x, 0, at);
    if (x.hashes) x.hashes += at;
    x.locs += at;
    x.tokens += size_t(at) * P_;
    x.n -= at;
    x.cap -= at;
  } else {
    Node tail;
    fill_payload(tail, x, at, x.n - at);
    head.block = x.block;
    head.hashes = x.hashes;
    head.locs = x.locs;
    head.tokens = x.tokens;
    head.n = at;
    head.cap = x.cap;
    adopt_payload(x, tail);
  }
  if (wasteful(head)) repack(head, 0);
  if (wasteful(x)) repack(x, 0);
  for (uint32_t i = 0; i < at; ++i) {
    const PageLocation l = head.locs[i];
    for (int t = 0; t < 2; ++t) {
      if (has_tier(l, t)) ++head.tier_pages[t], --x.tier_pages[t];
    }
    if (l.on_device() && l.on_host()) ++head.both_pages, --x.both_pages;
  }
  for (int t = 0; t < 2; ++t) {
    head.scan_end[t] = std::min(x.scan_end[t], at);
    x.scan_end[t] = x.scan_end[t] > at ? x.scan_end[t] - at : 0;
    head.child_with_tier[t] = x.tier_pages[t] > 0 ? 1 : 0;
  }
  x.start_page += at;
  x.parent = h;
  x.first_key = page_key(x.tokens);
  edges_.replace(head.parent, head.first_key, id, h);
  edges_.insert(h, x.first_key, id);
  ++live_nodes_;
  // The parent's view changed from x to head; the pages only moved, so totals stay.
  Node& parent = nodes_[head.parent];
  for (int t = 0; t < 2; ++t) {
    parent.child_with_tier[t] += (head.tier_pages[t] > 0 ? 1 : 0);
    parent.child_with_tier[t] -= (old_tp[t] > 0 ? 1 : 0);
  }
  refresh(head.parent);
  refresh(h);
  refresh(id);
  return h;
}

Status PrefixIndex::check_insert(std::span<const TokenId> tokens, std::span<const PageLocation> locations,
                                 std::span<const PageHash> hashes) const {
  const uint32_t n_whole = static_cast<uint32_t>(tokens.size() / P_);
  if (locations.size() != n_whole)
    return Status::InvalidArgument("insert: " + std::to_string(locations.size()) + " locations for " +
                                   std::to_string(n_whole) + " whole pages");
  if (!hashes.empty() && hashes.size() != n_whole)
    return Status::InvalidArgument("insert: " + std::to_string(hashes.size()) + " hashes for " +
                                   std::to_string(n_whole) + " whole pages");
  if (payload_bytes(n_whole) >= (size_t{1} << 32))
    return Status::InvalidArgument("insert: prompt of " + std::to_string(n_whole) + " pages is too long for one node");
  for (size_t i = 0; i < locations.size(); ++i)
    if (!locations[i].any())
      return Status::InvalidArgument("insert: page " + std::to_string(i) + " has neither a device nor a host id");
  return Status::Ok();
}

Result<InsertResult> PrefixIndex::insert(NsKey ns, std::span<const TokenId> tokens,
                                         std::span<const PageLocation> locations, std::span<const PageHash> hashes,
                                         int32_t priority) {
  KVTIER_RETURN_IF_ERROR(check_insert(tokens, locations, hashes));
  const uint32_t n_whole = static_cast<uint32_t>(tokens.size() / P_);
  InsertResult res;
  if (n_whole == 0) return res;
  ++tick_;
  uint32_t node = root_of(ns, /*create=*/true);
  uint32_t pos = 0;
  while (pos < n_whole) {
    const TokenId* q = tokens.data() + size_t(pos) * P_;
    const uint32_t c = find_child(node, q);
    if (c == kNoNode) break;
    const uint32_t m = common_pages(nodes_[c], q, n_whole - pos);
    touch(nodes_[c], priority);
    pos += m;
    if (m < nodes_[c].n_pages()) {
      if (pos == n_whole) {  // the prompt ends inside this edge: all present
        res.already_present = n_whole;
        res.deepest = NodeHandle(c, nodes_[c].generation);
        return res;
      }
      node = split(c, m);
      break;
    }
    node = c;
  }
  return finish_insert(node, pos, tokens, locations, hashes, priority);
}

Result<InsertResult> PrefixIndex::insert_matched(NsKey ns, std::span<const TokenId> tokens,
                                                 std::span<const PageLocation> locations, const MatchResult& matched,
                                                 int32_t priority) {
  const uint32_t n_whole = static_cast<uint32_t>(tokens.size() / P_);
  std::span<const PageHash> hashes;
  if (opts_.store_hashes && matched.hashes.size() == n_whole) hashes = matched.hashes;
  // Resume only from a match of this prompt made since the last structural change.
  if (matched.epoch != epoch_ || !(matched.ns == ns) || matched.whole_pages != n_whole || matched.matched_pages == 0 ||
      !live(matched.deepest))
    return insert(ns, tokens, locations, hashes, priority);
  KVTIER_RETURN_IF_ERROR(check_insert(tokens, locations, hashes));
  ++tick_;
  const uint32_t pos = matched.matched_pages;
  uint32_t node = matched.deepest.index_;
  for (uint32_t id = node; !nodes_[id].is_root; id = nodes_[id].parent) touch(nodes_[id], priority);
  const uint32_t within = pos - nodes_[node].start_page;
  if (within < nodes_[node].n_pages()) {
    if (pos == n_whole) {
      InsertResult res;
      res.already_present = n_whole;
      res.deepest = matched.deepest;
      return res;
    }
    node = split(node, within);
  }
  return finish_insert(node, pos, tokens, locations, hashes, priority);
}

// Adds pages [pos, n_whole) as a new leaf under `node` (the first pos pages are present).
Result<InsertResult> PrefixIndex::finish_insert(uint32_t node, uint32_t pos, std::span<const TokenId> tokens,
                                                std::span<const PageLocation> locations,
                                                std::span<const PageHash> hashes, int32_t priority) {
  const uint32_t n_whole = static_cast<uint32_t>(tokens.size() / P_);
  InsertResult res;
  res.already_present = pos;
  if (pos == n_whole) {
    res.deepest = NodeHandle(node, nodes_[node].generation);
    return res;
  }
  ++epoch_;
  const uint32_t leaf = alloc_node();
  Node& parent = nodes_[node];
  Node& l = nodes_[leaf];
  const uint32_t n_new = n_whole - pos;
  l.parent = node;
  l.root = parent.root;
  l.start_page = pos;
  // The new pages are the most recent: strictly after the nodes this insert
  // walked, so a node it split keeps its unused tail older than the new leaf
  // (on a shared tick the order would fall to node slots).
  ++tick_;
  l.usage = NodeUsage{tick_, tick_, 1, priority};
  alloc_payload(l, n_new);
  l.n = n_new;
  std::memcpy(l.tokens, tokens.data() + size_t(pos) * P_, size_t(n_new) * P_ * sizeof(TokenId));
  std::memcpy(l.locs, locations.data() + pos, size_t(n_new) * sizeof(PageLocation));
  if (opts_.store_hashes) {
    if (!hashes.empty()) {
      std::memcpy(l.hashes, hashes.data() + pos, size_t(n_new) * sizeof(PageHash));
    } else {
      scratch_hashes_.clear();
      const PageHash prev = pos == 0 ? nodes_[l.root].ns_seed : parent.hashes[parent.n - 1];
      hash_pages(opts_.hash_algo, prev, std::span<const TokenId>(l.tokens, size_t(n_new) * P_), P_, scratch_hashes_);
      std::memcpy(l.hashes, scratch_hashes_.data(), size_t(n_new) * sizeof(PageHash));
    }
  }
  l.first_key = page_key(l.tokens);
  const uint32_t zero[2] = {0, 0};
  for (uint32_t i = 0; i < n_new; ++i) count_page(l, l.locs[i], +1);
  for (int t = 0; t < 2; ++t) l.scan_end[t] = l.tier_pages[t] > 0 ? n_new : 0;
  if (opts_.record_events)
    for (uint32_t i = 0; i < n_new; ++i)
      for (int t = 0; t < 2; ++t)
        if (has_tier(l.locs[i], t)) emit(KvEventKind::kStored, t, l, i, l.locs[i]);
  edges_.insert(node, l.first_key, leaf);
  ++parent.n_children;
  ++live_nodes_;
  pages_ += n_new;
  tiers_changed(leaf, zero);
  refresh(node);
  res.inserted = n_new;
  res.deepest = NodeHandle(leaf, l.generation);
  return res;
}

const PrefixIndex::Node* PrefixIndex::live(NodeHandle h) const {
  if (!h.valid() || h.index_ >= nodes_.size()) return nullptr;
  const Node& n = nodes_[h.index_];
  return n.live && n.generation == h.generation_ ? &n : nullptr;
}

// Locks and retentions are counts on the whole path from a node to its root
// (I4, I6). A node whose count leaves or reaches zero moves its pages into or
// out of the counted totals, and its candidacy is refreshed.
Status PrefixIndex::change_path_ref(NodeHandle h, uint32_t Node::*ref, int sign, const char* what) {
  const Node* d = live(h);
  if (!d) return Status::FailedPrecondition(std::string(what) + ": stale or invalid node handle");
  if (sign < 0 && d->*ref == 0) return Status::FailedPrecondition(std::string(what) + ": node holds no such reference");
  const bool lock = ref == &Node::lock_ref;
  for (uint32_t id = h.index_; id != kNoNode; id = nodes_[id].parent) {
    Node& n = nodes_[id];
    const bool was = n.*ref > 0;
    n.*ref += uint32_t(sign);
    if (was == (n.*ref > 0)) continue;
    if (lock) {
      protected_pages_ += uint64_t(int64_t(sign) * n.n_pages());
      for (int t = 0; t < 2; ++t) protected_tier_[t] += uint64_t(int64_t(sign) * n.tier_pages[t]);
    } else {
      retained_host_ += uint64_t(int64_t(sign) * n.tier_pages[kHost]);
    }
    refresh(id);
  }
  return Status::Ok();
}

Status PrefixIndex::lock(NodeHandle h) { return change_path_ref(h, &Node::lock_ref, +1, "lock"); }
Status PrefixIndex::unlock(NodeHandle h) { return change_path_ref(h, &Node::lock_ref, -1, "unlock"); }

Result<NodeHandle> PrefixIndex::ending_at(NodeHandle h, uint32_t pages) {
  const Node* d = live(h);
  if (!d) return Status::FailedPrecondition("stale or invalid node handle");
  while (!d->is_root && pages <= d->start_page) {  // an ancestor holds it
    h = NodeHandle(d->parent, nodes_[d->parent].generation);
    d = &nodes_[d->parent];
  }
  if (d->is_root || pages > d->start_page + d->n_pages())
    return Status::OutOfRange("page " + std::to_string(pages) + " is not on the path to this node");
  const uint32_t at = pages - d->start_page;
  if (at == d->n_pages()) return h;
  const uint32_t head = split(h.index_, at);
  return NodeHandle(head, nodes_[head].generation);
}
Status PrefixIndex::retain(NodeHandle h) { return change_path_ref(h, &Node::retain_ref, +1, "retain"); }
Status PrefixIndex::unretain(NodeHandle h) { return change_path_ref(h, &Node::retain_ref, -1, "unretain"); }

Status PrefixIndex::page_ref(NodeHandle h, uint32_t page_index, uint32_t& node, uint32_t& slot) const {
  const Node* d = live(h);
  if (!d) return Status::FailedPrecondition("stale or invalid node handle");
  if (d->is_root || page_index >= d->start_page + d->n_pages())
    return Status::OutOfRange("page " + std::to_string(page_index) + " is not on the path to this node");
  uint32_t id = h.index_;
  while (nodes_[id].start_page > page_index) id = nodes_[id].parent;
  node = id;
  slot = page_index - nodes_[id].start_page;
  return Status::Ok();
}

Result<PageLocation> PrefixIndex::location(NodeHandle h, uint32_t page_index) const {
  uint32_t node = 0, slot = 0;
  KVTIER_RETURN_IF_ERROR(page_ref(h, page_index, node, slot));
  return nodes_[node].locs[slot];
}

Status PrefixIndex::set_location(NodeHandle h, uint32_t page_index, PageLocation loc) {
  if (!loc.any()) return Status::InvalidArgument("set_location: a cached page needs a device or a host id; use evict()");
  uint32_t id = 0, slot = 0;
  KVTIER_RETURN_IF_ERROR(page_ref(h, page_index, id, slot));
  Node& n = nodes_[id];
  const PageLocation old = n.locs[slot];
  if (old == loc) return Status::Ok();
  const uint32_t old_tp[2] = {n.tier_pages[kDev], n.tier_pages[kHost]};
  count_page(n, old, -1);
  count_page(n, loc, +1);
  n.locs[slot] = loc;
  // A page whose one residency is replaced by the other tier's moved; otherwise each tier's change is
  // its own event (a new id in the same tier: removed, then stored).
  const bool crossed = opts_.record_events && old.on_device() != old.on_host() && loc.on_device() != loc.on_host() &&
                       old.on_device() != loc.on_device();
  if (crossed) emit(KvEventKind::kMoved, loc.on_device() ? kDev : kHost, n, slot, loc);
  for (int t = 0; t < 2; ++t) {
    if (has_tier(loc, t)) n.scan_end[t] = std::max(n.scan_end[t], slot + 1);
    if (!opts_.record_events || crossed) continue;
    const bool was = has_tier(old, t), is = has_tier(loc, t);
    const bool replaced = was && is && (t == kDev ? old.device != loc.device : old.host != loc.host);
    if (was && (!is || replaced)) emit(KvEventKind::kRemoved, t, n, slot, old);
    if (is && (!was || replaced)) emit(KvEventKind::kStored, t, n, slot, loc);
  }
  tiers_changed(id, old_tp);
  return Status::Ok();
}

void PrefixIndex::reset() {
  for (uint32_t id = 0; id < nodes_.size(); ++id)
    if (nodes_[id].live) free_node(id);
  edges_.clear();
  arena_.clear();
  roots_.clear();
  cand_[kDev].clear();
  cand_[kHost].clear();
  live_nodes_ = pages_ = protected_pages_ = retained_host_ = 0;
  ++epoch_;
  tier_pages_[kDev] = tier_pages_[kHost] = protected_tier_[kDev] = protected_tier_[kHost] = 0;
  for (auto& t : tenant_pages_) t = {0, 0};
  if (opts_.record_events) events_.push_back(IndexEvent{KvEventKind::kCleared, TierKind::kDevice, {}, {}, {}});
}

IndexStats PrefixIndex::stats() const {
  IndexStats s;
  s.namespaces = roots_.size();
  s.nodes = live_nodes_;
  s.pages = pages_;
  s.device_pages = tier_pages_[kDev];
  s.host_pages = tier_pages_[kHost];
  s.protected_pages = protected_pages_;
  s.evictable_pages = pages_ - protected_pages_;
  s.protected_device_pages = protected_tier_[kDev];
  s.evictable_device_pages = tier_pages_[kDev] - protected_tier_[kDev];
  s.protected_host_pages = protected_tier_[kHost];
  s.evictable_host_pages = tier_pages_[kHost] - protected_tier_[kHost];
  s.retained_host_pages = retained_host_;
  uint64_t bytes = sizeof(*this) + nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(uint32_t) +
                   edges_.bytes() + events_.capacity() * sizeof(IndexEvent);
  bytes += arena_.reserved_bytes();
  // std::set and unordered_map nodes: payload plus ~32 bytes of links each (libstdc++).
  bytes += (cand_[kDev].size() + cand_[kHost].size()) * (sizeof(CandEntry) + 32);
  bytes += roots_.size() * (sizeof(std::pair<PageHash, uint32_t>) + 32) + roots_.bucket_count() * sizeof(void*);
  s.metadata_bytes = bytes;
  return s;
}

void PrefixIndex::take_events(std::vector<IndexEvent>& out) {
  out.insert(out.end(), events_.begin(), events_.end());
  events_.clear();
}

void PrefixIndex::set_record_events(bool on) {
  opts_.record_events = on;
  if (!on) events_ = {};
}

void PrefixIndex::resident_hashes(std::vector<PageHash>& device, std::vector<PageHash>& host) const {
  if (!opts_.store_hashes) return;
  for (const Node& n : nodes_) {
    if (!n.live) continue;
    for (uint32_t i = 0; i < n.n_pages(); ++i) {
      if (n.locs[i].on_device()) device.push_back(n.hashes[i]);
      if (n.locs[i].on_host()) host.push_back(n.hashes[i]);
    }
  }
}

void PrefixIndex::emit(KvEventKind kind, int t, const Node& n, uint32_t slot, PageLocation loc) {
  IndexEvent e;
  e.kind = kind;
  e.tier = t == kDev ? TierKind::kDevice : TierKind::kHost;
  e.from = kind == KvEventKind::kMoved ? (t == kDev ? TierKind::kHost : TierKind::kDevice) : e.tier;
  e.ns = NsKey{nodes_[n.root].ns_seed, nodes_[n.root].tenant};
  e.hash = opts_.store_hashes ? n.hashes[slot] : PageHash{};
  e.location = loc;
  events_.push_back(e);
}

}  // namespace kvtier
