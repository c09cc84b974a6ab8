// Segments through Redis: documents one instance cached on their own are
// blended by another instance that finds them only in the shared store, with
// the same result as blending them from its own device memory.
#include <gtest/gtest.h>

#include "redis_fixture.h"
#include "remote_test_util.h"
#include "runtime/blend_prefill.h"
#include "runtime/cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr size_t kRemoteTier = static_cast<size_t>(TierKind::kRemote);

struct Blended {
  std::vector<float> logits;
  BlendReport report;
};

// [10-token system prompt | documents of 128 tokens | question], blended (forced).
Blended blend(CacheRig& rig, std::initializer_list<uint32_t> doc_seeds) {
  std::vector<TokenId> prompt = CacheRig::random_tokens(10, 1);
  std::vector<PromptSegment> segments;
  for (uint32_t seed : doc_seeds) {
    const auto doc = CacheRig::random_tokens(128, seed);
    segments.push_back({uint32_t(prompt.size()), uint32_t(prompt.size() + doc.size())});
    prompt.insert(prompt.end(), doc.begin(), doc.end());
  }
  const auto q = CacheRig::random_tokens(7, 2);
  prompt.insert(prompt.end(), q.begin(), q.end());
  Blended out;
  auto look = rig.cache->lookup(rig.ns, prompt);
  EXPECT_TRUE(look.ok());
  const Plan plan = rig.cache->plan(*look);
  auto lease = rig.cache->apply(std::move(*look), plan);
  EXPECT_TRUE(lease.ok()) << lease.status().to_string();
  engine::SequenceKV kv;
  BlendPrefillOptions o;
  o.enabled = true;
  o.force = true;
  auto lg = blend_prefill(*rig.engine, *rig.cache, rig.ns, *lease, kv, prompt, segments, o, out.report);
  EXPECT_TRUE(lg.ok()) << lg.status().to_string();
  if (lg.ok()) out.logits.assign(lg->last().begin(), lg->last().end());
  rig.cache->release(*lease);
  return out;
}

TEST(RemoteBlend, SegmentsCachedByOneInstanceAreBlendedByAnother) {
  RedisServer redis;
  ASSERT_TRUE(redis.start().ok());
  RigOptions o;
  o.disk = false;
  const KVGeometry g = engine::model_preset("tiny")->kv_geometry(o.dtype, 16);
  const std::string url = redis.url() + "?backoff_ms=20&backoff_max_ms=100&timeout_ms=1000";
  o.remote = make_remote(url, ChunkGeometry{g, o.chunk_pages});
  ASSERT_TRUE(o.remote);
  CacheRig writer(o);
  blend(writer, {31, 32});  // stores both documents (write-through to Redis)
  ASSERT_TRUE(writer.cache->drain().ok());
  const Blended local = blend(writer, {32, 31});  // swapped, from the writer's device memory
  ASSERT_TRUE(local.report.blended);

  o.remote = make_remote(url, ChunkGeometry{g, o.chunk_pages});
  CacheRig reader(o);
  const Blended remote = blend(reader, {32, 31});
  ASSERT_TRUE(remote.report.blended);
  EXPECT_EQ(remote.report.stored_segment_tokens, 0u);
  EXPECT_EQ(reader.cache->stats().reused_tokens_by_tier[kRemoteTier], 256u);
  EXPECT_EQ(remote.logits, local.logits);
}

}  // namespace
}  // namespace kvtier::testing
