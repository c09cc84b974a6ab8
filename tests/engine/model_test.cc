#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "engine/model.h"
#include "engine/sampler.h"
#include "text/tokenizer.h"
#include "engine_fixture.h"

namespace kvtier::engine {
namespace {

TEST(ModelConfig, PresetsHaveTheIssueShapes) {
  auto tiny = *model_preset("tiny");
  EXPECT_EQ(tiny.num_layers, 2u);
  EXPECT_EQ(tiny.hidden_size, 64u);
  EXPECT_EQ(tiny.head_dim, 16u);
  EXPECT_EQ(tiny.num_kv_heads, 2u);
  EXPECT_EQ(tiny.vocab_size, 512u);
  auto small = *model_preset("small");
  EXPECT_EQ(small.num_layers, 8u);
  EXPECT_EQ(small.hidden_size, 512u);
  EXPECT_EQ(small.head_dim, 64u);
  EXPECT_EQ(small.ffn_size, 1408u);
  EXPECT_EQ(small.vocab_size, 32000u);
  EXPECT_GE(small.max_context, 32768u);
  auto b1 = *model_preset("1b");
  EXPECT_EQ(b1.num_layers, 16u);
  EXPECT_EQ(b1.hidden_size, 2048u);
  EXPECT_EQ(b1.num_heads, 32u);
  EXPECT_EQ(b1.num_kv_heads, 8u);
  EXPECT_EQ(b1.ffn_size, 8192u);
  EXPECT_EQ(b1.vocab_size, 128256u);
  EXPECT_EQ(b1.rope_theta, 500000.0f);
  EXPECT_GE(b1.max_context, 32768u);
  for (const auto& n : model_preset_names()) EXPECT_TRUE(model_preset(n)->validate().ok()) << n;
  EXPECT_FALSE(model_preset("huge").ok());
  const KVGeometry g = small.kv_geometry(DType::kF16, 16);
  EXPECT_EQ(g.bytes_per_token(), 8u * 2 * 4 * 64 * 2);
}

TEST(ModelConfig, ValidateRejectsBadShapes) {
  auto c = *model_preset("tiny");
  c.num_kv_heads = 3;
  EXPECT_FALSE(c.validate().ok());
  c = *model_preset("tiny");
  c.head_dim = 15;
  EXPECT_FALSE(c.validate().ok());
  c = *model_preset("tiny");
  c.rms_eps = 0;
  EXPECT_FALSE(c.validate().ok());
}

// Llama 3.1 8B's RoPE (base 500000, head_dim 128) under its scaling (factor 8,
// low 1, high 4, original context 8192). Worked by hand: pair i turns once
// every 2π·500000^(i/64) positions; that is under 8192/4 = 2048 up to pair 28
// (kept), over 8192 from pair 35 (slowed 8x), and pair 30's 2949.5 positions
// blend: s = (8192/2949.5 − 1)/3 = 0.5925, factor 1/((1 − s)/8 + s) = 1.554.
TEST(ModelConfig, Llama3RopeScalingFactors) {
  ModelConfig c = *model_preset("1b");
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  ASSERT_TRUE(c.apply_llama3_rope_scaling({}).ok());
  ASSERT_EQ(c.rope_freq_factors.size(), 64u);
  EXPECT_EQ(c.rope_freq_factors[0], 1.0f);
  EXPECT_EQ(c.rope_freq_factors[28], 1.0f);
  EXPECT_GT(c.rope_freq_factors[29], 1.0f);
  EXPECT_NEAR(c.rope_freq_factors[30], 1.554f, 2e-3);
  EXPECT_LT(c.rope_freq_factors[34], 8.0f);
  EXPECT_EQ(c.rope_freq_factors[35], 8.0f);
  EXPECT_EQ(c.rope_freq_factors[63], 8.0f);
  for (size_t i = 1; i < 64; ++i) EXPECT_GE(c.rope_freq_factors[i], c.rope_freq_factors[i - 1]) << i;
  // The rate divides by the factor.
  EXPECT_DOUBLE_EQ(c.rope_rate(40), std::pow(500000.0, -80.0 / 128.0) / 8.0);
  EXPECT_TRUE(c.validate().ok());
  // Only llama reads rope_freqs (as in llama.cpp); bad scaling parameters are refused.
  c.arch = Arch::kQwen2;
  EXPECT_FALSE(c.validate().ok());
  c.arch = Arch::kLlama;
  EXPECT_FALSE(c.apply_llama3_rope_scaling({.low_freq_factor = 4.0f, .high_freq_factor = 1.0f}).ok());
  c.rope_freq_factors[3] = 0.0f;
  EXPECT_FALSE(c.validate().ok());
}

TEST(ModelConfig, ArchitecturesByName) {
  EXPECT_EQ(*parse_arch("llama"), Arch::kLlama);
  EXPECT_EQ(*parse_arch("qwen2"), Arch::kQwen2);
  EXPECT_EQ(arch_name(Arch::kQwen2), "qwen2");
  auto bad = parse_arch("gemma2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'gemma2'"), std::string::npos);
  ModelConfig q = *model_preset("tiny");
  q.arch = Arch::kQwen2;
  EXPECT_EQ(q.rope_style(), RopeStyle::kRotateHalf);
  EXPECT_TRUE(q.has_qkv_bias());
  EXPECT_EQ(q.num_params(), model_preset("tiny")->num_params() + 2 * (64 + 2 * 32));
}

TEST(Model, SyntheticIsDeterministicAndFingerprinted) {
  auto a = testing::preset_model("tiny", 1);
  auto b = testing::preset_model("tiny", 1);
  auto c = testing::preset_model("tiny", 2);
  EXPECT_EQ(a->weights().layers[1].wqkv.to_f32(), b->weights().layers[1].wqkv.to_f32());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  EXPECT_FALSE(a->fingerprint().is_zero());
  // The config is part of the fingerprint too.
  auto cfg = a->config();
  cfg.rope_theta = 20000.0f;
  EXPECT_NE(model_fingerprint(cfg, a->weights()), a->fingerprint());
  // Weights are finite and not all zero.
  double ss = 0;
  for (float w : a->weights().layers[0].w_down.to_f32()) {
    ASSERT_TRUE(std::isfinite(w));
    ss += double(w) * w;
  }
  EXPECT_GT(ss, 0.0);
}

TEST(Model, FromPartsChecksShapes) {
  auto a = testing::preset_model("tiny");
  ModelWeights w = a->weights();
  std::vector<float> wo = w.layers[1].wo.to_f32();
  wo.resize(wo.size() - w.layers[1].wo.cols());  // one row short
  w.layers[1].wo = Linear::f32(std::move(wo), w.layers[1].wo.cols());
  auto r = Model::from_parts(a->config(), std::move(w), a->vocab());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer 1 wo"), std::string::npos) << r.status().to_string();
}

TEST(Tokenizer, SyntheticModelsSpellTextWithTheirVocabulary) {
  auto m = testing::preset_model("tiny");
  auto tok = text::Tokenizer::create(m->vocab());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string text = std::string("Hello, kvtier! \xC3\xA9\x00\xFF", 19);
  auto ids = tok->encode(text, {.add_bos = true});
  EXPECT_EQ(ids[0], m->vocab().bos);
  EXPECT_EQ(m->vocab().tokens[size_t(ids[1])], "\xE2\x96\x81");  // the leading-space prefix
  EXPECT_EQ(m->vocab().tokens[size_t(ids[2])], "<0x48>");          // 'H' by byte fallback
  EXPECT_EQ(tok->decode(ids), " " + text);
}

TEST(Sampler, GreedyTopKTopPAndSeeds) {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.9f, -5.0f};
  auto greedy = *Sampler::create({});
  EXPECT_EQ(greedy.sample(logits), 1);
  // top_k = 1 is greedy even at high temperature.
  auto k1 = *Sampler::create({.temperature = 5.0f, .top_k = 1, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.sample(logits), 1);
  // top_k = 2 only ever draws the two best.
  auto k2 = *Sampler::create({.temperature = 1.0f, .top_k = 2, .seed = 3});
  std::set<TokenId> seen;
  for (int i = 0; i < 200; ++i) seen.insert(k2.sample(logits));
  EXPECT_EQ(seen, (std::set<TokenId>{1, 3}));
  // A tiny top_p keeps only the most likely token.
  auto p = *Sampler::create({.temperature = 1.0f, .top_p = 0.05f, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(p.sample(logits), 1);
  // Same seed, same draws.
  auto s1 = *Sampler::create({.temperature = 2.0f, .seed = 42});
  auto s2 = *Sampler::create({.temperature = 2.0f, .seed = 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s1.sample(logits), s2.sample(logits));
  EXPECT_FALSE(Sampler::create({.top_p = 0.0f}).ok());
  EXPECT_FALSE(Sampler::create({.temperature = -1.0f}).ok());
}

// A NaN logit is never drawn, nor taken as the largest; a +inf logit is the only one drawn (its
// mass made the softmax NaN, and the least likely token came out every time).
TEST(Sampler, NonFiniteLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(1000, 0.0f);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i % 17) * 0.1f;
  logits[999] = -9.6f;
  logits[500] = inf;
  for (SamplerOptions o : {SamplerOptions{.temperature = 0.7f, .seed = 1},
                           SamplerOptions{.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .seed = 2}}) {
    auto s = *Sampler::create(o);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits), 500);
  }
  logits[500] = 0.0f;
  for (size_t i = 0; i < logits.size(); i += 3) logits[i] = nan;
  auto s = *Sampler::create({.temperature = 1.0f, .top_p = 0.95f, .seed = 3});
  for (int i = 0; i < 300; ++i) EXPECT_FALSE(std::isnan(logits[size_t(s.sample(logits))]));
  EXPECT_EQ(argmax(std::vector<float>{nan, 1.0f, 3.0f, 2.0f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{nan, nan}), 0);
}

// logit_bias moves a token's logit before anything else (greedy too); presence and frequency
// penalties lower the tokens drawn so far; min_p drops tokens far less likely than the best.
// (The server took these fields and ignored them.)
TEST(Sampler, LogitBiasPenaltiesAndMinP) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.8f, -20.0f};
  auto banned = *Sampler::create({.logit_bias = {{0, -100.0f}, {3, 30.0f}}});
  EXPECT_EQ(banned.sample(logits), 3);
  auto presence = *Sampler::create({.presence_penalty = 0.5f});
  std::vector<TokenId> drawn;
  for (int i = 0; i < 4; ++i) drawn.push_back(presence.sample(logits));
  EXPECT_EQ(drawn, (std::vector<TokenId>{0, 1, 2, 0}));  // each once, then the best again (0.5 > 0.4, 0.3)
  auto frequency = *Sampler::create({.frequency_penalty = 0.15f});
  drawn.clear();
  for (int i = 0; i < 3; ++i) drawn.push_back(frequency.sample(logits));
  EXPECT_EQ(drawn, (std::vector<TokenId>{0, 1, 0}));  // 0.85 > 0.8 > 0.75: token 0 again, then...
  auto min_p = *Sampler::create({.temperature = 1.0f, .seed = 5, .min_p = 0.5f});
  for (int i = 0; i < 200; ++i) EXPECT_LT(min_p.sample(logits), 3);  // e^-21 of the best is dropped
  EXPECT_FALSE(Sampler::create({.presence_penalty = 2.5f}).ok());
  EXPECT_FALSE(Sampler::create({.min_p = 1.5f}).ok());
  EXPECT_FALSE(Sampler::create({.logit_bias = {{1, 101.0f}}}).ok());
  EXPECT_FALSE(Sampler::create({.logit_bias = {{1, -100.0f}, {1, -100.0f}}}).ok());  // -200 by adding
}

// The nucleus is the smallest set of most likely tokens reaching top_p, found without sorting
// the whole vocabulary: over a long tail every draw is among the tokens it must hold.
TEST(Sampler, NucleusOverALongTail) {
  std::vector<float> logits(50000, -10.0f);
  for (int i = 0; i < 100; ++i) logits[size_t(i) * 311] = 5.0f - 0.01f * float(i);
  auto s = *Sampler::create({.temperature = 1.0f, .top_p = 0.5f, .seed = 4});
  std::set<TokenId> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits));
  for (TokenId t : seen) EXPECT_GE(logits[size_t(t)], 5.0f - 0.01f * 99) << t;
  EXPECT_GT(seen.size(), 30u);  // most of the hundred heavy tokens make up half the mass
}

}  // namespace
}  // namespace kvtier::engine
