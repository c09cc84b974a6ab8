// Per-tenant quotas (KVCache::set_tenant_quotas): a tenant over its device or
// host budget gives up its own coldest pages after each commit, one over its
// disk budget its oldest disk entries; another tenant's pages, colder or not,
// stay.
#include <gtest/gtest.h>

#include "cache_rig.h"
#include "common/clock.h"

namespace kvtier::testing {
namespace {

uint32_t cached_pages(CacheRig& rig, std::span<const TokenId> prompt) {
  auto look = rig.cache->lookup(rig.ns, prompt);
  EXPECT_TRUE(look.ok());
  return look.ok() ? look->cached_pages() : 0;
}

const KVCacheStats::Tenant* find(const KVCacheStats& s, const std::string& name) {
  for (const auto& t : s.tenants)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(CacheQuota, TenantOverItsQuotaGivesUpItsOwnPages) {
  CacheRig rig({.device_pages = 64, .host_pages = 64, .disk = false});
  const uint64_t page = rig.cache->options().geometry.page_bytes();
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 5 * page, .host = 6 * page, .disk = 0}}});
  // globex first (the coldest pages are its), then acme: each 65-token prompt commits 4 whole pages.
  rig.ns.tenant = "globex";
  const auto g0 = CacheRig::random_tokens(65, 10);
  rig.cached(g0, 2);
  for (uint32_t i = 1; i < 3; ++i) rig.cached(CacheRig::random_tokens(65, 10 + i), 2);
  rig.ns.tenant = "acme";
  std::vector<TokenId> last;
  for (uint32_t i = 0; i < 3; ++i) rig.cached(last = CacheRig::random_tokens(65, 20 + i), 2);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  const KVCacheStats s = rig.cache->stats();
  const auto* acme = find(s, "acme");
  const auto* globex = find(s, "globex");
  ASSERT_TRUE(acme && globex);
  EXPECT_LE(acme->device_bytes, 5 * page);
  EXPECT_LE(acme->host_bytes, 6 * page);
  EXPECT_GT(acme->host_bytes, 0u);
  EXPECT_EQ(acme->quota.host, 6 * page);
  EXPECT_EQ(globex->device_bytes, 12 * page) << "globex gave up pages for acme's quota";
  EXPECT_EQ(globex->host_bytes, 12 * page);
  EXPECT_GT(s.quota_evicted_pages, 0u);
  EXPECT_GT(cached_pages(rig, last), 0u) << "acme's newest prompt went first";
  rig.ns.tenant = "globex";
  EXPECT_EQ(cached_pages(rig, g0), 4u);
}

// Pages a prefetch reads onto the host and promotes into the device count against the tenant's
// quotas as they land: a prefetch left a tenant at four times its host and device quotas until
// somebody's next commit.
TEST(CacheQuota, PrefetchedPagesStayWithinTheTenantsQuotas) {
  CacheRig rig({.device_pages = 64, .host_pages = 64, .disk = true});
  const uint64_t page = rig.cache->options().geometry.page_bytes();
  rig.ns.tenant = "acme";
  const auto a = CacheRig::random_tokens(16 * 12 + 1, 30);  // 12 pages, three chunks
  rig.cached(a, 2);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());  // on disk only
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 4 * page, .host = 4 * page, .disk = 0}}});
  auto started = rig.cache->prefetch(rig.ns, a);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  ASSERT_EQ(started->loading_pages, 12u);
  ASSERT_TRUE(rig.cache->drain().ok());
  rig.ns.tenant = "globex";
  (void)cached_pages(rig, CacheRig::random_tokens(17, 31));  // any call lands it (and its promotion)
  ASSERT_TRUE(rig.cache->drain().ok());
  (void)cached_pages(rig, CacheRig::random_tokens(17, 32));
  const KVCacheStats s = rig.cache->stats();
  const auto* acme = find(s, "acme");
  ASSERT_TRUE(acme);
  EXPECT_GT(s.prefetched_pages, 4u);
  EXPECT_LE(acme->host_bytes, 4 * page);
  EXPECT_LE(acme->device_bytes, 4 * page);
}

// Device and host of 64 pages, no disk, hints timed by `clock`.
RigOptions hinting_rig(const Clock* clock) {
  RigOptions o;
  o.device_pages = 64;
  o.host_pages = 64;
  o.disk = false;
  o.clock = clock;
  return o;
}

// Retained pages count against the host quota: the tenant's oldest hints yield past it. Hints
// were out of eviction's reach, so five prompts held for an hour kept 24 host pages against 6.
TEST(CacheQuota, RetainedPagesStayWithinTheHostQuota) {
  ManualClock clock;
  CacheRig rig(hinting_rig(&clock));
  const uint64_t page = rig.cache->options().geometry.page_bytes();
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 0, .host = 6 * page, .disk = 0}}});
  rig.ns.tenant = "acme";
  std::vector<TokenId> last;
  for (uint32_t i = 0; i < 6; ++i) {
    rig.cached(last = CacheRig::random_tokens(65, 20 + i), 2);
    ASSERT_TRUE(rig.cache->retain(rig.ns, last, std::chrono::seconds(3600)).ok());
    EXPECT_LE(find(rig.cache->stats(), "acme")->host_bytes, 6 * page) << "after hint " << i;
  }
  const KVCacheStats s = rig.cache->stats();
  EXPECT_GE(s.retain_active, 1u) << "the newest hint holds";
  EXPECT_GT(s.retain_yields, 0u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
}

