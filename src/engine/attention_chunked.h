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
inline constexpr uint32_t kPvVecs = 4;                      // head-row vectors of O held at once
static_assert(chunk_keys<simd::vfloat16> == kMaxChunkKeys && row_group<simd::vfloat16> == kMaxRowGroup);

namespace {

using simd::load;
using simd::splat;
using simd::store;

// Query rows [t_begin, t_end) × g of KV head kvh over keys [0, pos0 + t_end), on vectors V (8 or 16
// lanes). DV: head_dim / lanes when known at compile time (registers hold a whole row), 0 otherwise.
template <class V, uint32_t DV>
void attend_chunked(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                    const AttentionBuffers& b) {
  float *qb = b.q, *ob = b.o, *mb = b.m, *lb = b.l, *kt = b.kt, *vc = b.v, *pb = b.p;
  uint32_t* posb = b.pos;
  constexpr uint32_t L = simd::lanes<V>, kChunk = chunk_keys<V>, kRowGroup = row_group<V>;
  constexpr uint32_t kChunkVecs = kChunk / L;
  const uint32_t D = DV ? DV * L : sh.head_dim;
  const uint32_t nv = D / L;
  const uint32_t g = sh.num_heads / sh.num_kv_heads;
  const uint32_t rows = (t_end - t_begin) * g;
  const KVGeometry& geo = job.pool->geometry();
  const uint32_t P = geo.page_tokens;
  const size_t esz = geo.elem_bytes();
  const size_t tok_stride = size_t(geo.num_kv_heads) * D * esz;  // bytes between tokens in a K or V block

  // Rows are ordered (token, head in group): positions never decrease with the row index.
  for (uint32_t t = t_begin; t < t_end; ++t)
    for (uint32_t hh = 0; hh < g; ++hh) {
      const uint32_t r = (t - t_begin) * g + hh;
      const float* src = job.q + t * job.q_stride + size_t(kvh * g + hh) * D;
      for (uint32_t d = 0; d < D; ++d) qb[size_t(r) * D + d] = src[d] * sh.scale;
      posb[r] = job.pos0 + t;
      mb[r] = -INFINITY;
      lb[r] = 0.0f;
    }
  std::fill(ob, ob + size_t(rows) * D, 0.0f);
  const uint32_t n_keys = job.pos0 + t_end;
  const V iota = simd::iota<V>();

  float row[L];
  for (uint32_t kp = 0; kp < n_keys; kp += kChunk) {
    const uint32_t clen = std::min(kChunk, n_keys - kp);
    // Gather and convert K (transposed to [D][kChunk]) and V ([kChunk][D]).
    for (uint32_t j = 0; j < clen; ++j) {
      const uint32_t pos = kp + j;
      const PageId page = job.pages[pos / P];
      const size_t off = size_t(pos % P) * tok_stride + size_t(kvh) * D * esz;
      load_kv_row(geo.dtype, job.pool->v(page, job.layer) + off, vc + size_t(j) * D, D);
      const std::byte* ks = job.pool->k(page, job.layer) + off;
      if (geo.dtype == DType::kF32) {
        const float* kf = reinterpret_cast<const float*>(ks);
        for (uint32_t d = 0; d < D; ++d) kt[size_t(d) * kChunk + j] = kf[d];
      } else {
        for (uint32_t d0 = 0; d0 < D; d0 += L) {
          load_kv_row(geo.dtype, ks + d0 * esz, row, L);
          for (uint32_t d = 0; d < L; ++d) kt[size_t(d0 + d) * kChunk + j] = row[d];
        }
      }
    }
    for (uint32_t j = clen; j < kChunk; ++j) {
      for (uint32_t d = 0; d < D; ++d) kt[size_t(d) * kChunk + j] = 0.0f;
      std::fill(vc + size_t(j) * D, vc + size_t(j + 1) * D, 0.0f);
    }

    for (uint32_t r0 = 0; r0 < rows; r0 += kRowGroup) {
      const uint32_t nr = std::min(kRowGroup, rows - r0);
      if (posb[r0 + nr - 1] < kp) continue;  // every row of the group precedes the chunk
      // S = Q · K^T for nr rows and kChunk keys.
      V s[kRowGroup][kChunkVecs] = {};
      const float* q0 = qb + size_t(r0) * D;
      for (uint32_t d = 0; d < D; ++d) {
        V k[kChunkVecs];
        for (uint32_t c = 0; c < kChunkVecs; ++c) k[c] = load<V>(kt + size_t(d) * kChunk + c * L);
        for (uint32_t i = 0; i < kRowGroup; ++i) {
          if (i >= nr) break;
          const V qv = splat<V>(q0[size_t(i) * D + d]);
          for (uint32_t c = 0; c < kChunkVecs; ++c) s[i][c] += qv * k[c];
        }
      }
      // Online softmax update per row.
      float alpha[kRowGroup];
      for (uint32_t i = 0; i < nr; ++i) {
        const uint32_t r = r0 + i;
        if (posb[r] < kp) {
          alpha[i] = 1.0f;
          for (uint32_t c = 0; c < kChunkVecs; ++c) store(pb + i * kChunk + c * L, V{});
          continue;
        }
        const float lim = float(std::min(posb[r] - kp, clen - 1));  // keys j <= lim are visible
        V mx = splat<V>(-INFINITY);
        for (uint32_t c = 0; c < kChunkVecs; ++c) {
          const V j = iota + float(c * L);
          s[i][c] = j <= lim ? s[i][c] : splat<V>(-INFINITY);
          mx = simd::vmax(mx, s[i][c]);
        }
        const float m_new = std::max(mb[r], simd::hmax(mx));
        alpha[i] = std::exp(mb[r] - m_new);
        V sum{};
        for (uint32_t c = 0; c < kChunkVecs; ++c) {
          const V p = simd::vexp(s[i][c] - m_new);
          sum += p;
          store(pb + i * kChunk + c * L, p);
        }
        lb[r] = lb[r] * alpha[i] + simd::hsum(sum);
        mb[r] = m_new;
      }
      // O = O * alpha + P · V.
      const uint32_t jmax = std::min(clen, posb[r0 + nr - 1] - kp + 1);
      constexpr uint32_t W = DV ? std::min(DV, kPvVecs) : 1;  // vectors of a row held in registers at once
      for (uint32_t v0 = 0; v0 < nv; v0 += W) {
        V o[kRowGroup][W];
        for (uint32_t i = 0; i < nr; ++i)
          for (uint32_t w = 0; w < W; ++w) o[i][w] = load<V>(ob + size_t(r0 + i) * D + (v0 + w) * L) * alpha[i];
        for (uint32_t j = 0; j < jmax; ++j) {
          V vv[W];
          for (uint32_t w = 0; w < W; ++w) vv[w] = load<V>(vc + size_t(j) * D + (v0 + w) * L);
          for (uint32_t i = 0; i < kRowGroup; ++i) {
            if (i >= nr) break;
            const V pv = splat<V>(pb[i * kChunk + j]);
            for (uint32_t w = 0; w < W; ++w) o[i][w] += pv * vv[w];
          }
        }
        for (uint32_t i = 0; i < nr; ++i)
          for (uint32_t w = 0; w < W; ++w) store(ob + size_t(r0 + i) * D + (v0 + w) * L, o[i][w]);
      }
    }
  }
  for (uint32_t t = t_begin; t < t_end; ++t)
    for (uint32_t hh = 0; hh < g; ++hh) {
      const uint32_t r = (t - t_begin) * g + hh;
      float* dst = job.out + t * job.out_stride + size_t(kvh * g + hh) * D;
      const float inv = 1.0f / lb[r];
      for (uint32_t d = 0; d < D; ++d) dst[d] = ob[size_t(r) * D + d] * inv;
    }
}

}  // namespace
}  // namespace kvtier::engine
