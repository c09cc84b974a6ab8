// Non-prefix reuse through the cache: segments stored on their own, found on
// each tier, blended into prompts where they sit at other offsets; corrupt
// segments are recomputed; blended KV never becomes an exact hit.
#include <algorithm>

#include "cache_rig.h"
#include "model_variants.h"
#include "runtime/blend_prefill.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kHostTier = 1, kDiskTier = 2;

// [system | doc A | doc B | question] with the documents marked as segments.
struct RagPrompt {
  std::vector<TokenId> tokens;
  std::vector<PromptSegment> segments;
};
RagPrompt rag_prompt(uint32_t system_seed, std::initializer_list<uint32_t> doc_seeds, uint32_t question_seed,
                     uint32_t doc_tokens = 100) {
  RagPrompt p;
  p.tokens = CacheRig::random_tokens(21, system_seed);
  for (uint32_t seed : doc_seeds) {
    const auto doc = CacheRig::random_tokens(doc_tokens, seed);
    p.segments.push_back({uint32_t(p.tokens.size()), uint32_t(p.tokens.size() + doc.size())});
    p.tokens.insert(p.tokens.end(), doc.begin(), doc.end());
  }
  const auto q = CacheRig::random_tokens(11, question_seed);
  p.tokens.insert(p.tokens.end(), q.begin(), q.end());
  return p;
}

struct BlendOutcome {
  std::vector<float> logits;
  BlendReport report;
};

// One request through blend_prefill; commits what the report says is exact.
BlendOutcome blend_request(CacheRig& rig, const RagPrompt& p, BlendPrefillOptions options) {
  BlendOutcome out;
  auto look = rig.cache->lookup(rig.ns, p.tokens);
  EXPECT_TRUE(look.ok());
  const Plan plan = rig.cache->plan(*look);
  auto lease = rig.cache->apply(std::move(*look), plan);
  EXPECT_TRUE(lease.ok()) << lease.status().to_string();
  engine::SequenceKV kv;
  auto lg = blend_prefill(*rig.engine, *rig.cache, rig.ns, *lease, kv, p.tokens, p.segments, options, out.report);
  EXPECT_TRUE(lg.ok()) << lg.status().to_string();
  if (lg.ok()) out.logits.assign(lg->last().begin(), lg->last().end());
  EXPECT_TRUE(rig.cache->commit(*lease, std::span(p.tokens).first(out.report.exact_tokens)).ok());
  return out;
}

BlendPrefillOptions forced(float ratio = 0.15f) {
  BlendPrefillOptions o;
  o.enabled = true;
  o.force = true;
  o.recompute_ratio = ratio;
  return o;
}

