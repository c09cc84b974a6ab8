// Selective recompute (BlendOptions) and KV moves (move_kv): a segment's KV
// computed on its own, moved to where the segment sits in a longer prompt.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sampler.h"
#include "engine_fixture.h"
#include "model_variants.h"

namespace kvtier::engine {
namespace {

// One layer's K (or V) of positions [pos, pos + n), as f32.
std::vector<float> kv_of(const BlockPool& pool, const SequenceKV& s, LayerIdx layer, uint32_t pos, uint32_t n, bool key) {
  const KVGeometry& g = pool.geometry();
  std::vector<float> out;
  for (uint32_t p = pos; p < pos + n; ++p) {
    const PageId page = s.pages[p / g.page_tokens];
    const std::byte* at = (key ? pool.k(page, layer) : pool.v(page, layer)) + (p % g.page_tokens) * g.token_kv_half_bytes();
    const float* f = reinterpret_cast<const float*>(at);
    out.insert(out.end(), f, f + g.token_kv_half_bytes() / sizeof(float));
  }
  return out;
}

// A prompt [prefix | segment | question] and the segment's KV computed on its
// own (positions 0..), in one rig with f32 KV.
struct BlendCase {
  static constexpr uint32_t kPrefix = 37, kSegment = 70, kQuestion = 9;
  explicit BlendCase(std::shared_ptr<const Model> model) : rig(std::move(model), DType::kF32, 64) {
    const uint32_t vocab = rig.model->config().vocab_size;
    segment = testing::random_tokens(kSegment, vocab, 3);
    prompt = testing::random_tokens(kPrefix, vocab, 4);
    prompt.insert(prompt.end(), segment.begin(), segment.end());
    const auto question = testing::random_tokens(kQuestion, vocab, 5);
    prompt.insert(prompt.end(), question.begin(), question.end());
    alone = rig.sequence(kSegment);
    EXPECT_TRUE(rig.engine->prefill(alone, segment, 0).ok());
  }
  // Full prefill of the prompt in a new sequence.
  Logits full(SequenceKV& s) {
    s = rig.sequence(uint32_t(prompt.size()));
    return *rig.engine->prefill(s, prompt, 0);
  }
  // The prefix computed exactly, the segment's KV moved in, the rest blended.
  Result<Logits> blended(SequenceKV& s, BlendOptions& blend) {
    s = rig.sequence(uint32_t(prompt.size()));
    KVTIER_RETURN_IF_ERROR(rig.engine->prefill(s, std::span(prompt).first(kPrefix), 0).status());
    std::vector<uint8_t> reused(prompt.size() - kPrefix, 0);
    std::fill_n(reused.begin(), kSegment, 1);
    blend.reused = reused;
    PrefillOptions po;
    po.blend = &blend;
    po.layer_hook = [&](LayerIdx l) {
      return move_kv(rig.model->config(), *rig.pool, l, alone.pages, 0, s.pages, kPrefix, kSegment);
    };
    return rig.engine->prefill(s, prompt, kPrefix, po);
  }
  testing::Rig rig;
  std::vector<TokenId> segment, prompt;
  SequenceKV alone;
};

class BlendVariant : public ::testing::TestWithParam<std::string> {};

// At layer 0 K and V depend only on the token and its position: the segment's
// KV computed at positions 0.. and moved to kPrefix.. equals the KV computed
// there, K to f32 rounding (RoPE turned by the difference), V to the rounding
// of the projection (sgemm blocks rows differently for the two prompt
// lengths); the move itself copies V bit for bit.
TEST_P(BlendVariant, MovedKeysEqualFreshKeysAtLayerZero) {
  BlendCase bc(*kvtier::testing::model_variant(GetParam(), 9));
  SequenceKV full;
  bc.full(full);
  SequenceKV moved = bc.rig.sequence(uint32_t(bc.prompt.size()));
  const LayerIdx l0(0);
  ASSERT_TRUE(move_kv(bc.rig.model->config(), *bc.rig.pool, l0, bc.alone.pages, 0, moved.pages, BlendCase::kPrefix,
                      BlendCase::kSegment).ok());
  const auto fresh_k = kv_of(*bc.rig.pool, full, l0, BlendCase::kPrefix, BlendCase::kSegment, true);
  const auto moved_k = kv_of(*bc.rig.pool, moved, l0, BlendCase::kPrefix, BlendCase::kSegment, true);
  EXPECT_LT(testing::rel_error(moved_k, fresh_k), 1e-5);
  const auto moved_v = kv_of(*bc.rig.pool, moved, l0, BlendCase::kPrefix, BlendCase::kSegment, false);
  EXPECT_LT(testing::rel_error(moved_v, kv_of(*bc.rig.pool, full, l0, BlendCase::kPrefix, BlendCase::kSegment, false)), 1e-6);
  EXPECT_EQ(moved_v, kv_of(*bc.rig.pool, bc.alone, l0, 0, BlendCase::kSegment, false));
  // Not moved (the KV at positions 0..), the keys differ: the move is what makes them equal.
  const auto unmoved_k = kv_of(*bc.rig.pool, bc.alone, l0, 0, BlendCase::kSegment, true);
  EXPECT_GT(testing::rel_error(unmoved_k, fresh_k), 1e-2);
}

// Positions near 2^32 are refused, not wrapped into an in-range check that then read past the
// page table; pages outside the pool are refused by name.
TEST(MoveKv, PositionsPastThePageTablesAreRefused) {
  BlendCase bc(*kvtier::testing::model_variant("llama", 9));
  SequenceKV one = bc.rig.sequence(1), other = bc.rig.sequence(1);
  const ModelConfig& c = bc.rig.model->config();
  EXPECT_EQ(move_kv(c, *bc.rig.pool, LayerIdx(0), one.pages, 0xFFFFFFF0u, other.pages, 0, 16).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(move_kv(c, *bc.rig.pool, LayerIdx(0), one.pages, 0, other.pages, 0xFFFFFFF0u, 16).code(),
            StatusCode::kInvalidArgument);
  const PageId stranger(1u << 30);
  EXPECT_EQ(move_kv(c, *bc.rig.pool, LayerIdx(0), std::span(&stranger, 1), 0, other.pages, 0, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(move_kv(c, *bc.rig.pool, LayerIdx(0), one.pages, 0, other.pages, 0, 1).ok());
}

// recompute_ratio = 1 computes what a plain prefill computes: the same logits,
// the same greedy continuation.
TEST_P(BlendVariant, RatioOneEqualsFullPrefill) {
  BlendCase bc(*kvtier::testing::model_variant(GetParam(), 9));
  SequenceKV full, mixed;
  const Logits ref = bc.full(full);
  BlendOptions blend;
  blend.recompute_ratio = 1.0f;
  auto got = bc.blended(mixed, blend);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(blend.recomputed, BlendCase::kSegment);
  EXPECT_LT(testing::rel_error(got->last(), ref.last()), 1e-6);
  EXPECT_EQ(argmax(got->last()), argmax(ref.last()));
  // And the KV it leaves in the pages continues the same way.
  TokenId a = argmax(ref.last()), b = argmax(got->last());
  for (int step = 0; step < 8; ++step) {
    SequenceKV* sa[] = {&full};
    SequenceKV* sb[] = {&mixed};
    auto da = bc.rig.engine->decode(sa, std::span(&a, 1));
    auto db = bc.rig.engine->decode(sb, std::span(&b, 1));
    ASSERT_TRUE(da.ok() && db.ok());
    a = argmax(da->last()), b = argmax(db->last());
    ASSERT_EQ(a, b) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, BlendVariant, ::testing::Values("llama", "qwen2", "llama3-scaled"));

// Below ratio 1 the reused rows keep their (moved) KV except the most
// deviating share, and the output is close to, not equal to, a full prefill.
TEST(Blend, PartialRatioRecomputesItsShareOnly) {
  BlendCase bc(testing::preset_model("tiny", 9));
  SequenceKV full, mixed;
  const Logits ref = bc.full(full);
  BlendOptions blend;  // ratio 0.15
  auto got = bc.blended(mixed, blend);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(blend.recomputed, uint32_t(std::ceil(0.15 * BlendCase::kSegment)));
  EXPECT_GT(testing::rel_error(got->last(), ref.last()), 0.0);
  EXPECT_LT(testing::rel_error(got->last(), ref.last()), 0.5);
  // The last layer's KV of a reused row not recomputed is the moved KV.
  const LayerIdx last(bc.rig.model->config().num_layers - 1);
  const auto moved = kv_of(*bc.rig.pool, bc.alone, last, 0, BlendCase::kSegment, false);
  const auto kept = kv_of(*bc.rig.pool, mixed, last, BlendCase::kPrefix, BlendCase::kSegment, false);
  size_t same_rows = 0;
  const size_t kv = bc.rig.model->config().kv_dim();
  for (size_t r = 0; r < BlendCase::kSegment; ++r)
    same_rows += std::equal(moved.begin() + r * kv, moved.begin() + (r + 1) * kv, kept.begin() + r * kv);
  EXPECT_EQ(same_rows, BlendCase::kSegment - blend.recomputed);
}

TEST(Blend, RefusesBadOptions) {
  BlendCase bc(testing::preset_model("tiny", 9));
  SequenceKV s = bc.rig.sequence(uint32_t(bc.prompt.size()));
  std::vector<uint8_t> reused(bc.prompt.size(), 0);
  BlendOptions blend;
  blend.reused = reused;
  PrefillOptions po;
  po.blend = &blend;
  blend.recompute_ratio = 1.5f;
  EXPECT_EQ(bc.rig.engine->prefill(s, bc.prompt, 0, po).status().code(), StatusCode::kInvalidArgument);
  blend.recompute_ratio = 0.1f;
  reused.back() = 1;  // the last position must be computed
  EXPECT_EQ(bc.rig.engine->prefill(s, bc.prompt, 0, po).status().code(), StatusCode::kInvalidArgument);
  reused.back() = 0;
  blend.check_layer = bc.rig.model->config().num_layers;
  EXPECT_EQ(bc.rig.engine->prefill(s, bc.prompt, 0, po).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::engine
