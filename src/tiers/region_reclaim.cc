#include "tiers/region_reclaim.h"

#include <algorithm>

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
  release(region);
  auto it = key_of_.find(region);
  if (it == key_of_.end()) return;
  queue_.erase({it->second, region});
  key_of_.erase(it);
}

void RegionReclaimOrder::release(uint32_t region) {
  auto h = holds_.find(region);
  if (h == holds_.end()) return;
  grants_.erase({h->second.grant, region});
  holds_.erase(h);
}

size_t RegionReclaimOrder::held(Clock::time_point now) const {
  return size_t(std::count_if(holds_.begin(), holds_.end(), [&](const auto& h) { return h.second.until > now; }));
}

uint32_t RegionReclaimOrder::retain(uint32_t region, Clock::time_point until, uint32_t max_regions,
                                    Clock::time_point now) {
  if (!key_of_.count(region) || max_regions == 0 || until <= now) return 0;
  for (auto h = holds_.begin(); h != holds_.end();) {  // an expired hold takes no place
    const auto next = std::next(h);
    if (h->second.until <= now) release(h->first);
    h = next;
  }
  auto h = holds_.find(region);
  if (h != holds_.end()) {
    until = std::max(until, h->second.until);
    release(region);
  }
  holds_[region] = Hold{until, next_grant_};
  grants_.emplace(next_grant_++, region);
  uint32_t yielded = 0;
  while (holds_.size() > max_regions) {
    release(grants_.begin()->second);
    ++yielded;
  }
  return yielded;
}

std::optional<uint32_t> RegionReclaimOrder::victim(std::optional<uint32_t> active, Clock::time_point now) {
  std::optional<uint32_t> first;
  for (const auto& [k, region] : queue_) {
    if (region == active) continue;
    if (!first) first = region;
    auto h = holds_.find(region);
    if (h != holds_.end() && h->second.until <= now) release(region);
    else if (h != holds_.end()) continue;
    return region;
  }
  return first;  // every region is held: the first in order goes anyway
}

}  // namespace kvtier
