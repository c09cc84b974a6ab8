#include "index/eviction_policy.h"

#include <string>

namespace kvtier {
namespace {

// Priorities are signed; shifting by 2^31 maps them onto an unsigned order.
uint64_t priority_rank(int32_t p) { return static_cast<uint64_t>(static_cast<int64_t>(p) + (int64_t{1} << 31)); }

class LruPolicy final : public EvictionPolicy {
 public:
  EvictKey key(const NodeUsage& u) const override { return {u.last_access, 0}; }
  std::string_view name() const override { return "lru"; }
};

class LfuPolicy final : public EvictionPolicy {
 public:
  EvictKey key(const NodeUsage& u) const override { return {u.hits, u.last_access}; }
  std::string_view name() const override { return "lfu"; }
};

class FifoPolicy final : public EvictionPolicy {
 public:
  EvictKey key(const NodeUsage& u) const override { return {u.created, 0}; }
  std::string_view name() const override { return "fifo"; }
};

class PriorityLruPolicy final : public EvictionPolicy {
 public:
  EvictKey key(const NodeUsage& u) const override { return {priority_rank(u.priority), u.last_access}; }
  std::string_view name() const override { return "priority"; }
};

class SlruPolicy final : public EvictionPolicy {
 public:
  EvictKey key(const NodeUsage& u) const override { return {u.hits >= 2 ? 1u : 0u, u.last_access}; }
  std::string_view name() const override { return "slru"; }
};

}  // namespace

std::shared_ptr<const EvictionPolicy> make_eviction_policy(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLfu: return std::make_shared<LfuPolicy>();
    case EvictionPolicyKind::kFifo: return std::make_shared<FifoPolicy>();
    case EvictionPolicyKind::kPriorityLru: return std::make_shared<PriorityLruPolicy>();
    case EvictionPolicyKind::kSlru: return std::make_shared<SlruPolicy>();
    case EvictionPolicyKind::kLru: break;
  }
  return std::make_shared<LruPolicy>();
}

Result<EvictionPolicyKind> parse_eviction_policy(std::string_view name) {
  if (name == "lru") return EvictionPolicyKind::kLru;
  if (name == "lfu") return EvictionPolicyKind::kLfu;
  if (name == "fifo") return EvictionPolicyKind::kFifo;
  if (name == "priority") return EvictionPolicyKind::kPriorityLru;
  if (name == "slru") return EvictionPolicyKind::kSlru;
  return Status::InvalidArgument("unknown eviction policy '" + std::string(name) +
                                 "' (expected lru, lfu, fifo, priority or slru)");
}

std::string_view eviction_policy_name(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru: return "lru";
    case EvictionPolicyKind::kLfu: return "lfu";
    case EvictionPolicyKind::kFifo: return "fifo";
    case EvictionPolicyKind::kPriorityLru: return "priority";
    case EvictionPolicyKind::kSlru: return "slru";
  }
  return "?";
}

}  // namespace kvtier
