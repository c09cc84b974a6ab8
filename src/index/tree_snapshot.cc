// PrefixIndex::snapshot and the pure reductions of tree_snapshot.h.
#include "index/tree_snapshot.h"

#include <algorithm>
#include <queue>
#include <span>

#include "index/prefix_index_node.h"

namespace kvtier {
namespace {

// Children of every record as one flat array (compressed rows), plus the roots.
struct ChildLists {
  std::vector<uint32_t> begin;  // children of r: items[begin[r], begin[r + 1])
  std::vector<uint32_t> items;
  std::vector<uint32_t> roots;

  explicit ChildLists(const std::vector<TreeNodeRecord>& nodes) : begin(nodes.size() + 1, 0) {
    for (const TreeNodeRecord& n : nodes)
      if (!n.is_namespace()) ++begin[n.parent + 1];
    for (size_t i = 1; i < begin.size(); ++i) begin[i] += begin[i - 1];
    items.resize(begin.back());
    std::vector<uint32_t> fill(begin.begin(), begin.end() - 1);
    for (uint32_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].is_namespace()) roots.push_back(i);
      else items[fill[nodes[i].parent]++] = i;
    }
  }
  std::span<const uint32_t> of(uint32_t r) const { return {items.data() + begin[r], begin[r + 1] - begin[r]}; }
};

// Sums of a subtree that an aggregate record needs besides subtree_pages.
struct SubtreeSums {
  std::vector<uint64_t> device, host, count, hits, last_access;

  // `nodes` in preorder: a reverse pass adds every record into its parent.
  explicit SubtreeSums(const std::vector<TreeNodeRecord>& nodes)
      : device(nodes.size()), host(nodes.size()), count(nodes.size()), hits(nodes.size()), last_access(nodes.size()) {
    for (size_t i = nodes.size(); i-- > 0;) {
      const TreeNodeRecord& n = nodes[i];
      device[i] += n.device_pages;
      host[i] += n.host_pages;
      count[i] += n.aggregate == 0 ? 1 : n.aggregate;
      hits[i] = std::max(hits[i], n.hits);
      last_access[i] = std::max(last_access[i], n.last_access);
      if (n.is_namespace()) continue;
      device[n.parent] += device[i];
      host[n.parent] += host[i];
      count[n.parent] += count[i];
      hits[n.parent] = std::max(hits[n.parent], hits[i]);
      last_access[n.parent] = std::max(last_access[n.parent], last_access[i]);
    }
  }
};

// Which records of `full` a summary keeps, chosen largest subtree first.
class BranchChooser {
 public:
  BranchChooser(const TreeSnapshot& full, const ChildLists& children, uint32_t max_nodes)
      : full_(full), children_(children), max_nodes_(max_nodes), kept_(full.nodes.size(), false),
        left_out_(full.nodes.size(), 0) {}

  std::vector<bool> choose() {
    roots_left_out_ = uint32_t(children_.roots.size());
    aggregates_ = roots_left_out_ > 0 ? 1 : 0;  // the namespaces left out
    for (uint32_t r : children_.roots) frontier_.push({full_.nodes[r].subtree_pages, r});
    while (!frontier_.empty()) {
      const uint32_t r = frontier_.top().second;
      frontier_.pop();
      if (!take(r)) break;
      for (uint32_t c : children_.of(r)) frontier_.push({full_.nodes[c].subtree_pages, c});
    }
    return kept_;
  }

 private:
  // Keeps r when the records (kept ones and one aggregate per parent with children left out) still fit.
  bool take(uint32_t r) {
    const TreeNodeRecord& n = full_.nodes[r];
    uint32_t& siblings_left = n.is_namespace() ? roots_left_out_ : left_out_[n.parent];
    int64_t after = int64_t(kept_count_) + 1 + aggregates_;
    if (!children_.of(r).empty()) ++after;  // its own children start left out
    if (siblings_left == 1) --after;        // the last left-out sibling: the parent's aggregate goes
    if (after > int64_t(max_nodes_)) return false;
    kept_[r] = true;
    ++kept_count_;
    left_out_[r] = uint32_t(children_.of(r).size());
    aggregates_ = uint32_t(after) - kept_count_;
    --siblings_left;
    return true;
  }

