// Eviction policies of the PrefixIndex: a policy turns a node's usage record
// into an ordering key; the index evicts the candidate with the smallest key
// first. A policy is a stateless, immutable value (safe to share between
// indexes and threads); the index owns its candidate ordering.
//
// Built in: LRU (default), LFU, FIFO, priority-then-LRU and SLRU. Custom
// policies implement EvictionPolicy and are passed through
// PrefixIndex::Options::policy.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// What the index records about every node. Times are logical ticks of the
// index (one per match/insert call), not wall time, so replays are
// deterministic.
struct NodeUsage {
  uint64_t last_access = 0;  // tick of the last match/insert that walked the node
  uint64_t created = 0;      // tick of the insert that created the node's pages
  uint64_t hits = 0;         // matches/inserts that walked the node
  int32_t priority = 0;      // max priority passed to insert over the node's lifetime
};

// Lexicographic ordering key: smaller is evicted first.
struct EvictKey {
  uint64_t major = 0;
  uint64_t minor = 0;
  constexpr auto operator<=>(const EvictKey&) const = default;
};

enum class EvictionPolicyKind : uint8_t { kLru = 0, kLfu, kFifo, kPriorityLru, kSlru };

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual EvictKey key(const NodeUsage& usage) const = 0;
  virtual std::string_view name() const = 0;
};

// The built-in policies:
//  lru      — least recently used first.
//  lfu      — fewest hits first, ties by recency.
//  fifo     — oldest insertion first, whatever its use.
//  priority — lowest insert priority first, ties by recency (SGLang's priority-aware eviction).
//  slru     — segmented LRU: nodes hit once (probation) go before nodes hit
//             at least twice (protected segment); LRU inside each segment.
//             The protected segment has no size cap of its own.
std::shared_ptr<const EvictionPolicy> make_eviction_policy(EvictionPolicyKind kind);
Result<EvictionPolicyKind> parse_eviction_policy(std::string_view name);  // lru|lfu|fifo|priority|slru
std::string_view eviction_policy_name(EvictionPolicyKind kind);

}  // namespace kvtier
