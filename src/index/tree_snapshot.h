// TreeSnapshot: a read-only, bounded copy of the PrefixIndex's radix tree,
// for display (the server's GET /v1/cache/tree and its dashboard).
//
// PrefixIndex::snapshot() copies every node into flat records and keeps the
// largest branches within TreeSnapshotOptions::max_nodes records; the
// branches left out are summed into aggregate records, one per parent, so
// token counts still add up. summarize_tree() applies the same reduction to
// a snapshot already taken (an HTTP thread reducing the published snapshot
// to a client's max_nodes without touching the index).
//
// Records come parents first (preorder, children largest first), so a
// client lays the tree out in one pass. Lower tiers (disk, remote) are not
// in the tree (the index does not track them); their occupancy is reported
// elsewhere (KVCacheStats).
//
// Thread safety: a snapshot is a plain value; once taken it is independent
// of the index and may be read from any thread. Taking one is a PrefixIndex
// call like any other: on the index's own thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier {

inline constexpr uint32_t kNoTreeParent = UINT32_MAX;

// One node of the tree, or (aggregate > 0) the sum of sibling subtrees left out.
struct TreeNodeRecord {
  uint32_t parent = kNoTreeParent;  // record index of the parent; kNoTreeParent for a namespace root
  uint32_t pages = 0;               // own pages (aggregate: every page of the subtrees it stands for)
  uint32_t device_pages = 0;        // of `pages`, resident on the device (a page may be on both)
  uint32_t host_pages = 0;          // of `pages`, resident on the host
  uint64_t subtree_pages = 0;       // pages of this record and of every record below it
  uint32_t depth_pages = 0;         // pages on the path before this node
  uint32_t locks = 0;               // running requests holding the node (its lock count)
  uint32_t aggregate = 0;           // 0: a real node; n: stands for n nodes left out
  uint64_t hits = 0;                // lookups and inserts that walked the node (aggregate: the most of any)
  uint64_t last_access = 0;         // index tick of the last walk (aggregate: the latest)
  uint32_t label_begin = 0;         // first tokens of its own pages: TreeSnapshot::label_tokens[begin, begin + count)
  uint32_t label_count = 0;
  uint64_t namespace_id = 0;        // namespace roots: the low 64 bits of the namespace seed
  uint64_t page_hash = 0;           // nodes: the low 64 bits of the hash of its first page (a label without text)
  bool is_namespace() const { return parent == kNoTreeParent; }
};

struct TreeSnapshot {
  uint32_t page_tokens = 0;
  uint64_t tick = 0;          // the index's operation counter when taken (compare with last_access)
  uint64_t total_nodes = 0;   // nodes in the index, namespace roots included
  uint64_t total_pages = 0;   // cached pages in the index
  std::vector<TreeNodeRecord> nodes;  // preorder; children largest first
  std::vector<TokenId> label_tokens;
};

struct TreeSnapshotOptions {
  uint32_t max_nodes = 20000;  // records kept, aggregates included (at least one per namespace shown)
  uint32_t label_tokens = 8;   // leading tokens of each node kept for its label

  Status validate() const;
};

// `full` (preorder, subtree_pages filled) reduced to at most `max_nodes`
// records: namespaces and branches are taken largest first; each parent's
// left-out children become one aggregate record. Pure.
TreeSnapshot summarize_tree(const TreeSnapshot& full, uint32_t max_nodes);

// Fills subtree_pages and puts records in preorder, children largest first.
// `nodes` may come in any order as long as parent indices are valid. Pure.
void order_tree(TreeSnapshot& snapshot);

}  // namespace kvtier
