// Internal: the CPU engine's working state and the stages of one layer,
// shared by the plain forward pass (engine.cc) and selective recompute
// (engine_blend.cc). Not part of the engine's API.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "engine/attention.h"
#include "engine/engine.h"
#include "engine/matmul.h"
#include "engine/worker_pool.h"

namespace kvtier::engine {

// Consecutive rows [row0, row0 + n) of one sequence at positions pos0.. .
struct RowSpan {
  SequenceKV* seq;
  uint32_t row0;
  uint32_t n;
  uint32_t pos0;
};

struct Engine::Impl {
  Impl(const ModelConfig& c, uint32_t threads, bool split_gemm, bool exact_weights);

  // Scratch for m rows.
  void reserve(uint32_t m);
  // Y[M][N] = X[M][K] · W[N][K]^T + beta · Y, W in its stored types (engine/matmul.h).
  void matmul(const float* x, uint32_t m, const Linear& w, float* y, float beta);
  // The embedding rows of `tokens` as f32 into out[tokens.size()][hidden].
  void embed_rows(const Model& model, std::span<const TokenId> tokens, float* out) const;

  // Parallel loop over rows in blocks (elementwise work).
  template <class F>
  void rows_parallel(uint32_t m, F&& f) {
    const uint32_t block = 32;
    const size_t tasks = (m + block - 1) / block;
    workers.run(tasks, [&](size_t t, uint32_t) {
      const uint32_t r1 = std::min<uint32_t>(m, uint32_t(t + 1) * block);
      for (uint32_t r = uint32_t(t) * block; r < r1; ++r) f(r);
    });
  }

  // The stages of one layer over m rows of x (x, rope tables and scratch rows
  // share indices; `spans` map rows to sequence positions):
  // qkv rows of x, normed, projected, biased and rotated (reserve(m) first).
  void qkv_rows(const LayerWeights& lw, const float* x, const float* rope_cs, uint32_t m);
  // The K and V of those rows into their pages at `layer`.
  void store_rows(BlockPool& pool, LayerIdx layer, std::span<const RowSpan> spans);
  // Attention over the pages, the output projection and the MLP, added into x.
  void attend_and_mlp(BlockPool& pool, const LayerWeights& lw, LayerIdx layer, float* x, uint32_t m,
                      std::span<const RowSpan> spans);
  // All three.
  void layer_pass(BlockPool& pool, const LayerWeights& lw, LayerIdx layer, float* x, const float* rope_cs, uint32_t m,
                  std::span<const RowSpan> spans);

  // x and rope_cs for tokens at positions first_pos.. .
  void embed(const Model& model, std::span<const TokenId> tokens, uint32_t first_pos);
  // One layer over rows [0, n) of x at positions pos0.., in chunks of `chunk` rows.
  void contiguous_layer(BlockPool& pool, const LayerWeights& lw, LayerIdx layer, SequenceKV& seq, uint32_t pos0,
                        uint32_t n, uint32_t chunk);
  // Logits of `rows` rows of final hidden states.
  Logits project_logits(const Model& model, const float* rows_x, uint32_t rows);

  ModelConfig cfg;
  AttentionShape shape;
  WorkerPool workers;
  Matmul mm;
  std::vector<AttentionScratch> scratch;
  std::vector<float> x, h, qkv, attn, gu, act, rope_cs;
  double attention_seconds = 0;
};

}  // namespace kvtier::engine
