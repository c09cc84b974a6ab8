// The attention kernel (engine/attention.h) against a direct double-precision
// reference, and a row's result against the same row computed in other
// company: random K/V in pages (f32 and f16), grouped heads, a cached prefix
// and a block of new tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/attention.h"
#include "engine/kv_rows.h"
#include "engine/qdot.h"
#include "memory/block_pool.h"

namespace kvtier::engine {
namespace {

struct Case {
  DType dtype;
  uint32_t head_dim, heads, kv_heads, pos0, tokens;
};

class AttentionKernels : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    shape_ = {.num_heads = c.heads, .num_kv_heads = c.kv_heads, .head_dim = c.head_dim,
              .scale = 1.0f / std::sqrt(float(c.head_dim))};
    KVGeometry geo{.num_layers = 1, .num_kv_heads = c.kv_heads, .head_dim = c.head_dim, .dtype = c.dtype,
                   .page_tokens = 16};
    const uint32_t n = c.pos0 + c.tokens;
    auto pool = BlockPool::create({.geometry = geo, .num_pages = (n + 15) / 16});
    ASSERT_TRUE(pool.ok()) << pool.status().to_string();
    pool_ = std::move(*pool);
    ASSERT_TRUE(pool_->allocate((n + 15) / 16, pages_).ok());
    std::mt19937 rng(7);
    std::normal_distribution<float> value(0.0f, 1.0f);
    const uint32_t kv = c.kv_heads * c.head_dim;
    k_.resize(size_t(n) * kv), v_.resize(size_t(n) * kv);
    for (float& x : k_) x = value(rng);
    for (float& x : v_) x = value(rng);
    for (uint32_t pos = 0; pos < n; ++pos) {
      const size_t off = size_t(pos % 16) * geo.token_kv_half_bytes();
      store_kv_row(c.dtype, &k_[size_t(pos) * kv], pool_->k(pages_[pos / 16], LayerIdx{0}) + off, kv);
      store_kv_row(c.dtype, &v_[size_t(pos) * kv], pool_->v(pages_[pos / 16], LayerIdx{0}) + off, kv);
      load_kv_row(c.dtype, pool_->k(pages_[pos / 16], LayerIdx{0}) + off, &k_[size_t(pos) * kv], kv);  // as stored
      load_kv_row(c.dtype, pool_->v(pages_[pos / 16], LayerIdx{0}) + off, &v_[size_t(pos) * kv], kv);
    }
    q_.resize(size_t(c.tokens) * c.heads * c.head_dim);
    for (float& x : q_) x = value(rng);
  }

  AttentionJob job(float* out) const {
    const Case& c = GetParam();
    return {.pool = pool_.get(), .pages = pages_, .layer = LayerIdx{0}, .q = q_.data(),
            .q_stride = size_t(c.heads) * c.head_dim, .out = out, .out_stride = size_t(c.heads) * c.head_dim,
            .n_tokens = c.tokens, .pos0 = c.pos0};
  }

  // Softmax(q · K / sqrt(d)) · V in double, causal, for token t and head h.
  std::vector<double> reference(uint32_t t, uint32_t h) const {
    const Case& c = GetParam();
    const uint32_t D = c.head_dim, kvh = h / (c.heads / c.kv_heads), kv = c.kv_heads * D, n = c.pos0 + t + 1;
    std::vector<double> s(n), out(D, 0.0);
    double mx = -INFINITY, sum = 0.0;
    for (uint32_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (uint32_t d = 0; d < D; ++d) dot += double(q_[(size_t(t) * c.heads + h) * D + d]) * k_[size_t(j) * kv + kvh * D + d];
      s[j] = dot * shape_.scale, mx = std::max(mx, s[j]);
    }
    for (uint32_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (uint32_t j = 0; j < n; ++j)
      for (uint32_t d = 0; d < D; ++d) out[d] += s[j] / sum * v_[size_t(j) * kv + kvh * D + d];
    return out;
  }

  using Kernel = void (*)(const AttentionShape&, const AttentionJob&, uint32_t, uint32_t, uint32_t, AttentionScratch&);

  // Every token's rows, in tasks of `block` tokens (the engine's tasks are attention_block_tokens).
  std::vector<float> run(uint32_t block, Kernel kernel = attend) const {
    const Case& c = GetParam();
    std::vector<float> out(q_.size());
    AttentionScratch scratch(shape_, block * (c.heads / c.kv_heads));
    for (uint32_t t = 0; t < c.tokens; t += block)
      for (uint32_t kvh = 0; kvh < c.kv_heads; ++kvh)
        kernel(shape_, job(out.data()), kvh, t, std::min(c.tokens, t + block), scratch);
    return out;
  }

  void expect_near_reference(const std::vector<float>& got) const {
    const Case& c = GetParam();
    for (uint32_t t = 0; t < c.tokens; ++t)
      for (uint32_t h = 0; h < c.heads; ++h) {
        const std::vector<double> want = reference(t, h);
        for (uint32_t d = 0; d < c.head_dim; ++d)
          ASSERT_NEAR(got[(size_t(t) * c.heads + h) * c.head_dim + d], want[d], 2e-5)
              << "token " << t << " head " << h << " dim " << d;
      }
  }

  AttentionShape shape_;
  std::unique_ptr<BlockPool> pool_;
  std::vector<PageId> pages_;
  std::vector<float> k_, v_, q_;
};

TEST_P(AttentionKernels, MatchesTheReference) { expect_near_reference(run(GetParam().tokens)); }

// A token's rows are the same bit for bit whichever tokens share the task: one at a time (a decode
// step), all of them (a prefill), or blocks that start anywhere (a prompt computed in chunks).
TEST_P(AttentionKernels, RowsDoNotDependOnTheTokensBesideThem) {
  const std::vector<float> together = run(GetParam().tokens);
  EXPECT_EQ(run(1), together);
  EXPECT_EQ(run(7), together);
  EXPECT_EQ(run(16), together);
}

// The 16-lane kernel (two rows a register) computes the 8-lane kernel's bits, in any company: a
// process, and every machine that shares a tier, gets the same KV whichever the CPU runs.
TEST_P(AttentionKernels, WideAndNarrowKernelsAgreeBitForBit) {
  if (!qdot::cpu_has(qdot::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512: the CPU runs only the 8-lane kernel";
  const uint32_t n = GetParam().tokens;
  const std::vector<float> narrow = run(n, attend_avx2);
  expect_near_reference(narrow);
  for (const uint32_t block : {n, 1u, 3u, 16u}) EXPECT_EQ(run(block, attend_avx512), narrow) << "tasks of " << block;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         ::testing::Values(Case{DType::kF32, 64, 8, 4, 0, 37}, Case{DType::kF16, 64, 8, 2, 150, 21},
                                           Case{DType::kF16, 128, 4, 4, 70, 9}, Case{DType::kF32, 32, 4, 1, 33, 50},
                                           Case{DType::kF32, 64, 14, 2, 40, 30},   // 7 heads a group: odd
                                           Case{DType::kF16, 256, 2, 1, 5, 12},    // a head of 256
                                           Case{DType::kF32, 16, 3, 1, 100, 5}));  // a head of 16

}  // namespace
}  // namespace kvtier::engine
