// Chunk codecs across instances sharing one Redis (issue 22): an instance
// whose codecs are all none never serves another's lossy entries (its lookup
// takes them for absent, and its own exact entries replace them; its output
// is the recompute's, bit for bit); an instance with any
// lossy codec serves entries of every codec, and labels the lossy ones.
#include <gtest/gtest.h>

#include "redis_fixture.h"
#include "remote_test_util.h"
#include "runtime/cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr size_t kRemote = static_cast<size_t>(TierKind::kRemote);

std::shared_ptr<const engine::Model> codec_model() {
  auto cfg = *engine::model_preset("tiny");
  cfg.num_heads = 2;
  cfg.head_dim = 32;  // the lossy codecs group 32 values of one head
  return *engine::Model::synthetic(cfg, 5);
}

// A rig without disk whose remote tier writes `codec` and serves lossy entries when the cache does.
std::unique_ptr<CacheRig> instance(const RedisServer& redis, KvCodec codec) {
  static const auto model = codec_model();
  const KVGeometry g = model->config().kv_geometry(DType::kF32, 16);
  RigOptions o;
  o.model = model;
  o.disk = false;
  o.remote_codec = codec;
  static bool lossy;
  lossy = kv_codec_lossy(codec);
  std::shared_ptr<Tier> remote = make_remote(redis.url() + "?backoff_ms=20&timeout_ms=1000", ChunkGeometry{g, o.chunk_pages, codec},
                                             [](RemoteTierOptions& ro) { ro.accept_lossy = lossy; });
  EXPECT_TRUE(remote);
  o.remote = remote;
  return std::make_unique<CacheRig>(o);
}

class RemoteCodecTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis.start().ok()); }
  // An instance writing `codec` serves `prompt` (6 tokens generated) and stores it down; its
  // recompute of the prompt, the reference.
  Outcome written_by(KvCodec codec, const std::vector<TokenId>& prompt) {
    auto writer = instance(redis, codec);
    Outcome ref = writer->reference(prompt, 6);
    writer->cached(prompt, 6);
    EXPECT_TRUE(writer->cache->drain().ok());
    return ref;
  }
  RedisServer redis;
};

TEST_F(RemoteCodecTest, LossyEntriesAreMissesForAnExactInstanceAndHitsForALossyOne) {
  auto prompt = CacheRig::random_tokens(300, 41);
  const Outcome ref = written_by(KvCodec::kQ8, prompt);
  ASSERT_EQ(*redis.cmd({"DBSIZE"}), "6");  // 4 whole chunks, the prompt's tail (18 pages), the sequence's (19)

  auto exact = instance(redis, KvCodec::kNone);
  Outcome missed = exact->cached(prompt, 6, /*commit=*/false);
  EXPECT_EQ(missed.report.reused_tokens_by_tier[kRemote], 0u);
  EXPECT_EQ(missed.report.lossy_tokens, 0u);
  // Its lookup reads each entry's codec and takes a lossy one for absent: no load is tried.
  EXPECT_EQ(exact->cache->stats().remote.lossy_refused, 0u);
  EXPECT_EQ(exact->cache->stats().load_failures, 0u);
  EXPECT_EQ(missed.logits, ref.logits);
  EXPECT_EQ(missed.tokens, ref.tokens);

  // A q4 instance reads the q8 entries too (their layout differs from its
  // own: the layer-range reads fall back to whole values).
  auto other = instance(redis, KvCodec::kQ4);
  Outcome hit = other->cached(prompt, 6, /*commit=*/false);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 288u);
  EXPECT_EQ(hit.report.lossy_tokens, 288u);
  EXPECT_EQ(other->cache->stats().remote.lossy_refused, 0u);
}

// An exact instance takes another's lossy entries for absent: it writes its own exact ones over
// them. It took them for present (EXISTS), never wrote, and every later lookup of the prefix by an
// exact instance was a refused load and a recompute.
TEST_F(RemoteCodecTest, AnExactInstanceReplacesLossyEntriesWithItsOwn) {
  auto prompt = CacheRig::random_tokens(300, 43);
  const Outcome ref = written_by(KvCodec::kQ8, prompt);
  auto exact = instance(redis, KvCodec::kNone);
  exact->cached(prompt, 6);  // computed (the lossy entries refused), then committed and stored down
  ASSERT_TRUE(exact->cache->drain().ok());
  auto later = instance(redis, KvCodec::kNone);
  Outcome hit = later->cached(prompt, 6, /*commit=*/false);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 288u);
  EXPECT_EQ(hit.report.lossy_tokens, 0u);
  EXPECT_EQ(later->cache->stats().remote.lossy_refused, 0u);
  expect_same(hit, ref, 1e-5);
}

TEST_F(RemoteCodecTest, ExactEntriesAreServedExactlyToALossyInstance) {
  auto prompt = CacheRig::random_tokens(300, 42);
  const Outcome ref = written_by(KvCodec::kNone, prompt);
  auto lossy = instance(redis, KvCodec::kQ8);
  Outcome hit = lossy->cached(prompt, 6, /*commit=*/false);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 288u);
  EXPECT_EQ(hit.report.lossy_tokens, 0u);
  expect_same(hit, ref, 1e-5);
}

}  // namespace
}  // namespace kvtier::testing
