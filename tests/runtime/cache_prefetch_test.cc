// Read-ahead: disk chunks prefetched into the host tier are served from the
// host with the recompute's output; corrupt ones are dropped, never indexed.
#include "cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kHost = 1, kDisk = 2;

// Cached once, then only on disk (device and host flushed).
Outcome only_on_disk(CacheRig& rig, std::span<const TokenId> prompt) {
  Outcome ref = rig.reference(prompt, 8);
  rig.cached(prompt, 8);
  EXPECT_TRUE(rig.cache->drain().ok());
  EXPECT_TRUE(rig.cache->flush().ok());
  EXPECT_EQ(rig.cache->stats().index.pages, 0u);
  return ref;
}

TEST(CachePrefetch, DiskChunksLandOnTheHostAndServeExactly) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 21);
  Outcome ref = only_on_disk(rig, prompt);
  auto n = rig.cache->prefetch(rig.ns, prompt);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->loading_pages, 16u);  // 4 whole chunks of 4 pages
  EXPECT_EQ(n->cached_pages, 16u);
  ASSERT_TRUE(rig.cache->drain().ok());
  auto st = rig.cache->stats();
  EXPECT_EQ(st.prefetched_pages, 16u);
  EXPECT_EQ(st.index.host_pages, 16u);
  Outcome hit = rig.cached(prompt, 8);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost], 256u);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDisk], 0u);
  expect_same(hit, ref, 1e-5);
}

TEST(CachePrefetch, LookupWaitsForChunksInFlightInsteadOfReadingThemTwice) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 22);
  Outcome ref = only_on_disk(rig, prompt);
  const uint64_t before = rig.cache->stats().bytes_loaded_by_tier[kDisk];
  ASSERT_TRUE(rig.cache->prefetch(rig.ns, prompt).ok());
  Outcome hit = rig.cached(prompt, 8);  // right away: the reads may still be in flight
  expect_same(hit, ref, 1e-5);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost] + hit.report.reused_tokens_by_tier[kDisk], 256u);
  ASSERT_TRUE(rig.cache->drain().ok());
  // Every chunk crossed from the disk exactly once.
  EXPECT_EQ(rig.cache->stats().bytes_loaded_by_tier[kDisk] - before, 16u * rig.cache->geometry().page_bytes());
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
  EXPECT_GT(hit.report.reused_tokens_by_tier[kHost], 0u);
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
