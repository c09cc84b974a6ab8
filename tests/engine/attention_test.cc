// The attention kernels (engine/attention.h) against a direct double-precision
// reference, and the AVX-512 prefill kernel against the AVX2 one on the same
// inputs: random K/V in pages (f32 and f16), grouped heads, a cached prefix
// and a block of new tokens.
#include <gtest/gtest.h>

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

  AttentionJob job(float* out, bool decode) const {
    const Case& c = GetParam();
    return {.pool = pool_.get(), .pages = pages_, .layer = LayerIdx{0}, .q = q_.data(),
            .q_stride = size_t(c.heads) * c.head_dim, .out = out, .out_stride = size_t(c.heads) * c.head_dim,
            .n_tokens = c.tokens, .pos0 = c.pos0, .decode = decode};
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

  std::vector<float> run(bool decode) const {
    const Case& c = GetParam();
    std::vector<float> out(q_.size());
    AttentionScratch scratch(shape_, c.tokens * (c.heads / c.kv_heads));
    for (uint32_t kvh = 0; kvh < c.kv_heads; ++kvh) attend(shape_, job(out.data(), decode), kvh, 0, c.tokens, scratch);
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

// Whichever prefill kernel the CPU runs (16 lanes with AVX-512, else 8).
TEST_P(AttentionKernels, PrefillMatchesTheReference) { expect_near_reference(run(/*decode=*/false)); }

// Decode's path over every token in one call (as a prefill that recomputes decoded tokens runs it).
TEST_P(AttentionKernels, DecodeMatchesTheReference) { expect_near_reference(run(/*decode=*/true)); }

// A token's decode rows are the same bit for bit whichever tokens share the call: one at a time (a
// decode step) or all of them (PrefillOptions::decode_from).
TEST_P(AttentionKernels, DecodeRowsDoNotDependOnTheTokensBesideThem) {
  const Case& c = GetParam();
  const std::vector<float> together = run(/*decode=*/true);
  std::vector<float> alone(q_.size());
  AttentionScratch scratch(shape_, c.heads / c.kv_heads);
  for (uint32_t t = 0; t < c.tokens; ++t)
    for (uint32_t kvh = 0; kvh < c.kv_heads; ++kvh) attend(shape_, job(alone.data(), true), kvh, t, t + 1, scratch);
  EXPECT_EQ(alone, together);
}

// The two chunked kernels on the same inputs, each against the reference (they round apart).
TEST_P(AttentionKernels, WideAndNarrowPrefillKernelsAgree) {
  if (!qdot::cpu_has(qdot::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512: the CPU runs only the 8-lane kernel";
  const Case& c = GetParam();
  const uint32_t rows = c.tokens * (c.heads / c.kv_heads), D = c.head_dim;
  std::vector<float> q(size_t(rows) * D), o(q.size()), m(rows), l(rows), kt(size_t(D) * kMaxChunkKeys),
      v(kt.size()), p(size_t(kMaxRowGroup) * kMaxChunkKeys), narrow(q_.size()), wide(q_.size());
  std::vector<uint32_t> pos(rows);
  const AttentionBuffers b{q.data(), o.data(), m.data(), l.data(), pos.data(), kt.data(), v.data(), p.data()};
  for (uint32_t kvh = 0; kvh < c.kv_heads; ++kvh) {
    attend_chunked_avx2(shape_, job(narrow.data(), false), kvh, 0, c.tokens, b);
    attend_chunked_avx512(shape_, job(wide.data(), false), kvh, 0, c.tokens, b);
  }
  expect_near_reference(narrow);
  expect_near_reference(wide);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         ::testing::Values(Case{DType::kF32, 64, 8, 4, 0, 37}, Case{DType::kF16, 64, 8, 2, 150, 21},
                                           Case{DType::kF16, 128, 4, 4, 70, 9}, Case{DType::kF32, 32, 4, 1, 33, 50}));

}  // namespace
}  // namespace kvtier::engine
