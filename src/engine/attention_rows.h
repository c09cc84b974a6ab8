// Internal: the attention kernel's arithmetic (engine/attention.h), shared by
// attention.cc (8-lane vectors, AVX2) and attention_avx512.cc (16 lanes inside
// an ISA region, two query rows per register), which must round every row
// alike. So the fused multiply-adds are written out (_mm256_fmadd_ps) and both
// files are compiled with -ffp-contract=off: no product is fused or left
// unfused by the compiler's choice. Everything here has internal linkage (an
// unnamed namespace), so no copy compiled for one ISA is ever shared with code
// compiled for another; the including file includes the headers below before
// any ISA region. Not a public header.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/attention.h"
#include "engine/kv_rows.h"
#include "engine/simd.h"

namespace kvtier::engine {
namespace {

using simd::vfloat8;
constexpr uint32_t kLanes8 = 8, kChunkVecs = kChunkKeys / kLanes8;

#define KVTIER_ATTN_INLINE [[gnu::always_inline]] inline

KVTIER_ATTN_INLINE vfloat8 fma8(vfloat8 a, vfloat8 b, vfloat8 c) {
  return vfloat8(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(c)));
}

// Lane i of the result: the sum of a[i]'s lanes, ((0+1)+(2+3))+((4+5)+(6+7)) (eight vectors).
KVTIER_ATTN_INLINE vfloat8 hsum8x8(const vfloat8* a) {
  const __m256 t0 = _mm256_hadd_ps(__m256(a[0]), __m256(a[1])), t1 = _mm256_hadd_ps(__m256(a[2]), __m256(a[3]));
  const __m256 t2 = _mm256_hadd_ps(__m256(a[4]), __m256(a[5])), t3 = _mm256_hadd_ps(__m256(a[6]), __m256(a[7]));
  // u0 = [a0..a3 over lanes 0-3 | a0..a3 over lanes 4-7], u1 the same for a4..a7.
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return vfloat8(_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
}

// scores[k] = q · K[k] for the n ≤ 8 key rows at `keys` (nv vectors each): lane i of key k's sum
// takes the products of dimensions i, i + 8, ... in order, fused; then hsum8x8. A key's score never
// depends on n.
template <uint32_t N>
KVTIER_ATTN_INLINE void score_n_keys(const float* q, const float* keys, uint32_t nv, vfloat8 (&acc)[8]) {
  for (uint32_t v = 0; v < nv; ++v) {
    const vfloat8 qv = simd::load<vfloat8>(q + v * kLanes8);
#pragma GCC unroll 8
    for (uint32_t k = 0; k < N; ++k) acc[k] = fma8(qv, simd::load<vfloat8>(keys + size_t(k) * nv * kLanes8 + v * kLanes8), acc[k]);
  }
}
KVTIER_ATTN_INLINE void score_keys(const float* q, const float* keys, uint32_t n, uint32_t nv, float* scores) {
  vfloat8 acc[8] = {};
  switch (n) {  // a whole block of 8 keys (the usual case) without a test per product
    case 8: score_n_keys<8>(q, keys, nv, acc); break;
    case 7: score_n_keys<7>(q, keys, nv, acc); break;
    case 6: score_n_keys<6>(q, keys, nv, acc); break;
    case 5: score_n_keys<5>(q, keys, nv, acc); break;
    case 4: score_n_keys<4>(q, keys, nv, acc); break;
    case 3: score_n_keys<3>(q, keys, nv, acc); break;
    case 2: score_n_keys<2>(q, keys, nv, acc); break;
    default: score_n_keys<1>(q, keys, nv, acc); break;
  }
  const vfloat8 sums = hsum8x8(acc);
  if (n == 8) return simd::store(scores, sums);
  float out[8];
  simd::store(out, sums);
  std::memcpy(scores, out, n * sizeof(float));
}

// e^x on each lane (simd::vexp's steps with their products fused as written: relative error ~2e-7
// on [-87, 88]; below -87, -inf included, 0).
KVTIER_ATTN_INLINE vfloat8 exp8(vfloat8 v) {
  const __m256 x = __m256(v), lo = _mm256_set1_ps(-87.0f), shifter = _mm256_set1_ps(12582912.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  __m256 t = _mm256_fmadd_ps(c, _mm256_set1_ps(1.44269504088896341f), shifter);  // round(x / ln 2) + shifter
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(shifter));
  t = _mm256_sub_ps(t, shifter);
  __m256 r = _mm256_fnmadd_ps(t, _mm256_set1_ps(0.693145751953125f), c);
  r = _mm256_fnmadd_ps(t, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  for (const float k : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  return vfloat8(_mm256_andnot_ps(under, _mm256_mul_ps(p, scale)));
}

// The lanes' sum, ((0+1)+(2+3))+((4+5)+(6+7)), and their max (exact in any order).
KVTIER_ATTN_INLINE float hsum8(vfloat8 x) {
  const __m256 h = _mm256_hadd_ps(__m256(x), __m256(x));
  const __m256 t = _mm256_hadd_ps(h, h);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}
KVTIER_ATTN_INLINE float hmax8(vfloat8 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(__m256(x)), _mm256_extractf128_ps(__m256(x), 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// The online softmax's step for one row over a chunk whose scores are at p (kChunkKeys, the keys
// it does not see -inf): the running max m and sum l updated, p turned into unnormalised
// probabilities (0 where masked). Returns alpha, which rescales the row's o to the new max.
KVTIER_ATTN_INLINE float chunk_softmax(float* p, float& m, float& l) {
  vfloat8 mx = simd::load<vfloat8>(p);
  for (uint32_t c = 1; c < kChunkVecs; ++c) mx = simd::vmax(mx, simd::load<vfloat8>(p + c * kLanes8));
  const float m_new = std::max(m, hmax8(mx));
  const float alpha = m_new == m ? 1.0f : std::exp(m - m_new);  // 0 on the first chunk (m = -inf)
  vfloat8 sum{};
  for (uint32_t c = 0; c < kChunkVecs; ++c) {
    const vfloat8 e = exp8(simd::load<vfloat8>(p + c * kLanes8) - simd::splat<vfloat8>(m_new));
    sum += e;
    simd::store(p + c * kLanes8, e);
  }
  l = l * alpha + hsum8(sum);
  m = m_new;
  return alpha;
}

// o[0 .. W vectors) = o · alpha, then + p[k] · V[k] fused, k = 0 .. n-1 in order (V rows D apart).
template <uint32_t W>
KVTIER_ATTN_INLINE void accumulate_values(const float* p, const float* values, uint32_t n, uint32_t D, float alpha,
                                          float* o) {
  vfloat8 acc[W];
  for (uint32_t w = 0; w < W; ++w) acc[w] = simd::load<vfloat8>(o + w * kLanes8) * simd::splat<vfloat8>(alpha);
  for (uint32_t k = 0; k < n; ++k) {
    const vfloat8 pk = simd::splat<vfloat8>(p[k]);
    for (uint32_t w = 0; w < W; ++w) acc[w] = fma8(pk, simd::load<vfloat8>(values + size_t(k) * D + w * kLanes8), acc[w]);
  }
  for (uint32_t w = 0; w < W; ++w) simd::store(o + w * kLanes8, acc[w]);
}

// The same over a whole head row, 8 vectors (registers) at a time.
KVTIER_ATTN_INLINE void accumulate_row(const float* p, const float* values, uint32_t n, uint32_t nv, float alpha,
                                       float* o) {
  const uint32_t D = nv * kLanes8;
  uint32_t v = 0;
  for (; v + 8 <= nv; v += 8) accumulate_values<8>(p, values + v * kLanes8, n, D, alpha, o + v * kLanes8);
  const float* vs = values + v * kLanes8;
  float* os = o + v * kLanes8;
  switch (nv - v) {
    case 0: break;
    case 1: return accumulate_values<1>(p, vs, n, D, alpha, os);
    case 2: return accumulate_values<2>(p, vs, n, D, alpha, os);
    case 3: return accumulate_values<3>(p, vs, n, D, alpha, os);
    case 4: return accumulate_values<4>(p, vs, n, D, alpha, os);
    case 5: return accumulate_values<5>(p, vs, n, D, alpha, os);
    case 6: return accumulate_values<6>(p, vs, n, D, alpha, os);
    default: return accumulate_values<7>(p, vs, n, D, alpha, os);
  }
}

// One row's whole step over a chunk whose first `visible` keys it attends (K and V rows at k and v,
// nv vectors each): scores, softmax, o rescaled and given the chunk's P · V. This is every row's
// arithmetic; the 16-lane kernel computes two rows at once with the same.
KVTIER_ATTN_INLINE void chunk_row(const float* q, const float* k, const float* v, uint32_t visible, uint32_t nv,
                                  float& m, float& l, float* o, float* p) {
  const uint32_t D = nv * kLanes8;
  for (uint32_t j = 0; j < visible; j += 8) score_keys(q, k + size_t(j) * D, std::min(8u, visible - j), nv, p + j);
  std::fill(p + visible, p + kChunkKeys, -INFINITY);
  const float alpha = chunk_softmax(p, m, l);
  accumulate_row(p, v, visible, nv, alpha, o);
}

// Rows [j0, j0 + n) of K or V (`part`) of head kvh, widened into `dst`. The rows are strided (one
// head of each token) and pages are apart, which the hardware prefetcher follows poorly, so the
// row kPrefetchRows ahead (below `limit`) is requested as each row is read.
inline void read_rows(const AttentionJob& job, const std::byte* (BlockPool::*part)(PageId, LayerIdx) const,
                      uint32_t kvh, uint32_t D, uint32_t j0, uint32_t n, uint32_t limit, float* dst) {
  constexpr uint32_t kPrefetchRows = 8;
  const KVGeometry& geo = job.pool->geometry();
  const size_t esz = geo.elem_bytes(), tok_stride = size_t(geo.num_kv_heads) * D * esz, row_bytes = size_t(D) * esz;
  auto row_at = [&](uint32_t pos) {
    const std::byte* page = (job.pool->*part)(job.pages[pos / geo.page_tokens], job.layer);
    return page + size_t(pos % geo.page_tokens) * tok_stride + size_t(kvh) * row_bytes;
  };
  for (uint32_t k = 0; k < n; ++k) {
    if (j0 + k + kPrefetchRows < limit) {
      const std::byte* ahead = row_at(j0 + k + kPrefetchRows);
      for (size_t line = 0; line < row_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
    }
    load_kv_row(geo.dtype, row_at(j0 + k), dst + size_t(k) * D, D);
  }
}

// Rows r = (t - t_begin) * g + h of KV head kvh (h: the query head within its group) over keys in
// chunks: each chunk widened once, then every row that reaches it takes its step: `wide(r, n,
// visible)` takes rows r.. (n of them left; visible(i) the keys row i sees) several at a time and
// returns how many it took, 0 to leave row r to chunk_row.
template <class Wide>
KVTIER_ATTN_INLINE void attend_rows(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin,
                                    uint32_t t_end, const AttentionBuffers& b, Wide&& wide) {
  const uint32_t D = sh.head_dim, nv = D / kLanes8, g = sh.num_heads / sh.num_kv_heads;
  const uint32_t rows = (t_end - t_begin) * g, n_keys = job.pos0 + t_end;
  for (uint32_t r = 0; r < rows; ++r) {  // queries pre-scaled; max -inf, sum 0, O zero
    const float* src = job.q + size_t(t_begin + r / g) * job.q_stride + size_t(kvh * g + r % g) * D;
    for (uint32_t d = 0; d < D; ++d) b.q[size_t(r) * D + d] = src[d] * sh.scale;
    b.m[r] = -INFINITY;
    b.l[r] = 0.0f;
  }
  std::fill(b.o, b.o + size_t(rows) * D, 0.0f);
  for (uint32_t kp = 0; kp < n_keys; kp += kChunkKeys) {
    const uint32_t clen = std::min(kChunkKeys, n_keys - kp);
    read_rows(job, &BlockPool::k, kvh, D, kp, clen, n_keys, b.k);
    read_rows(job, &BlockPool::v, kvh, D, kp, clen, n_keys, b.v);
    auto visible = [&](uint32_t r) { return std::min(clen, job.pos0 + t_begin + r / g - kp + 1); };
    // Rows of tokens before the chunk attend none of it.
    uint32_t r = kp > job.pos0 + t_begin ? (kp - job.pos0 - t_begin) * g : 0;
    while (r < rows) {
      if (const uint32_t took = wide(r, rows - r, visible)) {
        r += took;
        continue;
      }
      chunk_row(b.q + size_t(r) * D, b.k, b.v, visible(r), nv, b.m[r], b.l[r], b.o + size_t(r) * D, b.p);
      ++r;
    }
  }
  for (uint32_t r = 0; r < rows; ++r) {
    float* dst = job.out + size_t(t_begin + r / g) * job.out_stride + size_t(kvh * g + r % g) * D;
    const float inv = 1.0f / b.l[r];
    for (uint32_t d = 0; d < D; ++d) dst[d] = b.o[size_t(r) * D + d] * inv;
  }
}

#undef KVTIER_ATTN_INLINE

}  // namespace
}  // namespace kvtier::engine
