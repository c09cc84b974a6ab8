// PrefixIndex: residency bookkeeping, eviction candidates, eviction, and the
// full invariant check.
#include <algorithm>
#include <map>
#include <string>

#include "index/prefix_index.h"
#include "index/prefix_index_node.h"

namespace kvtier {

void PrefixIndex::count_page(Node& n, PageLocation loc, int sign) {
  std::array<uint64_t, 2>& tenant = tenant_pages_[nodes_[n.root].tenant];
  for (int t = 0; t < 2; ++t) {
    if (!has_tier(loc, t)) continue;
    n.tier_pages[t] += sign;
    tier_pages_[t] += sign;
    tenant[t] += sign;
    if (n.lock_ref > 0) protected_tier_[t] += sign;
  }
  if (n.retain_ref > 0 && has_tier(loc, kHost)) retained_host_ += sign;
  if (loc.on_device() && loc.on_host()) n.both_pages += sign;
}

// After node `id`'s per-tier page counts changed from old_tier_pages: the
// parent's "children holding tier t" count and both candidacies follow.
void PrefixIndex::tiers_changed(uint32_t id, const uint32_t old_tier_pages[2]) {
  Node& n = nodes_[id];
  bool parent_changed = false;
  for (int t = 0; t < 2; ++t) {
    const bool was = old_tier_pages[t] > 0, is = n.tier_pages[t] > 0;
    if (was == is) continue;
    nodes_[n.parent].child_with_tier[t] += is ? 1 : uint32_t(-1);
    parent_changed = true;
  }
  refresh(id);
  if (parent_changed) refresh(n.parent);
}

// Puts node `id` into, or takes it out of, each tier's candidate set (I5).
bool PrefixIndex::candidate(const Node& n, int t) const {
  if (!n.live || n.is_root || n.lock_ref > 0 || n.tier_pages[t] == 0 || n.child_with_tier[t] > 0) return false;
  if (n.both_pages > 0 || (t == kDev && opts_.device_demotes)) return t == kDev || n.retain_ref == 0;
  if (n.retain_ref > 0) return false;  // I6: never trimmed
  // Only T-only pages: the one that can go is the last page of a childless node.
  const PageLocation last = n.locs[n.n - 1];
  return n.n_children == 0 && has_tier(last, t) && !has_tier(last, 1 - t);
}

void PrefixIndex::refresh(uint32_t id) {
  Node& n = nodes_[id];
  for (int t = 0; t < 2; ++t) {
    const bool want = candidate(n, t);
    if (want == n.in_cand[t]) continue;
    if (want) {
      if (!n.in_cand[1 - t]) n.key = policy_->key(n.usage);
      cand_[t].insert(CandEntry{n.key, id});
    } else {
      cand_[t].erase(CandEntry{n.key, id});
    }
    n.in_cand[t] = want;
  }
}

void PrefixIndex::rekey(Node& n, uint32_t id) {
  const EvictKey k = policy_->key(n.usage);
  if (k == n.key) return;
  for (int t = 0; t < 2; ++t) {
    if (!n.in_cand[t]) continue;
    cand_[t].erase(CandEntry{n.key, id});
    cand_[t].insert(CandEntry{k, id});
  }
  n.key = k;
}

Status PrefixIndex::evict(uint32_t n_pages, TierKind tier, EvictResult& out, const DemoteFn& demote,
                          const SpillHook& spill, uint32_t tenant) {
  out.freed = 0;
  out.pages.clear();
  if (tier != TierKind::kDevice && tier != TierKind::kHost)
    return Status::InvalidArgument("evict: the index tracks only the device and host tiers, not " +
                                   std::string(tier_name(tier)));
  const int t = tier == TierKind::kDevice ? kDev : kHost;
  if (t == kHost && spill.fn && (spill.run_pages == 0 || !opts_.store_hashes))
    return Status::InvalidArgument("evict: a spill hook needs run_pages > 0 and an index that stores page hashes");
  const SpillHook no_spill{};
  uint32_t need = n_pages;
  // In policy order. A candidate that frees nothing (a device-only inner
  // page whose demotion failed or was not offered) is unchanged, so the
  // walk goes on past it; any progress may reorder the set: restart.
  for (auto it = cand_[t].begin(); need > 0 && it != cand_[t].end();) {
    if (tenant != kAnyTenant && nodes_[nodes_[it->node].root].tenant != tenant) {
      ++it;
      continue;
    }
    const uint32_t before = need;
    evict_from(it->node, t, need, out, t == kDev ? demote : DemoteFn(), t == kHost ? spill : no_spill);
    it = need == before ? std::next(it) : cand_[t].begin();
  }
  if (arena_.fragmented()) compact();
  out.freed = n_pages - need;
  if (out.freed > 0) ++epoch_;  // pages may have been trimmed: matches made before cannot be resumed
  return Status::Ok();
}

// Frees tier-t residencies of candidate `id` from its tail toward its head:
// a page with a copy in the other tier just loses its t id; a t-only page
// leaves the tree when it is the last page of a childless node, and is
// otherwise kept (it would leave a hole). Frees at least one page, since `id`
// is a candidate (I5), unless it counted on a demotion that did not happen.
void PrefixIndex::offer_spill(uint32_t id, uint32_t i, const SpillHook& spill) {
  const Node& n = nodes_[id];
  const uint32_t R = spill.run_pages;
  if ((n.start_page + i + 1) % R != 0) return;
  std::vector<PageHash> hashes(R);
  std::vector<PageLocation> locs(R);
  uint32_t node = id, at = i;
  for (uint32_t k = R; k-- > 0;) {
    // Walk the path backwards; depth >= R guarantees the pages exist.
    while (at == UINT32_MAX) {
      node = nodes_[node].parent;
      at = nodes_[node].n_pages() - 1;  // UINT32_MAX again for an empty node
    }
    hashes[k] = nodes_[node].hashes[at];
    locs[k] = nodes_[node].locs[at];
    --at;
  }
  spill.fn(NsKey{nodes_[n.root].ns_seed, nodes_[n.root].tenant}, hashes, locs);
}

void PrefixIndex::evict_from(uint32_t id, int t, uint32_t& need, EvictResult& out, const DemoteFn& demote,
                             const SpillHook& spill) {
  Node& n = nodes_[id];
  const uint32_t old_tp[2] = {n.tier_pages[kDev], n.tier_pages[kHost]};
  uint32_t i = std::min(n.scan_end[t], n.n_pages());
  uint32_t kept_end = 0;  // one past the highest t page this pass keeps
  while (i > 0 && need > 0) {
    --i;
    PageLocation loc = n.locs[i];
    if (!has_tier(loc, t)) continue;
    const PageHash h = opts_.store_hashes ? n.hashes[i] : PageHash{};
    bool demoted = false;
    if (demote && !has_tier(loc, 1 - t)) {
      // Write-back: the page moves down to a host slot instead of leaving.
      const SlotId slot = demote(loc, h);
      if (slot.valid()) {
        PageLocation with_host = loc;
        with_host.host = slot;
        count_page(n, loc, -1);
        count_page(n, with_host, +1);
        n.locs[i] = with_host;
        loc = with_host;
        n.scan_end[1 - t] = std::max(n.scan_end[1 - t], i + 1);
        demoted = true;
      }
    }
    if (has_tier(loc, 1 - t)) {
      PageLocation kept = loc;
      if (t == kDev) {
        kept.device = PageId();
      } else {
        kept.host = SlotId();
      }
      count_page(n, loc, -1);
      count_page(n, kept, +1);
      n.locs[i] = kept;
      out.pages.push_back(EvictedPage{h, loc, false});
    } else if (n.n_children == 0 && i + 1 == n.n_pages() && n.retain_ref == 0) {
      if (spill.fn) offer_spill(id, i, spill);
      count_page(n, loc, -1);
      --n.n;  // trim the tail page
      --pages_;
      out.pages.push_back(EvictedPage{h, loc, true});
    } else {
      kept_end = std::max(kept_end, i + 1);
      continue;
    }
    --need;
    record_left(n, t, h, loc, demoted);
  }
  n.scan_end[t] = std::max(kept_end, i);
  n.scan_end[1 - t] = std::min(n.scan_end[1 - t], n.n_pages());
  if (n.n_pages() == 0) {
    tiers_changed(id, old_tp);
    remove_leaf(id);
    return;
  }
  if (wasteful(n)) repack(n, 0);  // a much-trimmed leaf moves to an exact block
  tiers_changed(id, old_tp);
}

void PrefixIndex::record_left(const Node& n, int t, const PageHash& h, PageLocation loc, bool demoted) {
  if (!opts_.record_events) return;
  IndexEvent e;  // a demoted page moved down; any other lost its residency in t
  e.kind = demoted ? KvEventKind::kMoved : KvEventKind::kRemoved;
  e.from = t == kDev ? TierKind::kDevice : TierKind::kHost;
  e.tier = demoted ? TierKind::kHost : e.from;
  e.ns = NsKey{nodes_[n.root].ns_seed, nodes_[n.root].tenant};
  e.hash = h;
  e.location = loc;
  events_.push_back(e);
}

Status PrefixIndex::cut_below_device_only(uint32_t n_pages, EvictResult& out, uint32_t tenant) {
  out.freed = 0;
  out.pages.clear();
  std::vector<std::pair<EvictKey, uint32_t>> stuck;
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.live || n.is_root || n.lock_ref > 0 || n.retain_ref > 0 || n.tier_pages[kDev] == 0) continue;
    if (n.child_with_tier[kDev] > 0 || candidate(n, kDev)) continue;
    if (tenant != kAnyTenant && nodes_[n.root].tenant != tenant) continue;
    stuck.emplace_back(policy_->key(n.usage), id);
  }
  std::sort(stuck.begin(), stuck.end());
  uint64_t freeable = 0;
  for (const auto& [key, id] : stuck) {
    if (freeable >= n_pages) break;
    if (!nodes_[id].live) continue;  // below one cut before it
    freeable += nodes_[id].tier_pages[kDev];
    cut_below(id, out);
  }
  out.freed = uint32_t(out.pages.size());
  if (out.freed > 0) ++epoch_;
  if (arena_.fragmented()) compact();
  return Status::Ok();
}

