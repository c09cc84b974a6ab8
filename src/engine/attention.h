// Internal: causal grouped-query attention over KV held in BlockPool pages.
//
// The kernel walks keys in chunks of 64 (gathered from the sequence's pages
// and converted to f32, K transposed), and for a block of query rows keeps a
// running max, a running sum and an unnormalised output per row (online
// softmax), so no score matrix is ever materialised. A task is one KV head
// and one block of query tokens; all query heads of the group share the
// converted K/V chunk. Tasks are independent and run on any worker.
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
  // Decode's kernel: rows read K and V straight from the pages, key by key, with an exact two-pass
  // softmax (no transposed chunk: for a handful of rows the transposition was most of the cost).
  // It rounds otherwise than the chunked path, so decode steps always take it, and prefills only
  // for the rows of tokens a sequence's decode steps wrote (engine.h, PrefillOptions::decode_from);
  // a row's result does not depend on the other tokens of the job.
  bool decode = false;
};

// A worker's scratch (AttentionScratch) as the kernel uses it: per query row its q, unnormalised
// output o, running max m, running sum l and position; a chunk's K transposed (kt) and V (v); the
// probabilities of a row group (p).
struct AttentionBuffers {
  float *q, *o, *m, *l;
  uint32_t* pos;
  float *kt, *v, *p;
};

// Prefill's chunked kernel (engine/attention_chunked.h) on 8 lanes (AVX2), and on 16 lanes
// (attention_avx512.cc; call only where qdot::cpu_has(qdot::Isa::kAvx512)). attend() picks one
// per process; these are for tests. The buffers hold at least kMaxChunkKeys keys of K and V and
// kMaxRowGroup rows of probabilities.
inline constexpr uint32_t kMaxChunkKeys = 64, kMaxRowGroup = 4;
void attend_chunked_avx2(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin,
                         uint32_t t_end, const AttentionBuffers& b);
void attend_chunked_avx512(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin,
                           uint32_t t_end, const AttentionBuffers& b);

// Per-worker scratch, sized for `shape` and at most `max_rows` query rows.
class AttentionScratch {
 public:
  AttentionScratch(const AttentionShape& shape, uint32_t max_rows);

 private:
  friend void attend(const AttentionShape&, const AttentionJob&, uint32_t, uint32_t, uint32_t, AttentionScratch&);
  std::vector<float> q_, o_, m_, l_, kt_, v_, p_, scores_;
  std::vector<uint32_t> pos_;
};

// Query tokens per task so that a task has about 256 query rows (each task
// converts the K/V it reads once for all its rows).
uint32_t attention_block_tokens(const AttentionShape& shape);

// Attention for KV head `kv_head` and tokens [t_begin, t_end) of `job`.
void attend(const AttentionShape& shape, const AttentionJob& job, uint32_t kv_head, uint32_t t_begin, uint32_t t_end,
            AttentionScratch& scratch);

}  // namespace kvtier::engine