// A hint larger than its tenant's host quota by itself retains nothing and leaves the tenant's
// other hints: it cleared them, then yielded itself, and retain() still reported it retained.
TEST(CacheQuota, AHintOverTheTenantsHostQuotaAloneRetainsNothing) {
  ManualClock clock;
  CacheRig rig(hinting_rig(&clock));
  const uint64_t page = rig.cache->options().geometry.page_bytes();
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 0, .host = 6 * page, .disk = 0}}});
  rig.ns.tenant = "acme";
  const auto a = CacheRig::random_tokens(65, 1);  // 4 whole pages
  rig.cached(a, 2);
  EXPECT_GT(*rig.cache->retain(rig.ns, a, std::chrono::seconds(3600)), 0u);
  const auto big = CacheRig::random_tokens(10 * 16 + 1, 2);  // 10 whole pages
  rig.cached(big, 1);
  EXPECT_EQ(*rig.cache->retain(rig.ns, big, std::chrono::seconds(3600)), 0u);
  EXPECT_EQ(rig.cache->stats().retain_active, 1u) << "the tenant's first hint stays";
}

// Under write-back, a tenant over its device quota demotes its pages to the host by making room
// there from its own host pages, not another tenant's (globex lost 8 of its 16 host pages).
TEST(CacheQuota, WriteBackDemotionForAQuotaTakesNoOtherTenantsHostPages) {
  RigOptions o;
  o.device_pages = 64;
  o.host_pages = 16;
  o.disk = false;
  o.write_policy = WritePolicy::kWriteBack;
  CacheRig rig(o);
  const uint64_t page = rig.cache->options().geometry.page_bytes();
  rig.ns.tenant = "globex";
  for (uint32_t i = 0; i < 4; ++i) rig.cached(CacheRig::random_tokens(65, 10 + i), 2);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 64).ok());  // demoted: globex fills the host
  const uint64_t globex_host = find(rig.cache->stats(), "globex")->host_bytes;
  ASSERT_EQ(globex_host, 16 * page);
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 4 * page, .host = 0, .disk = 0}}});
  rig.ns.tenant = "acme";
  for (uint32_t i = 0; i < 3; ++i) rig.cached(CacheRig::random_tokens(65, 20 + i), 2);
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(find(s, "globex")->host_bytes, globex_host);
  EXPECT_LE(find(s, "acme")->device_bytes, 4 * page);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
}

TEST(CacheQuota, TenantOverItsDiskQuotaGivesUpItsOwnOldestEntries) {
  RigOptions o;
  o.device_pages = 64;
  o.host_pages = 64;
  CacheRig rig(o);
  // Each 65-token prompt commits 4 pages: one whole chunk, written through to disk.
  auto commit = [&](const std::string& tenant, const std::vector<TokenId>& prompt) {
    rig.ns.tenant = tenant;
    rig.cached(prompt, 1);
    ASSERT_TRUE(rig.cache->drain().ok());  // the chunk's put has landed before the next commit counts it
  };
  std::vector<std::vector<TokenId>> globex, acme;
  for (uint32_t i = 0; i < 3; ++i) commit("globex", globex.emplace_back(CacheRig::random_tokens(65, 10 + i)));
  const KVCacheStats before = rig.cache->stats();
  const auto* g = find(before, "globex");
  ASSERT_TRUE(g);
  const uint64_t entry = g->disk_bytes / 3;
  ASSERT_GT(entry, 0u);
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 0, .host = 0, .disk = 2 * entry}}});
  for (uint32_t i = 0; i < 5; ++i) {
    commit("acme", acme.emplace_back(CacheRig::random_tokens(65, 20 + i)));
    const KVCacheStats now = rig.cache->stats();
    const auto* a = find(now, "acme");
    ASSERT_TRUE(a);
    EXPECT_LE(a->disk_bytes, 3 * entry) << "at most the budget plus the chunk that landed since the last commit";
  }
  rig.cache->set_tenant_quotas({{"acme", TenantQuota{.device = 0, .host = 0, .disk = 2 * entry}}});  // enforces now
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(find(s, "acme")->disk_bytes, 2 * entry);
  EXPECT_EQ(find(s, "acme")->quota.disk, 2 * entry);
  EXPECT_EQ(find(s, "globex")->disk_bytes, 3 * entry) << "globex gave up disk entries for acme's quota";
  EXPECT_EQ(s.quota_evicted_pages, 3u * 4u);
  // With the device and host emptied, what is cached is what the disk holds.
  ASSERT_TRUE(rig.cache->flush().ok());
  rig.ns.tenant = "acme";
  EXPECT_EQ(cached_pages(rig, acme[0]), 0u) << "acme's oldest entry should have gone";
  EXPECT_EQ(cached_pages(rig, acme[3]), 4u);
  EXPECT_EQ(cached_pages(rig, acme[4]), 4u);
  rig.ns.tenant = "globex";
  EXPECT_EQ(cached_pages(rig, globex[0]), 4u);
}

}  // namespace
}  // namespace kvtier::testing