void PrefixIndex::drop_tail(uint32_t id, uint32_t keep, EvictResult& out) {
  Node& n = nodes_[id];
  const uint32_t old_tp[2] = {n.tier_pages[kDev], n.tier_pages[kHost]};
  for (uint32_t i = n.n_pages(); i-- > keep;) {
    const PageLocation loc = n.locs[i];
    const PageHash h = opts_.store_hashes ? n.hashes[i] : PageHash{};
    for (int t = 0; t < 2; ++t)
      if (has_tier(loc, t)) record_left(n, t, h, loc, false);
    count_page(n, loc, -1);
    --pages_;
    out.pages.push_back(EvictedPage{h, loc, true});
  }
  n.n = keep;
  for (int t = 0; t < 2; ++t) n.scan_end[t] = std::min(n.scan_end[t], keep);
  tiers_changed(id, old_tp);
  if (keep == 0) remove_leaf(id);
}

void PrefixIndex::cut_below(uint32_t top, EvictResult& out) {
  // The nodes below `top`, deepest first, so each is a leaf when it goes.
  std::vector<uint32_t> below;
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    if (!nodes_[id].live || nodes_[id].is_root || id == top) continue;
    uint32_t a = nodes_[id].parent;
    while (a != top && !nodes_[a].is_root) a = nodes_[a].parent;
    if (a == top) below.push_back(id);
  }
  std::sort(below.begin(), below.end(),
            [&](uint32_t a, uint32_t b) { return nodes_[a].start_page > nodes_[b].start_page; });
  for (uint32_t id : below) drop_tail(id, 0, out);
  // Then its own pages past its last device page (host-only: it holds no copy on both).
  const Node& n = nodes_[top];
  uint32_t keep = n.n_pages();
  while (keep > 0 && !has_tier(n.locs[keep - 1], kDev)) --keep;
  drop_tail(top, keep, out);
}

