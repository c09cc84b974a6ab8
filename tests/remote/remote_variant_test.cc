// Every architecture variant (tests/model_variants.h) through Redis: KV that
// one instance wrote is a remote hit on another with the recompute's output.
#include <gtest/gtest.h>

#include "model_variants.h"
#include "redis_fixture.h"
#include "remote_test_util.h"
#include "runtime/cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr size_t kRemoteTier = static_cast<size_t>(TierKind::kRemote);

class RemoteCacheVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(RemoteCacheVariant, RemoteHitEqualsRecompute) {
  RedisServer redis;
  ASSERT_TRUE(redis.start().ok());
  auto model = model_variant(GetParam(), 3);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  RigOptions o;
  o.disk = false;
  o.model = *model;
  const KVGeometry g = (*model)->config().kv_geometry(o.dtype, 16);
  const std::string url = redis.url() + "?backoff_ms=20&backoff_max_ms=100&timeout_ms=1000";
  o.remote = make_remote(url, ChunkGeometry{g, o.chunk_pages});
  ASSERT_TRUE(o.remote);
  CacheRig writer(o);
  o.remote = make_remote(url, ChunkGeometry{g, o.chunk_pages});
  ASSERT_TRUE(o.remote);
  CacheRig reader(o);
  auto prompt = CacheRig::random_tokens(300, 21);
  Outcome ref = reader.reference(prompt, 8);
  writer.cached(prompt, 8);
  ASSERT_TRUE(writer.cache->drain().ok());
  Outcome hit = reader.cached(prompt, 8);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemoteTier], 288u);  // 4 whole chunks of 4 pages and the prompt's 2-page tail
  expect_same(hit, ref, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, RemoteCacheVariant, ::testing::ValuesIn(exactness_variant_names()));

}  // namespace
}  // namespace kvtier::testing
