// End to end: two KVCache instances (each with its own device and host tiers,
// as two serving processes would have) share one Redis. A long prompt served
// by the first is a remote hit on the second, with the same output as a full
// recompute; corrupt values in Redis and a dead Redis only cost a recompute.
#include <gtest/gtest.h>

#include "load_always_profile.h"
#include "redis_fixture.h"
#include "remote_test_util.h"
#include "runtime/cache_rig.h"
#include "runtime/runtime.h"

namespace kvtier::testing {
namespace {

constexpr int kSteps = 8;
constexpr size_t kRemote = static_cast<size_t>(TierKind::kRemote);

// A CacheRig on the tiny model, without disk, whose cache also has `remote`.
std::unique_ptr<CacheRig> rig_with_remote(std::shared_ptr<Tier> remote) {
  auto rig = std::make_unique<CacheRig>(RigOptions{.disk = false});
  KVCacheOptions co = rig->cache->options();
  co.remote = std::move(remote);
  co.profile.link(TierKind::kRemote) = {0, 1e12};  // fast link: the planner loads
  rig->engine.reset();
  rig->cache.reset();
  auto c = KVCache::create(co);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return nullptr;
  rig->cache = std::move(c).value();
  auto e = engine::Engine::create(rig->model_, rig->cache->pool());
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  rig->engine = std::move(e).value();
  return rig;
}

std::shared_ptr<RemoteTier> remote_for(const RedisServer& s, const CacheRig& shape) {
  const ChunkGeometry g{shape.cache->geometry(), shape.cache->options().chunk_pages};
  return make_remote(s.url() + "?backoff_ms=20&backoff_max_ms=100&timeout_ms=1000", g);
}

class RemoteCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis.start().ok());
    auto shape = std::make_unique<CacheRig>(RigOptions{.disk = false});
    remote_a = remote_for(redis, *shape);
    remote_b = remote_for(redis, *shape);
    ASSERT_TRUE(remote_a && remote_b);
    a = rig_with_remote(remote_a);
    b = rig_with_remote(remote_b);
    ASSERT_TRUE(a && b);
  }
  RedisServer redis;
  std::shared_ptr<RemoteTier> remote_a, remote_b;
  std::unique_ptr<CacheRig> a, b;
};

TEST_F(RemoteCacheTest, PromptServedByOneInstanceIsARemoteHitOnTheOther) {
  auto prompt = CacheRig::random_tokens(300, 11);
  Outcome ref = b->reference(prompt, kSteps);
  Outcome first = a->cached(prompt, kSteps);  // commit writes whole chunks to Redis behind the request
  expect_same(first, ref, 1e-5);
  ASSERT_TRUE(a->cache->drain().ok());
  // (300-1)/16 = 18 prompt pages, 19 with the reply: 4 whole chunks of 4 pages, the prompt's 2-page tail, the sequence's 3-page one
  EXPECT_EQ(*redis.cmd({"DBSIZE"}), "6");
  Outcome hit = b->cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 288u);
  expect_same(hit, ref, 1e-5);
  EXPECT_GT(remote_b->stats().hits, 0u);
  EXPECT_FALSE(b->cache->stats().remote_degraded);
  // A longer prompt with the same prefix: the shared chunks and the prompt's tail come from Redis, the rest is computed.
  auto longer = prompt;
  auto tail = CacheRig::random_tokens(100, 12);
  longer.insert(longer.end(), tail.begin(), tail.end());
  auto c = rig_with_remote(remote_for(redis, *a));
  Outcome ref2 = c->reference(longer, kSteps);
  Outcome hit2 = c->cached(longer, kSteps);
  EXPECT_EQ(hit2.report.reused_tokens_by_tier[kRemote], 288u);
  expect_same(hit2, ref2, 1e-5);
}

