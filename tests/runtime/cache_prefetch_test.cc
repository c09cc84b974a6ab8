// Read-ahead: disk chunks prefetched into the host tier, and host pages on into
// free device pages, are served with the recompute's output; corrupt chunks
// are dropped, never indexed; promotion never evicts.
#include "cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kDevice = 0, kHost = 1, kDisk = 2;

TEST(CachePrefetch, DiskChunksLandOnTheHostThenTheDeviceAndServeExactly) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 21);
  Outcome ref = only_on_disk(rig, prompt);
  auto n = rig.cache->prefetch(rig.ns, prompt);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->loading_pages, 18u);  // 4 whole chunks of 4 pages and the prompt's 2-page tail
  EXPECT_EQ(n->cached_pages, 18u);
  EXPECT_EQ(n->promoting_pages, 0u);  // nothing on the host yet
  ASSERT_TRUE(rig.cache->drain().ok());
  auto st = rig.cache->stats();
  EXPECT_EQ(st.prefetched_pages, 18u);
  EXPECT_EQ(st.promoted_pages, 18u);  // the device's 256 pages are free
  EXPECT_EQ(st.index.host_pages, 18u);
  EXPECT_EQ(st.index.device_pages, 18u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  Outcome hit = rig.cached(prompt, 8);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDevice], 288u);  // in place
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost], 0u);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDisk], 0u);
  expect_same(hit, ref, 1e-5);
}

TEST(CachePrefetch, HostPagesGoOnIntoTheDevice) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 26);
  Outcome ref = rig.reference(prompt, 8);
  rig.cached(prompt, 8);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 1000).ok());  // the host copies stay
  ASSERT_EQ(rig.cache->stats().index.device_pages, 0u);
  auto n = rig.cache->prefetch(rig.ns, prompt);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->loading_pages, 0u);
  EXPECT_EQ(n->promoting_pages, 18u);  // the prompt's whole pages but its last token's
  Outcome hit = rig.cached(prompt, 8);  // waits for the copies, then uses them in place
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDevice], 288u);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost], 0u);
  expect_same(hit, ref, 1e-5);
  EXPECT_EQ(rig.cache->stats().promoted_pages, 18u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
}

TEST(CachePrefetch, PromotionTakesOnlyHalfTheFreeDevicePagesAndNeverEvicts) {
  RigOptions o;
  o.device_pages = 40;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 27);
  Outcome ref = only_on_disk(rig, prompt);
  // A running sequence holds 30 of the 40 pages: 10 are free.
  auto other = CacheRig::random_tokens(470, 28);
  auto held = rig.cache->fresh(rig.ns, other.size());
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(rig.cache->pool().free_pages(), 10u);
  const uint64_t evicted = rig.cache->stats().evicted_pages_by_tier[kDevice];
  ASSERT_TRUE(rig.cache->prefetch(rig.ns, prompt).ok());
  ASSERT_TRUE(rig.cache->drain().ok());
  auto st = rig.cache->stats();
  EXPECT_EQ(st.prefetched_pages, 18u);
  EXPECT_EQ(st.promoted_pages, 5u);  // half of the 10 free pages
  EXPECT_EQ(st.evicted_pages_by_tier[kDevice], evicted);
  EXPECT_EQ(rig.cache->pool().free_pages(), 5u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  rig.cache->release(*held);
  Outcome hit = rig.cached(prompt, 8);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDevice], 80u);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost], 208u);
  expect_same(hit, ref, 1e-5);
}

