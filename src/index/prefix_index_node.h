// The node record of PrefixIndex, shared by its two implementation files.
// Internal to src/index.
#pragma once

#include "index/payload_arena.h"
#include "index/prefix_index.h"

namespace kvtier {

inline constexpr uint32_t kNoNode = UINT32_MAX;
inline constexpr int kDev = 0;   // index of the device tier in per-tier arrays
inline constexpr int kHost = 1;  // index of the host tier

inline bool has_tier(PageLocation l, int t) { return t == kDev ? l.device.valid() : l.host.valid(); }

struct PrefixIndex::Node {
  uint32_t parent = kNoNode;
  uint32_t generation = 0;
  uint32_t root = kNoNode;        // namespace root (itself for a root)
  uint32_t start_page = 0;        // pages on the path before this node
  uint32_t lock_ref = 0;
  uint32_t retain_ref = 0;         // retain() holds on the path through this node
  uint32_t n_children = 0;
  uint32_t tier_pages[2] = {};     // own pages resident on device / host
  uint32_t both_pages = 0;         // own pages resident on both
  uint32_t child_with_tier[2] = {};  // children whose tier_pages[t] > 0
  uint32_t scan_end[2] = {};       // no page at or past this index is resident in tier t
  bool live = false;
  bool is_root = false;
  bool in_cand[2] = {};
  uint64_t first_key = 0;          // edge key of the first page (edge table entry)
  NodeUsage usage;
  EvictKey key;                    // key under which the node sits in cand_ sets
  PageHash ns_seed;                // roots only
  uint32_t tenant = 0;             // roots only: NsKey::tenant
  // Per-page arrays in one arena block laid out [hashes | locs | tokens],
  // each `cap` pages long; the first `n` pages are in use.
  index_detail::ArenaBlock block;
  uint32_t n = 0;
  uint32_t cap = 0;
  PageHash* hashes = nullptr;  // null when store_hashes is off
  PageLocation* locs = nullptr;
  TokenId* tokens = nullptr;

  uint32_t n_pages() const { return n; }
};

}  // namespace kvtier
