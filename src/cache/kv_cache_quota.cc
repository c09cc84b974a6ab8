// KVCache: per-tenant quotas on the device and host tiers (set_tenant_quotas).
#include "cache/kv_cache.h"

namespace kvtier {

void KVCache::set_tenant_quotas(std::map<std::string, TenantQuota> quotas) {
  quotas_ = std::move(quotas);
  for (const auto& [name, quota] : quotas_) (void)index_->tenant_id(name);  // listed in stats from the start
  enforce_quotas();
}

void KVCache::enforce_quotas() {
  const uint64_t page_bytes = options_.geometry.page_bytes();
  for (const auto& [name, quota] : quotas_) {
    const uint32_t id = index_->tenant_id(name);
    for (const TierKind tier : {TierKind::kDevice, TierKind::kHost}) {
      const uint64_t budget = tier == TierKind::kDevice ? quota.device : quota.host;
      const uint64_t held = index_->tenant_pages(id, tier), allowed = budget / page_bytes;
      if (budget == 0 || held <= allowed) continue;
      const uint64_t before = index_->tenant_pages(id, tier);
      const uint32_t over = uint32_t(std::min<uint64_t>(held - allowed, UINT32_MAX));
      // Best effort: pages in use stay until released; a failure here leaves them for the next commit.
      (void)(tier == TierKind::kDevice ? evict_device(over, true, id) : evict_host(over, true, id));
      stats_.quota_evicted_pages += before - std::min(before, index_->tenant_pages(id, tier));
    }
  }
}

std::vector<KVCacheStats::Tenant> KVCache::tenant_stats() const {
  std::vector<KVCacheStats::Tenant> out;
  const uint64_t page_bytes = options_.geometry.page_bytes();
  for (uint32_t id = 0; id < index_->tenant_count(); ++id) {
    KVCacheStats::Tenant t;
    t.name = index_->tenant_name(id);
    t.device_bytes = index_->tenant_pages(id, TierKind::kDevice) * page_bytes;
    t.host_bytes = index_->tenant_pages(id, TierKind::kHost) * page_bytes;
    if (auto q = quotas_.find(t.name); q != quotas_.end()) t.quota = q->second;
    const bool quota = !(t.quota == TenantQuota{});
    if (t.device_bytes > 0 || t.host_bytes > 0 || quota) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kvtier
