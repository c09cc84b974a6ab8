// The comparisons of bench/logit_compare.h: KL, top-2 margins, greedy agreement.
#include "logit_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvtier::bench {
namespace {

TEST(LogitCompare, Top2MarginIsTheGapBetweenTheTwoLargest) {
  EXPECT_DOUBLE_EQ(top2_margin(std::vector<float>{1.0f, 3.5f, -2.0f, 3.0f}), 0.5);
  EXPECT_DOUBLE_EQ(top2_margin(std::vector<float>{4.0f, 1.0f, 2.0f}), 2.0);  // the largest first
  EXPECT_DOUBLE_EQ(top2_margin(std::vector<float>{2.0f, 2.0f, 1.0f}), 0.0);  // a tie
  EXPECT_DOUBLE_EQ(top2_margin(std::vector<float>{7.0f}), 0.0);
}

TEST(LogitCompare, KlIsZeroOnEqualRowsAndPositiveOtherwise) {
  const std::vector<float> p{0.0f, 1.0f, 2.0f}, q{0.0f, 1.0f, 2.5f};
  EXPECT_NEAR(kl_divergence(p, p), 0.0, 1e-12);
  EXPECT_GT(kl_divergence(p, q), 0.0);
  EXPECT_NEAR(top_probability(std::vector<float>{0.0f, 0.0f}), 0.5, 1e-12);
}

TEST(LogitCompare, SequencesAgreePositionByPositionAndInTheirLeadingRun) {
  const std::vector<TokenId> a{1, 2, 3, 4}, b{1, 2, 9, 4};
  EXPECT_EQ(same_positions(a, b), 3u);
  EXPECT_EQ(common_prefix_length(a, b), 2u);
  EXPECT_EQ(common_prefix_length(a, a), 4u);
}

}  // namespace
}  // namespace kvtier::bench
