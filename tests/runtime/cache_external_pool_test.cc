// KVCache with its pool in caller-owned memory (KVCacheOptions::pool_memory):
// loads from every tier land in the caller's buffer and give the same output
// as recompute; chunk_keys() names exactly the chunks the disk tier holds.
#include <gtest/gtest.h>

#include "cache_rig.h"

namespace kvtier::testing {
namespace {

TEST(CacheExternalPool, LoadsLandInCallerMemoryAndMatchRecompute) {
  CacheRig probe;  // for the geometry only
  const KVGeometry g = probe.cache->geometry();
  std::vector<std::byte> raw(g.page_bytes() * 64 + 64);
  std::byte* base = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;

  KVCacheOptions co = probe.cache->options();
  co.pool_memory = std::span(base, g.page_bytes() * 64);
  co.disk_dir = (probe.dir_ / "external").string();
  auto cache = KVCache::create(co);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  EXPECT_EQ((*cache)->pool().num_pages(), 64u);
  EXPECT_EQ((*cache)->pool().memory().data(), base);
  probe.engine.reset();
  probe.cache = std::move(*cache);
  auto e = engine::create_forward(probe.model_, probe.cache->pool());
  ASSERT_TRUE(e.ok());
  probe.engine = std::move(*e);

  const auto prompt = CacheRig::random_tokens(16 * 9 + 3, 7);
  const Outcome ref = probe.reference(prompt, 3);
  probe.cached(prompt, 0);
  ASSERT_TRUE(probe.cache->drain().ok());
  for (TierKind t : {TierKind::kDevice, TierKind::kHost, TierKind::kDisk}) {
    if (t == TierKind::kHost) {
      ASSERT_TRUE(probe.cache->evict(TierKind::kDevice, 1000).ok());
    }
    if (t == TierKind::kDisk) {
      ASSERT_TRUE(probe.cache->flush().ok());
    }
    const Outcome got = probe.cached(prompt, 3, /*commit=*/false);
    EXPECT_GT(got.report.reused_tokens_by_tier[static_cast<size_t>(t)], 0u) << tier_name(t);
    expect_same(got, ref, 1e-6);
  }
}

TEST(CacheExternalPool, ChunkKeysAreTheDiskTiersKeys) {
  CacheRig rig;  // chunks of 4 pages of 16 tokens
  const auto prompt = CacheRig::random_tokens(16 * 9 + 3, 11);
  rig.cached(prompt, 0);
  ASSERT_TRUE(rig.cache->drain().ok());
  const auto keys = rig.cache->chunk_keys(rig.ns, prompt);
  ASSERT_EQ(keys.size(), 2u);  // 9 whole pages → 2 whole chunks
  std::vector<PageHash> hashes;
  for (const auto& k : keys) {
    EXPECT_EQ(k.ns, keys[0].ns);
    hashes.push_back(k.hash);
  }
  EXPECT_EQ(rig.cache->disk()->exists_prefix(keys[0].ns, hashes), 2u);
  // A salted namespace has other keys; the prefix of a prompt has a prefix of its keys.
  EXPECT_NE(rig.cache->chunk_keys(Namespace{rig.ns.model_fingerprint, "", "tenant"}, prompt)[0], keys[0]);
  const auto shorter = rig.cache->chunk_keys(rig.ns, std::span(prompt).first(16 * 4 + 1));
  ASSERT_EQ(shorter.size(), 1u);
  EXPECT_EQ(shorter[0], keys[0]);
  EXPECT_TRUE(rig.cache->chunk_keys(rig.ns, std::span(prompt).first(16 * 4)).empty());
}

}  // namespace
}  // namespace kvtier::testing