double rel_diff(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

// The documents' KV is stored on first sight, then blended from the device,
// the host and the disk with the same result each time (the tiers deliver the
// segments' KV exactly); ratio 1 equals the full prefill. One-page chunks, so
// that the disk holds every whole page, as the device and host do. On f32
// weights and on the quantized path (model_variants.h).
class BlendPrefillVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(BlendPrefillVariant, SegmentsFoundOnEveryTierBlendTheSame) {
  RigOptions o;
  o.chunk_pages = 1;
  auto model = model_variant(GetParam(), 3);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  o.model = *model;
  CacheRig rig(o);
  const RagPrompt first = rag_prompt(1, {10, 11}, 2);
  const BlendOutcome stored = blend_request(rig, first, forced());
  EXPECT_EQ(stored.report.stored_segment_tokens, 200u);
  EXPECT_TRUE(stored.report.blended);

  const RagPrompt other = rag_prompt(3, {11, 10}, 4);  // other system prompt, documents swapped
  Outcome ref = rig.reference(other.tokens, 0);
  const BlendOutcome once = blend_request(rig, other, forced());
  ASSERT_TRUE(once.report.blended);
  EXPECT_EQ(once.report.stored_segment_tokens, 0u);
  EXPECT_EQ(once.report.blended_tokens + once.report.recomputed_tokens, 192u);  // 6 whole pages of each document
  EXPECT_EQ(once.report.recomputed_tokens, 29u);  // ceil(0.15 × 192)
  EXPECT_EQ(once.report.exact_tokens, 21u);       // the system prompt (its whole page is committed)
  // Again, now with the system prompt's page cached: the reference for the tiers below.
  const BlendOutcome device = blend_request(rig, other, forced());
  EXPECT_GT(rel_diff(device.logits, ref.logits), 0.0);
  EXPECT_LT(rel_diff(device.logits, ref.logits), 0.5);

  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  const KVCacheStats before_host = rig.cache->stats();
  const BlendOutcome host = blend_request(rig, other, forced());
  EXPECT_GT(rig.cache->stats().reused_tokens_by_tier[kHostTier], before_host.reused_tokens_by_tier[kHostTier]);
  EXPECT_EQ(host.logits, device.logits);

  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  const KVCacheStats before_disk = rig.cache->stats();
  const BlendOutcome disk = blend_request(rig, other, forced());
  EXPECT_GT(rig.cache->stats().reused_tokens_by_tier[kDiskTier], before_disk.reused_tokens_by_tier[kDiskTier]);
  EXPECT_EQ(disk.logits, device.logits);

  const BlendOutcome all = blend_request(rig, other, forced(1.0f));
  EXPECT_LT(rel_diff(all.logits, ref.logits), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Variants, BlendPrefillVariant, ::testing::Values("llama", "q4_k_m"));

// A segment whose KV on disk is corrupt is never served: the prompt is
// recomputed (the full prefill's output), and the failure is counted.
// Documents of two whole chunks, each chunk in its own region file, so that
// the disk holds every whole page of them and every file but the newest is
// corrupted.
TEST(BlendPrefill, CorruptSegmentIsRecomputed) {
  RigOptions o;
  o.region_bytes = 64 << 10;
  CacheRig rig(o);
  const RagPrompt first = rag_prompt(1, {10, 11}, 2, 128);
  blend_request(rig, first, forced());
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  corrupt_region_files(rig.dir_);
  const RagPrompt other = rag_prompt(3, {11, 10}, 4, 128);
  Outcome ref = rig.reference(other.tokens, 0);
  const KVCacheStats before = rig.cache->stats();
  const BlendOutcome got = blend_request(rig, other, forced());
  EXPECT_FALSE(got.report.blended);
  EXPECT_GE(got.report.failed_segments, 1u);
  EXPECT_EQ(got.report.exact_tokens, other.tokens.size());
  EXPECT_LT(rel_diff(got.logits, ref.logits), 1e-6);
  const KVCacheStats after = rig.cache->stats();
  EXPECT_GT(after.load_failures + after.disk.checksum_failures, before.load_failures + before.disk.checksum_failures);
}

// A request's own prefix whose load from disk fails is recomputed, as without blending, whether
// nothing was found to blend or a segment was being blended in: the request used to fail with the
// load's error (the plain prefill after it still waited on the failed load).
TEST(BlendPrefill, AFailedLoadOfTheRequestsPrefixIsRecomputed) {
  RigOptions o;
  o.region_bytes = 64 << 10;
  CacheRig rig(o);
  const std::vector<TokenId> prefix = CacheRig::random_tokens(128, 40);
  rig.cached(prefix, 0);  // the prefix, committed
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());  // on disk only, and then corrupt
  corrupt_region_files(rig.dir_);
  const RagPrompt seen = rag_prompt(41, {42}, 43, 64);
  blend_request(rig, seen, forced());  // the document's KV is stored (on the device) as a segment
  for (const bool doc_cached : {true, false}) {
    SCOPED_TRACE(doc_cached ? "a segment blended in" : "nothing to blend");
    RagPrompt p;
    p.tokens = prefix;
    const auto doc = doc_cached ? CacheRig::random_tokens(64, 42) : CacheRig::random_tokens(64, 44);
    p.segments.push_back({uint32_t(p.tokens.size()), uint32_t(p.tokens.size() + doc.size())});
    p.tokens.insert(p.tokens.end(), doc.begin(), doc.end());
    p.tokens.push_back(7);
    const Outcome ref = rig.reference(p.tokens, 0);
    const uint64_t failures = rig.cache->stats().load_failures;
    const BlendOutcome got = blend_request(rig, p, forced());
    ASSERT_FALSE(got.logits.empty());
    EXPECT_FALSE(got.report.blended);
    EXPECT_LT(rel_diff(got.logits, ref.logits), 1e-6);
    EXPECT_GT(rig.cache->stats().load_failures, failures);
    ASSERT_TRUE(rig.cache->flush().ok());  // the prefix (recomputed, stored again) on disk only, and corrupt
    corrupt_region_files(rig.dir_);
  }
}

// Only the exact front of a blended request is committed: the same prompt
// later is an exact hit for the system prompt's whole pages at most, and
// served exactly through the ordinary path.
TEST(BlendPrefill, BlendedKvNeverBecomesAnExactHit) {
  CacheRig rig;
  const RagPrompt p = rag_prompt(5, {12, 13}, 6);
  Outcome ref = rig.reference(p.tokens, 4);
  const BlendOutcome b1 = blend_request(rig, p, forced());
  const BlendOutcome b2 = blend_request(rig, p, forced());  // the documents are cached now: blended
  ASSERT_TRUE(b2.report.blended);
  auto look = rig.cache->lookup(rig.ns, p.tokens);
  ASSERT_TRUE(look.ok());
  EXPECT_LE(size_t(look->cached_pages()) * 16, size_t(b2.report.exact_tokens));
  Outcome exact = rig.cached(p.tokens, 4);
  expect_same(exact, ref, 1e-5);
}

// Without segments (or with blending off) the request is an ordinary cached prefill.
TEST(BlendPrefill, NoSegmentsIsThePlainPath) {
  CacheRig rig;
  RagPrompt p = rag_prompt(7, {14}, 8);
  Outcome ref = rig.reference(p.tokens, 0);
  BlendPrefillOptions off = forced();
  off.enabled = false;
  const BlendOutcome a = blend_request(rig, p, off);
  EXPECT_FALSE(a.report.blended);
  EXPECT_EQ(a.report.stored_segment_tokens, 0u);
  p.segments.clear();
  const BlendOutcome b = blend_request(rig, p, forced());
  EXPECT_FALSE(b.report.blended);
  EXPECT_LT(rel_diff(a.logits, ref.logits), 1e-6);
  EXPECT_LT(rel_diff(b.logits, ref.logits), 1e-6);
}

// A segment that starts the prompt is its prefix: not stored apart, not blended (it was computed twice
// and labelled approximate, and nothing of the prompt was committed); the prompt is computed exactly and
// its pages are cached as any prompt's.
TEST(BlendPrefill, ASegmentAtTheStartIsThePrefixNotABlend) {
  CacheRig rig;
  RagPrompt p = rag_prompt(7, {14}, 8);
  p.segments = {{0, p.segments.front().end}};  // system prompt and document as one piece
  Outcome ref = rig.reference(p.tokens, 0);
  const BlendOutcome a = blend_request(rig, p, forced());
  EXPECT_FALSE(a.report.blended);
  EXPECT_EQ(a.report.decision, BlendDecision::kNothingToBlend);
  EXPECT_EQ(a.report.stored_segment_tokens, 0u);
  EXPECT_EQ(a.report.exact_tokens, p.tokens.size());
  EXPECT_LT(rel_diff(a.logits, ref.logits), 1e-6);
  const BlendOutcome b = blend_request(rig, p, forced());  // its prefix is now an exact hit
  EXPECT_FALSE(b.report.blended);
  EXPECT_LT(rel_diff(b.logits, ref.logits), 1e-6);
}

TEST(BlendPrefill, RefusesBadSegments) {
  CacheRig rig;
  const RagPrompt p = rag_prompt(7, {14}, 8);
  const uint32_t n = uint32_t(p.tokens.size());
  for (std::vector<PromptSegment> bad : {std::vector<PromptSegment>{{5, 5}}, std::vector<PromptSegment>{{0, n + 1}},
                                         std::vector<PromptSegment>{{10, 20}, {15, 30}}}) {
    auto look = rig.cache->lookup(rig.ns, p.tokens);
    ASSERT_TRUE(look.ok());
    const Plan plan = rig.cache->plan(*look);
    auto lease = rig.cache->apply(std::move(*look), plan);
    ASSERT_TRUE(lease.ok());
    engine::SequenceKV kv;
    BlendReport report;
    auto r = blend_prefill(*rig.engine, *rig.cache, rig.ns, *lease, kv, p.tokens, bad, forced(), report);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    rig.cache->release(*lease);
  }
}

TEST(BlendPrefill, SegmentsBetweenSeparators) {
  const std::vector<TokenId> prompt = {1, 2, 9, 9, 3, 4, 5, 9, 9, 6};
  const std::vector<TokenId> sep = {9, 9};
  const auto s = segments_between(prompt, sep);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].begin, 0u);
  EXPECT_EQ(s[0].end, 2u);
  EXPECT_EQ(s[1].begin, 4u);
  EXPECT_EQ(s[1].end, 7u);
  EXPECT_EQ(s[2].begin, 9u);
  EXPECT_EQ(s[2].end, 10u);
  EXPECT_TRUE(segments_between(prompt, {}).empty());
}

}  // namespace
}  // namespace kvtier::testing