void PrefixIndex::remove_leaf(uint32_t id) {
  Node& n = nodes_[id];
  const uint32_t parent = n.parent;
  for (int t = 0; t < 2; ++t)
    if (n.in_cand[t]) cand_[t].erase(CandEntry{n.key, id});
  edges_.erase(parent, n.first_key, id);
  free_node(id);
  --live_nodes_;
  Node& p = nodes_[parent];
  --p.n_children;
  // A namespace's root goes with its last child: one root per cache_salt a client ever sent stayed
  // for good (about 480 bytes each, and every O(nodes) walk longer). Nothing holds a root alone: a
  // handle is never to a root, so its references are its descendants'.
  if (p.is_root && p.n_children == 0) {
    roots_.erase(p.ns_seed);
    for (int t = 0; t < 2; ++t)
      if (p.in_cand[t]) cand_[t].erase(CandEntry{p.key, parent});
    free_node(parent);
    ++epoch_;
    return;
  }
  refresh(parent);
}

namespace {

Status invariant_failure(const std::string& what, uint32_t id) {
  return Status::Internal("index invariant: " + what + " (node " + std::to_string(id) + ")");
}

}  // namespace

// What check_invariants() recounts from the nodes, to compare with the index's running totals.
struct PrefixIndex::InvariantTally {
  InvariantTally(size_t n_nodes, size_t n_tenants)
      : children(n_nodes, 0),
        child_tier{std::vector<uint32_t>(n_nodes, 0), std::vector<uint32_t>(n_nodes, 0)},
        tenant_tier(n_tenants, {0, 0}) {}
  std::vector<uint32_t> children, child_tier[2];  // per node: its children, those with pages on tier t
  uint64_t pages = 0, tier[2] = {}, prot = 0, prot_tier[2] = {}, retained_host = 0, nodes = 0, roots = 0;
  std::vector<std::array<uint64_t, 2>> tenant_tier;
};

