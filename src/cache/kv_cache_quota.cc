// KVCache: per-tenant quotas on the device, host and disk tiers (set_tenant_quotas).
#include <algorithm>

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
      if (tier == TierKind::kHost) yield_hints_over(id, allowed);
      stats_.quota_evicted_pages += before - std::min(before, index_->tenant_pages(id, tier));
    }
    // Disk: what landed so far (writes still in flight count from the next commit on).
    auto seeds = disk_seeds_.find(id);
    if (quota.disk == 0 || !disk_ || seeds == disk_seeds_.end()) continue;
    if (disk_->namespace_bytes(seeds->second.seeds) > quota.disk)
      stats_.quota_evicted_pages += disk_->trim_namespaces(seeds->second.seeds, quota.disk);
  }
}

uint64_t KVCache::host_quota_pages(uint32_t tenant) const {
  if (quotas_.empty()) return UINT64_MAX;
  const auto q = quotas_.find(index_->tenant_name(tenant));
  return q == quotas_.end() || q->second.host == 0 ? UINT64_MAX : q->second.host / options_.geometry.page_bytes();
}

// Retained host pages are out of eviction's reach (PrefixIndex I6): while the tenant is still over
// its host quota, its oldest hint yields and what it held is evicted.
void KVCache::yield_hints_over(uint32_t tenant, uint64_t allowed_pages) {
  for (size_t i = 0; i < retained_.size() && index_->tenant_pages(tenant, TierKind::kHost) > allowed_pages;) {
    if (retained_[i].tenant != tenant) {
      ++i;
      continue;
    }
    let_go(i);
    ++stats_.retain_yields;
    const uint64_t held = index_->tenant_pages(tenant, TierKind::kHost);
    if (held > allowed_pages) (void)evict_host(uint32_t(std::min<uint64_t>(held - allowed_pages, UINT32_MAX)), true, tenant);
  }
}

void KVCache::note_disk_namespace(const NsKey& ns) {
  if (!disk_) return;
  DiskSeeds& d = disk_seeds_[ns.tenant];
  if (std::find(d.seeds.begin(), d.seeds.end(), ns.seed) != d.seeds.end()) return;
  // A client may open many namespaces (cache_salt): the set drops those with nothing left on disk
  // each time it doubles, so it stays within the log's own count of namespaces.
  if (d.seeds.size() >= 2 * std::max<size_t>(d.pruned_at, 8)) {
    std::erase_if(d.seeds, [&](const PageHash& s) { return disk_->namespace_bytes({&s, 1}) == 0; });
    d.pruned_at = d.seeds.size();
  }
  d.seeds.push_back(ns.seed);
}

uint64_t KVCache::tenant_disk_bytes(uint32_t tenant) const {
  auto it = disk_seeds_.find(tenant);
  return it == disk_seeds_.end() || !disk_ ? 0 : disk_->namespace_bytes(it->second.seeds);
}

KVCacheStats::Tenant KVCache::tenant_usage(const std::string& tenant) { return tenant_record(index_->tenant_id(tenant)); }

KVCacheStats::Tenant KVCache::tenant_record(uint32_t id) const {
  const uint64_t page_bytes = options_.geometry.page_bytes();
  KVCacheStats::Tenant t;
  t.name = index_->tenant_name(id);
  t.device_bytes = index_->tenant_pages(id, TierKind::kDevice) * page_bytes;
  t.host_bytes = index_->tenant_pages(id, TierKind::kHost) * page_bytes;
  t.disk_bytes = tenant_disk_bytes(id);
  if (auto q = quotas_.find(t.name); q != quotas_.end()) t.quota = q->second;
  return t;
}

std::vector<KVCacheStats::Tenant> KVCache::tenant_stats() const {
  std::vector<KVCacheStats::Tenant> out;
  for (uint32_t id = 0; id < index_->tenant_count(); ++id) {
    KVCacheStats::Tenant t = tenant_record(id);
    const bool quota = !(t.quota == TenantQuota{});
    if (t.device_bytes > 0 || t.host_bytes > 0 || t.disk_bytes > 0 || quota) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kvtier
