// Internal: causal grouped-query attention over KV held in BlockPool pages.
//
// One kernel for prefill and decode. Keys go in chunks of kChunkKeys at fixed
// positions (0, 64, 128, ...): a task widens each chunk's K and V rows of its
// KV head to f32 once, for all its query rows (every query head of the group,
// every token of the task), and each row keeps a running max, a running sum
// and an unnormalised output over the chunks (online softmax), so no score
// matrix is ever materialised. Tasks are independent and run on any worker.
//
// A row's arithmetic depends only on its query, its position and the KV: not
// on the rows beside it, nor on the task that holds it. So a decode step (one
// token) computes what a prefill computes for the same position bit for bit,
// and the KV a sequence's decode steps write is the KV a prefill of the same
// tokens writes wherever the matrices round a row alike at any batch (the
// quantized and F16 weights' products, engine/matmul.h). The arithmetic is
// that of 8-lane vectors (AVX2) on every CPU; with AVX-512 four rows take each
// step together, two to a register (engine/attention_rows.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "memory/block_pool.h"

namespace kvtier::engine {

struct AttentionShape {
  uint32_t num_heads = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;  // a multiple of 16
  float scale = 1.0f;     // 1/sqrt(head_dim)
};

// One sequence's queries for one layer.
struct AttentionJob {
  const BlockPool* pool = nullptr;
  std::span<const PageId> pages;  // covers positions [0, pos0 + n_tokens)
  LayerIdx layer;
  const float* q = nullptr;  // token t's head h at q[t * q_stride + h * head_dim]
  size_t q_stride = 0;
  float* out = nullptr;  // same indexing with out_stride
  size_t out_stride = 0;
  uint32_t n_tokens = 0;
  uint32_t pos0 = 0;  // position of token 0; token t attends keys [0, pos0 + t]
};

// Keys per chunk: the online softmax's step, part of every row's arithmetic.
inline constexpr uint32_t kChunkKeys = 64;

// A task's buffers: per query row its pre-scaled q, unnormalised o, running max m and sum l; a
// chunk's K and V rows widened to f32; four rows' scores or probabilities (p).
struct AttentionBuffers {
  float *q, *o, *m, *l, *k, *v, *p;
};

// Per-worker scratch, sized for `shape` and at most `max_rows` query rows.
class AttentionScratch {
 public:
  AttentionScratch(const AttentionShape& shape, uint32_t max_rows);
  AttentionBuffers buffers();

 private:
  std::vector<float> q_, o_, m_, l_, k_, v_, p_;
};

// Query tokens per task so that a task has about 256 query rows (each task
// converts the K/V it reads once for all its rows).
uint32_t attention_block_tokens(const AttentionShape& shape);

// Attention for KV head `kv_head` and tokens [t_begin, t_end) of `job`.
void attend(const AttentionShape& shape, const AttentionJob& job, uint32_t kv_head, uint32_t t_begin, uint32_t t_end,
            AttentionScratch& scratch);

// The kernel on 8-lane vectors (AVX2), and on 16 (attention_avx512.cc; call only where
// qdot::cpu_has(qdot::Isa::kAvx512)), which computes the same bits two rows at a time. attend()
// picks one per process; these are for tests.
void attend_avx2(const AttentionShape& shape, const AttentionJob& job, uint32_t kv_head, uint32_t t_begin,
                 uint32_t t_end, AttentionScratch& scratch);
void attend_avx512(const AttentionShape& shape, const AttentionJob& job, uint32_t kv_head, uint32_t t_begin,
                   uint32_t t_end, AttentionScratch& scratch);

}  // namespace kvtier::engine