// A live non-root node against its parent and its own counts (I1, I3, I4), counted into `t`.
Status PrefixIndex::check_node(uint32_t id, InvariantTally& t) const {
  const Node& n = nodes_[id];
  ++t.nodes;
  if (n.n_pages() == 0) return invariant_failure("empty node", id);
  if (n.n > n.cap) return invariant_failure("page count above capacity", id);
  if (opts_.store_hashes != (n.hashes != nullptr)) return invariant_failure("hash array", id);
  if (n.parent >= nodes_.size() || !nodes_[n.parent].live) return invariant_failure("dead parent", id);
  const Node& p = nodes_[n.parent];
  if (n.root != p.root) return invariant_failure("root mismatch", id);
  if (n.start_page != p.start_page + p.n_pages()) return invariant_failure("start_page", id);
  if (p.lock_ref < n.lock_ref) return invariant_failure("parent lock_ref below child's", id);
  if (p.retain_ref < n.retain_ref) return invariant_failure("parent retain_ref below child's", id);
  if (n.first_key != page_key(n.tokens)) return invariant_failure("first_key", id);
  ++t.children[n.parent];
  uint32_t tp[2] = {}, both = 0;
  for (uint32_t i = 0; i < n.n_pages(); ++i) {
    const PageLocation l = n.locs[i];
    if (!l.any()) return invariant_failure("page without residency", id);
    for (int k = 0; k < 2; ++k)
      if (has_tier(l, k)) {
        ++tp[k];
        if (i >= n.scan_end[k]) return invariant_failure("scan_end below a resident page", id);
      }
    both += l.on_device() && l.on_host();
  }
  if (tp[0] != n.tier_pages[0] || tp[1] != n.tier_pages[1] || both != n.both_pages)
    return invariant_failure("tier counts", id);
  for (int k = 0; k < 2; ++k) {
    if (tp[k] > 0) ++t.child_tier[k][n.parent];
    t.tier[k] += tp[k];
    if (n.lock_ref > 0) t.prot_tier[k] += tp[k];
    t.tenant_tier[nodes_[n.root].tenant][k] += tp[k];
  }
  if (n.retain_ref > 0) t.retained_host += tp[kHost];
  t.pages += n.n_pages();
  if (n.lock_ref > 0) t.prot += n.n_pages();
  return Status::Ok();
}

