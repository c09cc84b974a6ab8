// Chunk codecs in the cache (issue 22): a lossy disk entry is served only by
// a cache that allows lossy codecs, labelled in the lease, marked in the
// pages it fills and never stored down again; an exact cache treats it as a
// miss (counted), across restarts; corrupt encoded bytes are recomputed.
#include "cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kDisk = 2;

// The tiny preset with head_dim 32: the lossy codecs group 32 values of a head.
std::shared_ptr<const engine::Model> codec_model() {
  auto cfg = *engine::model_preset("tiny");
  cfg.num_heads = 2;
  cfg.head_dim = 32;
  return *engine::Model::synthetic(cfg, 5);
}

RigOptions codec_rig(KvCodec disk_codec, const std::string& dir = {}) {
  RigOptions o;
  o.model = codec_model();
  o.disk_codec = disk_codec;
  o.disk_dir = dir;
  return o;
}

// Cached once, then only on disk (device and host flushed).
Outcome only_on_disk(CacheRig& rig, std::span<const TokenId> prompt) {
  Outcome ref = rig.reference(prompt, 6);
  rig.cached(prompt, 6);
  EXPECT_TRUE(rig.cache->drain().ok());
  EXPECT_TRUE(rig.cache->flush().ok());
  return ref;
}

double max_logit_diff(const Outcome& a, const Outcome& b) {
  double d = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) d = std::max(d, double(std::fabs(a.logits[i] - b.logits[i])));
  return d;
}

struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("kvtier-codec-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

TEST(CacheCodec, Q8DiskHitIsServedCloseToRecomputeAndLabelledLossy) {
  CacheRig rig(codec_rig(KvCodec::kQ8));
  auto prompt = CacheRig::random_tokens(300, 31);
  Outcome ref = only_on_disk(rig, prompt);
  Outcome hit = rig.cached(prompt, 6);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDisk], 256u);
  EXPECT_EQ(hit.report.lossy_tokens, 256u);
  EXPECT_EQ(rig.cache->stats().lossy_tokens, 256u);
  EXPECT_GT(max_logit_diff(hit, ref), 0.0) << "q8 is lossy: identical logits mean the codec never ran";
  double scale = 0;
  for (float v : ref.logits) scale = std::max(scale, double(std::fabs(v)));
  EXPECT_LE(max_logit_diff(hit, ref), 0.05 * scale);
}

TEST(CacheCodec, Q8EntriesTakeAboutHalfTheDiskBytesOfF16) {
  auto disk_bytes = [](KvCodec codec) {
    RigOptions o = codec_rig(codec);
    o.dtype = DType::kF16;
    o.chunk_pages = 16;  // 128 KiB chunks: the 4 KiB alignment of entries weighs little
    CacheRig rig(o);
    only_on_disk(rig, CacheRig::random_tokens(1100, 32));
    EXPECT_TRUE(rig.cache->drain().ok());
    return rig.cache->stats().disk.bytes;
  };
  const uint64_t none = disk_bytes(KvCodec::kNone), q8 = disk_bytes(KvCodec::kQ8);
  ASSERT_GT(q8, 0u);
  EXPECT_LT(double(q8), 0.6 * double(none)) << none << " vs " << q8;  // 4 KiB-aligned entries: not quite 1/1.88
}

TEST(CacheCodec, AnExactCacheNeverServesLossyEntriesAcrossRestarts) {
  TempDir dir;
  auto prompt = CacheRig::random_tokens(300, 33);
  Outcome ref;
  {
    CacheRig writer(codec_rig(KvCodec::kQ8, dir.path.string()));
    ref = only_on_disk(writer, prompt);
  }
  {
    CacheRig exact(codec_rig(KvCodec::kNone, dir.path.string()));
    Outcome got = exact.cached(prompt, 6, /*commit=*/false);
    EXPECT_EQ(got.report.reused_tokens_by_tier[kDisk], 0u);
    EXPECT_EQ(got.report.lossy_tokens, 0u);
    EXPECT_GE(exact.cache->stats().disk.lossy_refused, 1u);
    EXPECT_EQ(got.logits, ref.logits);  // recomputed: bit for bit
    EXPECT_EQ(got.tokens, ref.tokens);
  }
  {
    CacheRig lossy(codec_rig(KvCodec::kQ4, dir.path.string()));  // any lossy codec serves every codec it decodes
    Outcome got = lossy.cached(prompt, 6, /*commit=*/false);
    EXPECT_EQ(got.report.reused_tokens_by_tier[kDisk], 256u);
    EXPECT_EQ(got.report.lossy_tokens, 256u);
  }
}

TEST(CacheCodec, ExactEntriesServedByALossyCacheAreNotLabelled) {
  TempDir dir;
  auto prompt = CacheRig::random_tokens(300, 34);
  Outcome ref;
  {
    CacheRig writer(codec_rig(KvCodec::kNone, dir.path.string()));
    ref = only_on_disk(writer, prompt);
  }
  CacheRig lossy(codec_rig(KvCodec::kQ8, dir.path.string()));
  Outcome got = lossy.cached(prompt, 6);
  EXPECT_EQ(got.report.reused_tokens_by_tier[kDisk], 256u);
  EXPECT_EQ(got.report.lossy_tokens, 0u);
  expect_same(got, ref, 1e-5);
}