  const TreeSnapshot& full_;
  const ChildLists& children_;
  const uint32_t max_nodes_;
  std::vector<bool> kept_;
  std::vector<uint32_t> left_out_;  // kept records: children not (yet) kept
  uint32_t roots_left_out_ = 0;
  uint32_t kept_count_ = 0, aggregates_ = 0;
  std::priority_queue<std::pair<uint64_t, uint32_t>> frontier_;
};

TreeNodeRecord aggregate_of(const TreeSnapshot& full, const SubtreeSums& sums, std::span<const uint32_t> left_out,
                            uint32_t parent, uint32_t depth_pages) {
  TreeNodeRecord a;
  a.parent = parent;
  a.depth_pages = depth_pages;
  for (uint32_t c : left_out) {
    a.pages += uint32_t(full.nodes[c].subtree_pages);
    a.device_pages += uint32_t(sums.device[c]);
    a.host_pages += uint32_t(sums.host[c]);
    a.aggregate += uint32_t(sums.count[c]);
    a.hits = std::max(a.hits, sums.hits[c]);
    a.last_access = std::max(a.last_access, sums.last_access[c]);
  }
  a.subtree_pages = a.pages;
  return a;
}

}  // namespace

Status TreeSnapshotOptions::validate() const {
  if (max_nodes == 0) return Status::InvalidArgument("tree snapshot: max_nodes must be at least 1");
  if (label_tokens > 256) return Status::InvalidArgument("tree snapshot: label_tokens must be at most 256");
  return Status::Ok();
}

void order_tree(TreeSnapshot& snapshot) {
  std::vector<TreeNodeRecord>& nodes = snapshot.nodes;
  const ChildLists children(nodes);
  // Post-order sums with an explicit stack (trees can be deep).
  std::vector<uint32_t> post;
  post.reserve(nodes.size());
  std::vector<uint32_t> stack(children.roots.rbegin(), children.roots.rend());
  while (!stack.empty()) {
    const uint32_t r = stack.back();
    stack.pop_back();
    post.push_back(r);
    for (uint32_t c : children.of(r)) stack.push_back(c);
  }
  for (uint32_t r : post) nodes[r].subtree_pages = nodes[r].pages;
  for (size_t i = post.size(); i-- > 0;) {
    const TreeNodeRecord& n = nodes[post[i]];
    if (!n.is_namespace()) nodes[n.parent].subtree_pages += n.subtree_pages;
  }
  auto larger = [&](uint32_t a, uint32_t b) {
    return nodes[a].subtree_pages != nodes[b].subtree_pages ? nodes[a].subtree_pages > nodes[b].subtree_pages : a < b;
  };
  // Preorder, children largest first.
  std::vector<uint32_t> roots = children.roots;
  std::sort(roots.begin(), roots.end(), larger);
  std::vector<uint32_t> order, new_index(nodes.size());
  order.reserve(nodes.size());
  stack.assign(roots.rbegin(), roots.rend());
  std::vector<uint32_t> kids;
  while (!stack.empty()) {
    const uint32_t r = stack.back();
    stack.pop_back();
    new_index[r] = uint32_t(order.size());
    order.push_back(r);
    kids.assign(children.of(r).begin(), children.of(r).end());
    std::sort(kids.begin(), kids.end(), larger);
    stack.insert(stack.end(), kids.rbegin(), kids.rend());
  }
  std::vector<TreeNodeRecord> sorted;
  sorted.reserve(order.size());
  for (uint32_t r : order) {
    sorted.push_back(nodes[r]);
    if (!sorted.back().is_namespace()) sorted.back().parent = new_index[sorted.back().parent];
  }
  nodes = std::move(sorted);
}