TEST_F(RemoteCacheTest, CorruptValueInRedisIsRecomputedNotServed) {
  auto prompt = CacheRig::random_tokens(300, 13);
  Outcome ref = b->reference(prompt, kSteps);
  a->cached(prompt, kSteps);
  ASSERT_TRUE(a->cache->drain().ok());
  auto keys = redis.cmd({"KEYS", "kvtier:*"});
  ASSERT_TRUE(keys.ok());
  std::stringstream ss(*keys);
  std::string k;
  while (std::getline(ss, k)) ASSERT_TRUE(redis.cmd({"SETRANGE", k, "4000", "corrupt!"}).ok());
  Outcome hit = b->cached(prompt, kSteps);
  expect_same(hit, ref, 1e-5);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 0u);
  EXPECT_GE(remote_b->stats().checksum_failures, 1u);
}

TEST_F(RemoteCacheTest, DeadRedisMeansRecomputeAndTheTierRecovers) {
  auto prompt = CacheRig::random_tokens(300, 14);
  Outcome ref = b->reference(prompt, kSteps);
  a->cached(prompt, kSteps);
  ASSERT_TRUE(a->cache->drain().ok());
  redis.kill();
  Outcome miss = b->cached(prompt, kSteps);  // the lookup fails: recompute
  expect_same(miss, ref, 1e-5);
  EXPECT_EQ(miss.report.reused_tokens_by_tier[kRemote], 0u);
  EXPECT_TRUE(b->cache->stats().remote_degraded || remote_b->stats().io_errors > 0);
  // Requests keep succeeding while it is down.
  auto other = CacheRig::random_tokens(200, 15);
  Outcome ref_other = b->reference(other, kSteps);
  expect_same(b->cached(other, kSteps), ref_other, 1e-5);
  ASSERT_TRUE(b->cache->drain().ok());
  // Back (empty: no persistence): the tier recovers and serves again.
  ASSERT_TRUE(redis.restart().ok());
  auto probe = testing_util::make_chunk(remote_a->geometry(), testing_util::test_ns(99), 1);
  ASSERT_TRUE(wait_recovered(*remote_a, probe));
  ASSERT_TRUE(wait_recovered(*remote_b, probe));
  auto prompt2 = CacheRig::random_tokens(300, 16);
  Outcome ref2 = b->reference(prompt2, kSteps);
  a->cached(prompt2, kSteps);
  ASSERT_TRUE(a->cache->drain().ok());
  Outcome hit = b->cached(prompt2, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 288u);
  expect_same(hit, ref2, 1e-5);
}

// RuntimeOptions::remote_url wires a RemoteTier into the serving stack: two runtimes, one Redis.
TEST_F(RemoteCacheTest, RuntimesShareKvThroughTheRemoteUrl) {
  RuntimeOptions o;
  o.model = "tiny";
  o.chunk_pages = 4;
  o.device_bytes = size_t(16) << 20;
  o.host_bytes = size_t(16) << 20;
  o.threads = 1;
  o.remote_url = redis.url() + "?ttl_s=3600";
  o.profile_path = kvtier::testing::write_load_always_profile(redis.dir());  // a slow calibration recomputed
  auto r1 = Runtime::create(o);
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  auto r2 = Runtime::create(o);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  auto prompt = CacheRig::random_tokens(300, 21);
  auto s1 = (*r1)->start(prompt, SamplingParams{});
  ASSERT_TRUE(s1.ok()) << s1.status().to_string();
  (*r1)->finish(s1->seq);
  ASSERT_TRUE((*r1)->flush().ok());
  // Stores are write-behind: wait (bounded) until the 4 chunks and the 2-page tail are in Redis.
  auto stored = [&] {
    auto n = redis.cmd({"DBSIZE"});
    return n.ok() ? *n : std::string();
  };
  for (int i = 0; i < 12000 && stored() != "5"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(stored(), "5");
  auto s2 = (*r2)->start(prompt, SamplingParams{});
  ASSERT_TRUE(s2.ok()) << s2.status().to_string();
  // The planner may split (recompute the front while loading the back) on the measured link.
  EXPECT_GT(s2->report.cached_tokens_by_tier[kRemote], 0u);
  EXPECT_EQ(s2->report.cached_tokens_by_tier[kRemote] + s2->report.recomputed_cached_tokens, 288u);
  EXPECT_EQ(s2->first_token, s1->first_token);
  (*r2)->finish(s2->seq);
  EXPECT_TRUE((*r2)->stats().cache.remote_present);
  o.remote_url = "redis://nohost";
  EXPECT_EQ(Runtime::create(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::testing