// Every live node's child counts and candidate-set membership (I5) against the tally.
Status PrefixIndex::check_links(const InvariantTally& t) const {
  size_t in_cand = 0;
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    in_cand += n.in_cand[0] + n.in_cand[1];
    if (!n.live) continue;
    if (t.children[id] != n.n_children) return invariant_failure("child count", id);
    for (int k = 0; k < 2; ++k) {
      if (t.child_tier[k][id] != n.child_with_tier[k]) return invariant_failure("children-with-tier count", id);
      const bool want = candidate(n, k);
      if (want != n.in_cand[k] || (want && !cand_[k].count(CandEntry{n.key, id})))
        return invariant_failure("candidate set", id);
      if (want && n.key != policy_->key(n.usage)) return invariant_failure("stale policy key", id);
    }
  }
  if (cand_[0].size() + cand_[1].size() != in_cand) return invariant_failure("candidate set size", 0);
  return Status::Ok();
}

// Every edge points at a live child of that parent, and siblings' first pages differ (I2).
Status PrefixIndex::check_edges() const {
  std::map<std::pair<uint32_t, std::vector<TokenId>>, uint32_t> firsts;
  Status st;
  edges_.for_each([&](uint32_t parent, uint64_t key, uint32_t child) {
    if (!st.ok()) return;
    if (child >= nodes_.size() || !nodes_[child].live || nodes_[child].parent != parent ||
        nodes_[child].first_key != key) {
      st = invariant_failure("edge table entry", child);
      return;
    }
    std::vector<TokenId> first(nodes_[child].tokens, nodes_[child].tokens + P_);
    if (!firsts.emplace(std::make_pair(parent, std::move(first)), child).second)
      st = invariant_failure("duplicate sibling", child);
  });
  return st;
}

Status PrefixIndex::check_invariants() const {
  InvariantTally t(nodes_.size(), tenant_pages_.size());
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.live) continue;
    if (!n.is_root) {
      KVTIER_RETURN_IF_ERROR(check_node(id, t));
      continue;
    }
    ++t.roots;
    auto it = roots_.find(n.ns_seed);
    if (it == roots_.end() || it->second != id || n.root != id || n.n_pages() != 0)
      return invariant_failure("bad root", id);
    if (n.n_children == 0) return invariant_failure("a root without children", id);
  }
  KVTIER_RETURN_IF_ERROR(check_links(t));
  if (t.nodes != live_nodes_ || t.roots != roots_.size()) return invariant_failure("node count", 0);
  if (edges_.size() != t.nodes) return invariant_failure("edge count", 0);
  KVTIER_RETURN_IF_ERROR(check_edges());
  if (t.pages != pages_ || t.tier[0] != tier_pages_[0] || t.tier[1] != tier_pages_[1])
    return invariant_failure("page totals", 0);
  if (t.prot != protected_pages_ || t.prot_tier[0] != protected_tier_[0] || t.prot_tier[1] != protected_tier_[1])
    return invariant_failure("protected totals", 0);
  if (t.retained_host != retained_host_) return invariant_failure("retained total", 0);
  if (t.tenant_tier != tenant_pages_) return invariant_failure("tenant totals", 0);
  return Status::Ok();
}

}  // namespace kvtier
