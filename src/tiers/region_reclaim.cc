#include "tiers/region_reclaim.h"

namespace kvtier {

void RegionReclaimOrder::add(uint32_t region, uint64_t tick) {
  remove(region);
  const uint64_t k = key(region, tick);
  key_of_.emplace(region, k);
  queue_.emplace(k, region);
}

void RegionReclaimOrder::touch(uint32_t region, uint64_t tick) {
  if (order_ != EvictionOrder::kLru) return;
  auto it = key_of_.find(region);
  if (it == key_of_.end()) return;
  queue_.erase({it->second, region});
  it->second = tick;
  queue_.emplace(tick, region);
}

void RegionReclaimOrder::remove(uint32_t region) {
  auto it = key_of_.find(region);
  if (it == key_of_.end()) return;
  queue_.erase({it->second, region});
  key_of_.erase(it);
}

std::optional<uint32_t> RegionReclaimOrder::victim(std::optional<uint32_t> active) const {
  for (const auto& [k, region] : queue_)
    if (region != active) return region;
  return std::nullopt;
}

}  // namespace kvtier
