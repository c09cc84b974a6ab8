// Prompts from real text (bench/prompt_text.h) and `bench weights` on the trained fixture model.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/gguf.h"
#include "engine/model.h"
#include "model/model_config.h"
#include "prompt_text.h"
#include "test_data.h"
#include "weights_bench.h"

namespace kvtier::bench {
namespace {

std::string fixture(const char* type) {
  return testdata::test_data_path(std::string("models/fixture-trained-") + type + ".gguf");
}

TEST(PromptTextTest, RealVocabularyDrawsRunsOfTheText) {
  auto model = engine::load_gguf(fixture("q8_0"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto text = PromptText::open(**model, "");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->source().find("heldout.txt"), std::string::npos);
  std::mt19937_64 a(3), b(3);
  const auto x = text->draw(a, 200), y = text->draw(b, 200);
  EXPECT_EQ(x, y);  // seeded
  // Real text: far fewer distinct ids than a uniform draw over 32,000 would give.
  std::vector<TokenId> sorted = x;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_LT(std::unique(sorted.begin(), sorted.end()) - sorted.begin(), 150);
  EXPECT_EQ(PromptText::open(**model, "/nonexistent/text.txt").status().code(), StatusCode::kNotFound);
}

TEST(PromptTextTest, SyntheticVocabularyDrawsRandomIds) {
  auto cfg = engine::model_preset("tiny");
  ASSERT_TRUE(cfg.ok());
  auto model = engine::Model::synthetic(*cfg, 1);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto text = PromptText::open(**model, "");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->source(), "random ids");
  std::mt19937_64 rng(1);
  for (TokenId t : text->draw(rng, 100)) EXPECT_TRUE(t >= 300 && t < TokenId((*model)->config().vocab_size));
}

TEST(WeightsBenchTest, SameFileAgreesAndQ8IsClose) {
  WeightsBenchOptions o{.model = fixture("f16"), .reference = fixture("f16"), .prompts = 2, .prompt_tokens = 48,
                        .greedy_tokens = 8, .threads = 1};
  auto same = run_weights_bench(o, nullptr);
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  EXPECT_EQ(same->positions, 96u);
  EXPECT_NEAR(same->kl_mean, 0.0, 1e-9);
  EXPECT_EQ(same->top1, 1.0);
  EXPECT_EQ(same->greedy_agreement, 1.0);
  o.model = fixture("q8_0");
  auto q8 = run_weights_bench(o, nullptr);
  ASSERT_TRUE(q8.ok()) << q8.status().to_string();
  EXPECT_GT(q8->kl_mean, 0.0);  // another type: not bit-identical
  EXPECT_LT(q8->kl_mean, 0.01);
  o.reference = "tiny";
  EXPECT_FALSE(run_weights_bench(o, nullptr).ok());
}

}  // namespace
}  // namespace kvtier::bench