// The shape that stalled a server (write-through, read-ahead): a prompt's first
// pages on the device only (their host copies evicted), its later pages read
// back onto the host only (no free device page to promote them into). No
// eviction can free those device pages: each one would leave a hole before the
// host-only pages. A request that needed them answered Busy on every retry
// with nothing running; the cache now drops the host-only pages after them
// (KVCache::cut_for_device) and serves it, exactly.
TEST(CachePrefetch, DevicePagesBeforeReadAheadHostPagesCanStillBeEvicted) {
  RigOptions o;
  o.device_pages = 40;
  CacheRig rig(o);
  auto other = CacheRig::random_tokens(580, 32);
  Outcome ref = rig.reference(other, 8);
  auto prompt = CacheRig::random_tokens(300, 31);  // 18 whole pages, 4 whole chunks
  rig.cached(prompt, 8);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 1000).ok());   // device-only now
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 11).ok());   // 19 pages with the reply; 8.. trimmed
  ASSERT_EQ(rig.cache->stats().index.device_pages, 8u);
  ASSERT_EQ(rig.cache->stats().index.host_pages, 0u);
  auto held = rig.cache->fresh(rig.ns, 32 * 16);  // every free device page: no promotion
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  ASSERT_EQ(rig.cache->pool().free_pages(), 0u);
  ASSERT_TRUE(rig.cache->prefetch(rig.ns, prompt).ok());  // pages 8..17 from disk onto the host
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_EQ(rig.cache->stats().index.host_pages, 10u);
  ASSERT_EQ(rig.cache->stats().promoted_pages, 0u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  rig.cache->release(*held);
  // A request that needs 37 of the 40 device pages: 32 are free, the rest are prompt's.
  Outcome got = rig.cached(other, 8);
  expect_same(got, ref, 1e-5);
  auto st = rig.cache->stats();
  EXPECT_EQ(st.cut_subtrees, 1u);
  EXPECT_EQ(st.host_free_slots + st.index.host_pages, st.host_slots);  // the cut pages' slots came back
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
}

TEST(CachePrefetch, LookupWaitsForChunksInFlightInsteadOfReadingThemTwice) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 22);
  Outcome ref = only_on_disk(rig, prompt);
  const uint64_t before = rig.cache->stats().bytes_loaded_by_tier[kDisk];
  ASSERT_TRUE(rig.cache->prefetch(rig.ns, prompt).ok());
  Outcome hit = rig.cached(prompt, 8);  // right away: the reads may still be in flight
  expect_same(hit, ref, 1e-5);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDevice] + hit.report.reused_tokens_by_tier[kHost] +
                hit.report.reused_tokens_by_tier[kDisk],
            288u);
  ASSERT_TRUE(rig.cache->drain().ok());
  // Every chunk (and the tail) crossed from the disk exactly once.
  EXPECT_EQ(rig.cache->stats().bytes_loaded_by_tier[kDisk] - before, 18u * rig.cache->geometry().page_bytes());
}

TEST(CachePrefetch, CorruptChunksAreDroppedAndCounted) {
  RigOptions o;
  o.region_bytes = 64 << 10;  // one chunk per region file
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 23);
  Outcome ref = only_on_disk(rig, prompt);
  corrupt_region_files(rig.dir_);
  ASSERT_TRUE(rig.cache->prefetch(rig.ns, prompt).ok());
  ASSERT_TRUE(rig.cache->drain().ok());
  auto st = rig.cache->stats();
  EXPECT_GE(st.prefetch_failures, 1u);
  EXPECT_EQ(st.index.pages, st.prefetched_pages);  // only verified leading chunks were indexed
  EXPECT_EQ(st.host_free_slots + st.index.host_pages, st.host_slots);  // no slot leaked
  Outcome hit = rig.cached(prompt, 8);
  expect_same(hit, ref, 1e-5);
}

TEST(CachePrefetch, UsesAtMostHalfTheHostTier) {
  RigOptions o;
  o.host_pages = 12;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 24);
  Outcome ref = only_on_disk(rig, prompt);
  auto n = rig.cache->prefetch(rig.ns, prompt);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->loading_pages, 4u);  // half of 12 slots, in whole chunks of 4
  auto again = rig.cache->prefetch(rig.ns, prompt);  // waits for the first, then reads the next chunk
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_LE(rig.cache->stats().index.host_pages, 12u);
  Outcome hit = rig.cached(prompt, 8);
  EXPECT_GT(hit.report.reused_tokens_by_tier[kDevice] + hit.report.reused_tokens_by_tier[kHost], 0u);
  expect_same(hit, ref, 1e-5);
}

TEST(CachePrefetch, NothingToDoWithoutLowerTierHits) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 25);
  auto n = rig.cache->prefetch(rig.ns, prompt);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->loading_pages, 0u);
  rig.cached(prompt, 4);
  ASSERT_TRUE(rig.cache->drain().ok());
  n = rig.cache->prefetch(rig.ns, prompt);  // all on the device already
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->loading_pages, 0u);
}

}  // namespace
}  // namespace kvtier::testing