TreeSnapshot summarize_tree(const TreeSnapshot& full, uint32_t max_nodes) {
  if (full.nodes.size() <= max_nodes) return full;
  TreeSnapshot out;
  out.page_tokens = full.page_tokens;
  out.tick = full.tick;
  out.total_nodes = full.total_nodes;
  out.total_pages = full.total_pages;
  if (max_nodes == 0) return out;
  const ChildLists children(full.nodes);
  const SubtreeSums sums(full.nodes);
  const std::vector<bool> kept = BranchChooser(full, children, max_nodes).choose();
  // `full` is in preorder and a kept record's parent is kept, so copying the
  // kept records in order keeps parents first; each parent's aggregate
  // follows its last kept child's subtree (a depth-first walk).
  std::vector<uint32_t> new_index(full.nodes.size(), kNoTreeParent);
  std::vector<uint32_t> left_out;
  struct Frame {
    uint32_t record;
    size_t next_child;
  };
  std::vector<Frame> stack;
  auto emit_kept = [&](uint32_t r) {
    TreeNodeRecord n = full.nodes[r];
    if (!n.is_namespace()) n.parent = new_index[n.parent];
    const auto label = full.label_tokens.begin() + n.label_begin;
    n.label_begin = uint32_t(out.label_tokens.size());
    out.label_tokens.insert(out.label_tokens.end(), label, label + n.label_count);
    new_index[r] = uint32_t(out.nodes.size());
    out.nodes.push_back(n);
    stack.push_back({r, 0});
  };
  auto emit_aggregate = [&](std::span<const uint32_t> siblings, uint32_t parent, uint32_t depth) {
    left_out.clear();
    for (uint32_t c : siblings)
      if (!kept[c]) left_out.push_back(c);
    if (!left_out.empty()) out.nodes.push_back(aggregate_of(full, sums, left_out, parent, depth));
  };
  for (uint32_t root : children.roots) {
    if (!kept[root]) continue;
    emit_kept(root);
    while (!stack.empty()) {
      Frame& f = stack.back();
      const std::span<const uint32_t> kids = children.of(f.record);
      while (f.next_child < kids.size() && !kept[kids[f.next_child]]) ++f.next_child;
      if (f.next_child < kids.size()) {
        emit_kept(kids[f.next_child++]);
        continue;
      }
      const TreeNodeRecord& n = full.nodes[f.record];
      emit_aggregate(kids, new_index[f.record], n.depth_pages + n.pages);
      stack.pop_back();
    }
  }
  emit_aggregate(children.roots, kNoTreeParent, 0);
  return out;
}

TreeSnapshot PrefixIndex::snapshot(const TreeSnapshotOptions& options) const {
  TreeSnapshot full;
  full.page_tokens = P_;
  full.tick = tick_;
  full.total_pages = pages_;
  std::vector<uint32_t> record_of(nodes_.size(), kNoTreeParent);
  uint32_t count = 0;
  for (uint32_t id = 0; id < nodes_.size(); ++id)
    if (nodes_[id].live) record_of[id] = count++;
  full.total_nodes = count;
  full.nodes.resize(count);
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.live) continue;
    TreeNodeRecord& r = full.nodes[record_of[id]];
    r.parent = n.is_root || n.parent == kNoNode ? kNoTreeParent : record_of[n.parent];
    r.pages = n.n;
    r.device_pages = n.tier_pages[kDev];
    r.host_pages = n.tier_pages[kHost];
    r.depth_pages = n.start_page;
    r.locks = n.lock_ref;
    r.hits = n.usage.hits;
    r.last_access = n.usage.last_access;
    if (n.is_root) r.namespace_id = n.ns_seed.lo;
    else if (n.n > 0 && n.hashes != nullptr) r.page_hash = n.hashes[0].lo;
    const uint32_t label = std::min<uint32_t>(options.label_tokens, n.n * P_);
    r.label_begin = uint32_t(full.label_tokens.size());
    r.label_count = label;
    full.label_tokens.insert(full.label_tokens.end(), n.tokens, n.tokens + label);
  }
  order_tree(full);
  const uint32_t max_nodes = std::max<uint32_t>(options.max_nodes, 1);
  if (full.nodes.size() <= max_nodes) return full;  // no copy when nothing is left out
  return summarize_tree(full, max_nodes);
}

}  // namespace kvtier