TEST(CacheCodec, LossyKvIsMarkedAndNeverStoredDownAgain) {
  CacheRig rig(codec_rig(KvCodec::kQ8));
  auto prompt = CacheRig::random_tokens(300, 35);
  only_on_disk(rig, prompt);
  const uint64_t puts = rig.cache->stats().disk.puts;
  // A longer prompt over the lossy prefix: its new chunks attend to lossy KV.
  auto longer = prompt;
  auto more = CacheRig::random_tokens(600, 36);
  longer.insert(longer.end(), more.begin(), more.end());
  Outcome hit = rig.cached(longer, 2);
  EXPECT_EQ(hit.report.lossy_tokens, 256u);
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().disk.puts, puts) << "pages derived from lossy KV went down as new entries";
  // Every page from the lossy chunk on is marked in the index.
  auto look = rig.cache->lookup(rig.ns, longer);
  ASSERT_TRUE(look.ok());
  ASSERT_GE(look->index_pages, 32u);
  for (uint32_t p = 0; p < look->index_pages; ++p) EXPECT_TRUE(look->match.locations[p].lossy) << "page " << p;
  // ... and a hit on them is labelled, from the device tier too.
  Outcome again = rig.cached(longer, 2, /*commit=*/false);
  EXPECT_EQ(again.report.lossy_tokens, again.report.reused_tokens());
}

TEST(CacheCodec, WriteBackNeverSpillsLossyPages) {
  RigOptions o = codec_rig(KvCodec::kQ8);
  o.write_policy = WritePolicy::kWriteBack;
  o.device_pages = 64;
  o.host_pages = 64;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 37);
  rig.cached(prompt, 2);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 64).ok());  // demoted to host
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 64).ok());    // spilled to disk
  ASSERT_TRUE(rig.cache->drain().ok());
  const uint64_t puts = rig.cache->stats().disk.puts;
  ASSERT_GE(puts, 4u);
  Outcome hit = rig.cached(prompt, 2);  // lossy now, from disk
  EXPECT_EQ(hit.report.lossy_tokens, 256u);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 64).ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 64).ok());
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().disk.puts, puts);
}

TEST(CacheCodec, CorruptEncodedBytesAreDetectedAndRecomputed) {
  RigOptions o = codec_rig(KvCodec::kQ8);
  o.region_bytes = 64 << 10;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 38);
  Outcome ref = only_on_disk(rig, prompt);
  corrupt_region_files(rig.dir_);
  Outcome hit = rig.cached(prompt, 6);
  EXPECT_GE(rig.cache->stats().disk.checksum_failures, 1u);
  EXPECT_EQ(hit.report.lossy_tokens, 0u);
  expect_same(hit, ref, 1e-5);
}

// The host tier with a codec: more pages in the same bytes; a host hit is
// approximate and labelled; pages are never stored down from encoded slots.
TEST(CacheCodec, Q8HostSlotsHoldMorePagesAndServeLabelledApproximateKv) {
  RigOptions o = codec_rig(KvCodec::kNone);
  o.disk = false;
  o.host_codec = KvCodec::kQ8;
  CacheRig rig(o);
  CacheRig raw(codec_rig(KvCodec::kNone));
  EXPECT_GT(rig.cache->stats().host_slots, 3 * raw.cache->stats().host_slots);  // f32 pages: 3.76x
  auto prompt = CacheRig::random_tokens(300, 39);
  Outcome ref = rig.reference(prompt, 6);
  rig.cached(prompt, 6);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 1000).ok());  // host copies only now
  Outcome hit = rig.cached(prompt, 6);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[1], 288u);  // every whole page: the host holds pages, not chunks
  EXPECT_EQ(hit.report.lossy_tokens, 288u);
  EXPECT_GT(max_logit_diff(hit, ref), 0.0);
  double scale = 0;
  for (float v : ref.logits) scale = std::max(scale, double(std::fabs(v)));
  EXPECT_LE(max_logit_diff(hit, ref), 0.05 * scale);
}

TEST(CacheCodec, PrefetchIntoAnEncodedHostIsLabelledLossy) {
  RigOptions o = codec_rig(KvCodec::kNone);
  o.host_codec = KvCodec::kQ4;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 40);
  only_on_disk(rig, prompt);  // exact disk entries
  auto n = rig.cache->prefetch(rig.ns, prompt);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().prefetched_pages, 16u);
  EXPECT_EQ(rig.cache->stats().promoted_pages, 16u);  // on into free device pages, decoded
  Outcome hit = rig.cached(prompt, 2, /*commit=*/false);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[0], 256u);
  EXPECT_EQ(hit.report.lossy_tokens, 256u);  // still labelled: the host's codec approximated them
}

TEST(CacheCodec, ALossyHostCodecWithWriteBackIsRefused) {
  auto model = codec_model();
  KVCacheOptions co;
  co.geometry = model->config().kv_geometry(DType::kF32, 16);
  co.model_cost = model_cost(model->config(), co.geometry);
  co.host_codec = KvCodec::kQ8;
  co.write_policy = WritePolicy::kWriteBack;
  auto cache = KVCache::create(co);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("write_back"), std::string::npos) << cache.status().to_string();
}

}  // namespace
}  // namespace kvtier::testing
