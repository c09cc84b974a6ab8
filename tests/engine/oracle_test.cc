// An independent double-precision forward pass (no pages, no BLAS, no
// chunking) that the engine must agree with.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/attention.h"
#include "engine_fixture.h"
#include "model_variants.h"

namespace kvtier::engine {
namespace {

using Vec = std::vector<double>;

Vec matvec(const float* w, size_t out, size_t in, const Vec& x) {
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o)
    for (size_t i = 0; i < in; ++i) y[o] += double(w[o * in + i]) * x[i];
  return y;
}

Vec rmsnorm(const Vec& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// RoPE written from the definitions, not from the engine's code: pair i of
// a head is (x[2i], x[2i+1]) for llama and (x[i], x[i + D/2]) for qwen2 (the
// Hugging Face rotate_half), turning by pos * scale * base^(-2i/D) / factor_i.
void rope(double* v, const ModelConfig& c, size_t pos) {
  const size_t dim = c.head_dim;
  for (size_t i = 0; i < dim / 2; ++i) {
    double rate = double(c.rope_freq_scale) * std::pow(double(c.rope_theta), -2.0 * double(i) / double(dim));
    if (!c.rope_freq_factors.empty()) rate /= double(c.rope_freq_factors[i]);
    const double a = double(pos) * rate;
    double& x0 = c.arch == Arch::kQwen2 ? v[i] : v[2 * i];
    double& x1 = c.arch == Arch::kQwen2 ? v[i + dim / 2] : v[2 * i + 1];
    const double y0 = x0 * std::cos(a) - x1 * std::sin(a), y1 = x0 * std::sin(a) + x1 * std::cos(a);
    x0 = y0, x1 = y1;
  }
}

void add(Vec& x, const float* bias) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += double(bias[i]);
}

std::vector<Vec> oracle_logits(const Model& m, const std::vector<TokenId>& tokens) {
  const ModelConfig& c = m.config();
  const size_t H = c.hidden_size, D = c.head_dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_size, n = tokens.size();
  std::vector<Vec> x(n);
  const std::vector<float> embd = m.weights().token_embd.to_f32();
  for (size_t t = 0; t < n; ++t) x[t].assign(&embd[tokens[t] * H], &embd[tokens[t] * H] + H);
  for (const LayerWeights& lw : m.weights().layers) {
    const std::vector<float> wqkv = lw.wqkv.to_f32(), wo = lw.wo.to_f32(), gate_up = lw.w_gate_up.to_f32(),
                             down = lw.w_down.to_f32();
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec h = rmsnorm(x[t], lw.attn_norm, c.rms_eps);
      q[t] = matvec(wqkv.data(), Q, H, h);
      k[t] = matvec(wqkv.data() + Q * H, KV, H, h);
      v[t] = matvec(wqkv.data() + (Q + KV) * H, KV, H, h);
      if (c.arch == Arch::kQwen2) add(q[t], lw.bqkv.data()), add(k[t], lw.bqkv.data() + Q), add(v[t], lw.bqkv.data() + Q + KV);
      for (size_t hd = 0; hd < c.num_heads; ++hd) rope(&q[t][hd * D], c, t);
      for (size_t hd = 0; hd < c.num_kv_heads; ++hd) rope(&k[t][hd * D], c, t);
    }
    for (size_t t = 0; t < n; ++t) {
      Vec o(Q, 0.0);
      for (size_t hd = 0; hd < c.num_heads; ++hd) {
        const size_t kh = hd / (c.num_heads / c.num_kv_heads);
        Vec s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (size_t e = 0; e < D; ++e) d += q[t][hd * D + e] * k[j][kh * D + e];
          s[j] = d / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t e = 0; e < D; ++e) o[hd * D + e] += s[j] / sum * v[j][kh * D + e];
      }
      const Vec a = matvec(wo.data(), H, Q, o);
      for (size_t i = 0; i < H; ++i) x[t][i] += a[i];
      const Vec h = rmsnorm(x[t], lw.ffn_norm, c.rms_eps);
      const Vec g = matvec(gate_up.data(), F, H, h);
      const Vec u = matvec(gate_up.data() + F * H, F, H, h);
      Vec act(F);
      for (size_t i = 0; i < F; ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec d = matvec(down.data(), H, F, act);
      for (size_t i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }
  std::vector<Vec> logits(n);
  const std::vector<float> out = m.output_matrix().to_f32();
  for (size_t t = 0; t < n; ++t) logits[t] = matvec(out.data(), c.vocab_size, H, rmsnorm(x[t], m.weights().output_norm, c.rms_eps));
  return logits;
}

// Largest |a - b| over all logits, relative to the largest |b|.
double relative_difference(const Logits& a, const std::vector<Vec>& b) {
  double num = 0, den = 0;
  for (uint32_t t = 0; t < a.rows; ++t)
    for (uint32_t i = 0; i < a.vocab; ++i) {
      num = std::max(num, std::fabs(double(a.row(t)[i]) - b[t][i]));
      den = std::max(den, std::fabs(b[t][i]));
    }
  return num / den;
}

Logits engine_logits(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens, EngineOptions options) {
  const uint32_t n = uint32_t(tokens.size());
  // Odd page size exercises the paging paths.
  testing::Rig rig(std::move(model), DType::kF32, n / 5 + 2, 5, options);
  SequenceKV s = rig.sequence(n);
  auto r = rig.engine->prefill(s, tokens, 0, {.all_logits = true});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : Logits{};
}

void expect_agrees_with_reference(std::shared_ptr<const Model> model, uint32_t n, EngineOptions options) {
  const auto tokens = testing::random_tokens(n, model->config().vocab_size, 77);
  const auto ref = oracle_logits(*model, tokens);
  const Logits r = engine_logits(model, tokens, options);
  ASSERT_EQ(r.rows, n);
  for (uint32_t t = 0; t < n; ++t) {
    double num = 0, den = 0;
    for (uint32_t i = 0; i < r.vocab; ++i) {
      num = std::max(num, std::fabs(double(r.row(t)[i]) - ref[t][i]));
      den = std::max(den, std::fabs(ref[t][i]));
    }
    ASSERT_LT(num / den, 1e-3) << "position " << t;
  }
}

void expect_agrees_with_reference(uint32_t n, EngineOptions options) {
  expect_agrees_with_reference(testing::preset_model("tiny", 21), n, options);
}

TEST(Oracle, EngineAgreesWithDoublePrecisionReference) {
  // A prefill chunk that splits the prompt: later chunks attend to cached pages.
  expect_agrees_with_reference(150, {.prefill_chunk = 64});
}

TEST(Oracle, AttentionSplitIntoSeveralQueryBlocksAgrees) {
  // One prefill call longer than an attention task's query block, so one
  // sequence's queries are split across tasks.
  const auto c = testing::preset_model("tiny", 21)->config();
  const uint32_t block = attention_block_tokens({c.num_heads, c.num_kv_heads, c.head_dim, 1.0f});
  expect_agrees_with_reference(2 * block + 37, {});
}

class OracleVariant : public ::testing::TestWithParam<std::string> {};

// Each architecture variant against the reference, split into prefill chunks.
// The variant must matter: the reference of the plain llama model with the
// same weights is far from it (else an engine ignoring the variant would pass).
TEST_P(OracleVariant, AgreesWithDoublePrecisionReference) {
  auto model = kvtier::testing::model_variant(GetParam(), 21);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  expect_agrees_with_reference(*model, 150, {.prefill_chunk = 64});
  if (GetParam() == "llama") return;
  const auto tokens = testing::random_tokens(150, (*model)->config().vocab_size, 77);
  const Logits plain = engine_logits(testing::preset_model("tiny", 21), tokens, {});
  EXPECT_GT(relative_difference(plain, oracle_logits(**model, tokens)), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Oracle, OracleVariant, ::testing::ValuesIn(kvtier::testing::model_variant_names()));

}  // namespace
}  // namespace kvtier::engine
