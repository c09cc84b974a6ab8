// Internal: the chunked attention kernel of prefill (engine/attention.h),
// generic over the vector width. attention.cc instantiates it on 8-lane
// vectors (AVX2); attention_avx512.cc on 16-lane vectors inside a target
// region, for CPUs with AVX-512. Everything here has internal linkage (an
// unnamed namespace), so no copy compiled for one ISA is ever shared with
// code compiled for another; the including file includes the headers below
// before any target region. Not a public header.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/attention.h"
#include "engine/kv_rows.h"
#include "engine/simd.h"

namespace kvtier::engine {

// Register tiles: the scores (row_group rows × chunk_keys keys), a slice of K and the P·V tile
// (row_group rows × kPvVecs vectors of a head row) stay in registers: 32 of 16 lanes on
// AVX-512, 16 of 8 on AVX2.
template <class V>
inline constexpr uint32_t chunk_keys = 4 * simd::lanes<V>;  // keys per chunk
template <class V>
inline constexpr uint32_t row_group = simd::lanes<V> / 4;  // query rows that share each K/V load: 4, or 2 on AVX2
inline constexpr uint32_t kPvVecs = 4;                     // head-row vectors of O held at once
static_assert(chunk_keys<simd::vfloat16> == kMaxChunkKeys && row_group<simd::vfloat16> == kMaxRowGroup);

namespace {

using simd::load;
using simd::splat;
using simd::store;

// The kernel's phases below are forced inline into attend_chunked, so the register tiles they
// share (a row group's scores, its slice of O) never leave registers.
#define KVTIER_ATTN_PHASE [[gnu::always_inline]] inline

// Where the kernel's rows, keys and head rows are: one query range of one KV head.
struct ChunkedRange {
  uint32_t D;         // head_dim
  uint32_t g;         // query heads per KV head
  uint32_t rows;      // (t_end - t_begin) * g, ordered (token, head in group)
  size_t tok_stride;  // bytes between tokens in a K or V block
};

// The rows' queries, pre-scaled, with their positions; running max -inf, sum 0, O zero.
KVTIER_ATTN_PHASE void load_queries(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin,
                                    uint32_t t_end, const ChunkedRange& cr, const AttentionBuffers& b) {
  for (uint32_t t = t_begin; t < t_end; ++t)
    for (uint32_t hh = 0; hh < cr.g; ++hh) {
      const uint32_t r = (t - t_begin) * cr.g + hh;
      const float* src = job.q + t * job.q_stride + size_t(kvh * cr.g + hh) * cr.D;
      for (uint32_t d = 0; d < cr.D; ++d) b.q[size_t(r) * cr.D + d] = src[d] * sh.scale;
      b.pos[r] = job.pos0 + t;
      b.m[r] = -INFINITY;
      b.l[r] = 0.0f;
    }
  std::fill(b.o, b.o + size_t(cr.rows) * cr.D, 0.0f);
}

// Keys [kp, kp + clen) of head kvh, converted to f32: K transposed to [D][kChunk] in b.kt, V as
// [kChunk][D] in b.v; the chunk's unused keys zero.
template <class V>
KVTIER_ATTN_PHASE void gather_chunk(const AttentionJob& job, uint32_t kvh, uint32_t kp, uint32_t clen,
                                    const ChunkedRange& cr, const AttentionBuffers& b) {
  constexpr uint32_t L = simd::lanes<V>, kChunk = chunk_keys<V>;
  const KVGeometry& geo = job.pool->geometry();
  const size_t esz = geo.elem_bytes();
  const uint32_t D = cr.D;
  float row[L];
  for (uint32_t j = 0; j < clen; ++j) {
    const uint32_t pos = kp + j;
    const PageId page = job.pages[pos / geo.page_tokens];
    const size_t off = size_t(pos % geo.page_tokens) * cr.tok_stride + size_t(kvh) * D * esz;
    load_kv_row(geo.dtype, job.pool->v(page, job.layer) + off, b.v + size_t(j) * D, D);
    const std::byte* ks = job.pool->k(page, job.layer) + off;
    if (geo.dtype == DType::kF32) {
      const float* kf = reinterpret_cast<const float*>(ks);
      for (uint32_t d = 0; d < D; ++d) b.kt[size_t(d) * kChunk + j] = kf[d];
    } else {
      for (uint32_t d0 = 0; d0 < D; d0 += L) {
        load_kv_row(geo.dtype, ks + d0 * esz, row, L);
        for (uint32_t d = 0; d < L; ++d) b.kt[size_t(d0 + d) * kChunk + j] = row[d];
      }
    }
  }
  for (uint32_t j = clen; j < kChunk; ++j) {
    for (uint32_t d = 0; d < D; ++d) b.kt[size_t(d) * kChunk + j] = 0.0f;
    std::fill(b.v + size_t(j) * D, b.v + size_t(j + 1) * D, 0.0f);
  }
}

// S = Q · K^T for the nr rows from q0 and the chunk's keys.
template <class V>
KVTIER_ATTN_PHASE void chunk_scores(V (&s)[row_group<V>][chunk_keys<V> / simd::lanes<V>], const float* q0, uint32_t nr,
                                    uint32_t D, const float* kt) {
  constexpr uint32_t L = simd::lanes<V>, kChunk = chunk_keys<V>, kChunkVecs = kChunk / L;
  for (uint32_t d = 0; d < D; ++d) {
    V k[kChunkVecs];
    for (uint32_t c = 0; c < kChunkVecs; ++c) k[c] = load<V>(kt + size_t(d) * kChunk + c * L);
    for (uint32_t i = 0; i < row_group<V>; ++i) {
      if (i >= nr) break;
      const V qv = splat<V>(q0[size_t(i) * D + d]);
      for (uint32_t c = 0; c < kChunkVecs; ++c) s[i][c] += qv * k[c];
    }
  }
}

// Online softmax over the chunk for rows [r0, r0 + nr): keys past a row's position masked, its
// probabilities to b.p, its running max and sum updated; alpha[i] rescales the row's O.
template <class V>
KVTIER_ATTN_PHASE void chunk_softmax(V (&s)[row_group<V>][chunk_keys<V> / simd::lanes<V>], uint32_t r0, uint32_t nr,
                                     uint32_t kp, uint32_t clen, const AttentionBuffers& b, float* alpha) {
  constexpr uint32_t L = simd::lanes<V>, kChunk = chunk_keys<V>, kChunkVecs = kChunk / L;
  const V iota = simd::iota<V>();
  for (uint32_t i = 0; i < nr; ++i) {
    const uint32_t r = r0 + i;
    if (b.pos[r] < kp) {
      alpha[i] = 1.0f;
      for (uint32_t c = 0; c < kChunkVecs; ++c) store(b.p + i * kChunk + c * L, V{});
      continue;
    }
    const float lim = float(std::min(b.pos[r] - kp, clen - 1));  // keys j <= lim are visible
    V mx = splat<V>(-INFINITY);
    for (uint32_t c = 0; c < kChunkVecs; ++c) {
      const V j = iota + float(c * L);
      s[i][c] = j <= lim ? s[i][c] : splat<V>(-INFINITY);
      mx = simd::vmax(mx, s[i][c]);
    }
    const float m_new = std::max(b.m[r], simd::hmax(mx));
    alpha[i] = std::exp(b.m[r] - m_new);
    V sum{};
    for (uint32_t c = 0; c < kChunkVecs; ++c) {
      const V p = simd::vexp(s[i][c] - m_new);
      sum += p;
      store(b.p + i * kChunk + c * L, p);
    }
    b.l[r] = b.l[r] * alpha[i] + simd::hsum(sum);
    b.m[r] = m_new;
  }
}

// O = O * alpha + P · V for rows [r0, r0 + nr) over the chunk's first jmax keys, W vectors of a
// head row at a time.
template <class V, uint32_t DV>
KVTIER_ATTN_PHASE void chunk_accumulate(uint32_t r0, uint32_t nr, uint32_t jmax, uint32_t D, const float* alpha,
                                        const AttentionBuffers& b) {
  constexpr uint32_t L = simd::lanes<V>, kChunk = chunk_keys<V>, kRowGroup = row_group<V>;
  constexpr uint32_t W = DV ? std::min(DV, kPvVecs) : 1;  // vectors of a row held in registers at once
  for (uint32_t v0 = 0; v0 < D / L; v0 += W) {
    V o[kRowGroup][W];
    for (uint32_t i = 0; i < nr; ++i)
      for (uint32_t w = 0; w < W; ++w) o[i][w] = load<V>(b.o + size_t(r0 + i) * D + (v0 + w) * L) * alpha[i];
    for (uint32_t j = 0; j < jmax; ++j) {
      V vv[W];
      for (uint32_t w = 0; w < W; ++w) vv[w] = load<V>(b.v + size_t(j) * D + (v0 + w) * L);
      for (uint32_t i = 0; i < kRowGroup; ++i) {
        if (i >= nr) break;
        const V pv = splat<V>(b.p[i * kChunk + j]);
        for (uint32_t w = 0; w < W; ++w) o[i][w] += pv * vv[w];
      }
    }
    for (uint32_t i = 0; i < nr; ++i)
      for (uint32_t w = 0; w < W; ++w) store(b.o + size_t(r0 + i) * D + (v0 + w) * L, o[i][w]);
  }
}

// Each row's O over its softmax sum, into the job's output.
KVTIER_ATTN_PHASE void store_outputs(const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                                     const ChunkedRange& cr, const AttentionBuffers& b) {
  for (uint32_t t = t_begin; t < t_end; ++t)
    for (uint32_t hh = 0; hh < cr.g; ++hh) {
      const uint32_t r = (t - t_begin) * cr.g + hh;
      float* dst = job.out + t * job.out_stride + size_t(kvh * cr.g + hh) * cr.D;
      const float inv = 1.0f / b.l[r];
      for (uint32_t d = 0; d < cr.D; ++d) dst[d] = b.o[size_t(r) * cr.D + d] * inv;
    }
}

// Query rows [t_begin, t_end) × g of KV head kvh over keys [0, pos0 + t_end), on vectors V (8 or 16
// lanes). DV: head_dim / lanes when known at compile time (registers hold a whole row), 0 otherwise.
// Keys go in chunks; each group of rows that share a chunk's K and V loads keeps its scores in
// registers through the online softmax.
template <class V, uint32_t DV>
void attend_chunked(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                    const AttentionBuffers& b) {
  constexpr uint32_t kChunk = chunk_keys<V>, kRowGroup = row_group<V>;
  const KVGeometry& geo = job.pool->geometry();
  const uint32_t D = DV ? DV * simd::lanes<V> : sh.head_dim;
  const uint32_t g = sh.num_heads / sh.num_kv_heads;
  const ChunkedRange cr{
      .D = D, .g = g, .rows = (t_end - t_begin) * g, .tok_stride = size_t(geo.num_kv_heads) * D * geo.elem_bytes()};
  load_queries(sh, job, kvh, t_begin, t_end, cr, b);
  const uint32_t n_keys = job.pos0 + t_end;
  for (uint32_t kp = 0; kp < n_keys; kp += kChunk) {
    const uint32_t clen = std::min(kChunk, n_keys - kp);
    gather_chunk<V>(job, kvh, kp, clen, cr, b);
    for (uint32_t r0 = 0; r0 < cr.rows; r0 += kRowGroup) {
      const uint32_t nr = std::min(kRowGroup, cr.rows - r0);
      if (b.pos[r0 + nr - 1] < kp) continue;  // every row of the group precedes the chunk
      V s[kRowGroup][kChunk / simd::lanes<V>] = {};
      chunk_scores<V>(s, b.q + size_t(r0) * D, nr, D, b.kt);
      float alpha[kRowGroup];
      chunk_softmax<V>(s, r0, nr, kp, clen, b, alpha);
      const uint32_t jmax = std::min(clen, b.pos[r0 + nr - 1] - kp + 1);
      chunk_accumulate<V, DV>(r0, nr, jmax, D, alpha, b);
    }
  }
  store_outputs(job, kvh, t_begin, t_end, cr, b);
}

#undef KVTIER_ATTN_PHASE

}  // namespace
}  // namespace kvtier::engine
