// The attention kernel (engine/attention_rows.h) on 16-lane vectors, for CPUs
// with AVX-512: two query rows of a chunk share each 512-bit register, one in
// each 256-bit half, so every row's arithmetic is the 8-lane kernel's to the
// bit (its products of eight dimensions at a time fused in the same order, its
// horizontal sums in the same tree, its online softmax the shared code) while
// each key and value row loaded serves both. The file is compiled for AVX2 like
// the rest of the engine; only the code inside the ISA region below may use
// AVX-512, and every header (under Clang, all but simd.h's forced-inline
// templates) is included before it. Called only after
// qdot::cpu_has(qdot::Isa::kAvx512) (engine/attention.cc).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/attention.h"
#include "engine/isa_region.h"
#include "engine/kv_rows.h"
#if !defined(__clang__)
#include "engine/simd.h"  // GCC: before the region like every header
#endif

KVTIER_ISA_REGION_BEGIN("avx512f,avx512bw,avx512vl,avx512dq")
// Clang includes simd.h here instead: it refuses a vector passed between a function of the region
// and one outside it, even a forced-inline one. simd.h holds only forced-inline templates.
#include "engine/simd.h"
#include "engine/attention_rows.h"

namespace kvtier::engine {
namespace {

// Per 128-bit lane [x0+x1, x2+x3, y0+y1, y2+y3]: _mm256_hadd_ps on each 256-bit half.
[[gnu::always_inline]] inline __m512 hadd_halves(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
}

// hsum8x8 on each half: a[k] holds key k's sums of two rows, row A in lanes 0-7 and row B in
// 8-15; the result holds A's eight scores, then B's.
[[gnu::always_inline]] inline __m512 hsum8x8_halves(const __m512* a) {
  const __m512 t0 = hadd_halves(a[0], a[1]), t1 = hadd_halves(a[2], a[3]);
  const __m512 t2 = hadd_halves(a[4], a[5]), t3 = hadd_halves(a[6], a[7]);
  const __m512 u0 = hadd_halves(t0, t1), u1 = hadd_halves(t2, t3);  // keys 0-3, 4-7: [A lo, A hi, B lo, B hi]
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  return _mm512_add_ps(_mm512_permutex2var_ps(u0, lo, u1), _mm512_permutex2var_ps(u0, hi, u1));
}

// Rows a and a + 1's scores for keys [0, visible) of the chunk (b.k), into p and p + kChunkKeys.
void pair_scores(const AttentionBuffers& b, uint32_t nv, uint32_t a, uint32_t visible, float* p) {
  constexpr uint32_t kMaxVecs = 16;  // head_dim 128 in registers; wider heads reload
  const uint32_t D = nv * kLanes8;
  const float* qa = b.q + size_t(a) * D;
  auto q_pair = [&](uint32_t v) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(qa + v * kLanes8)), _mm256_loadu_ps(qa + D + v * kLanes8), 1);
  };
  __m512 qs[kMaxVecs];
  for (uint32_t v = 0; v < std::min(nv, kMaxVecs); ++v) qs[v] = q_pair(v);
  for (uint32_t j = 0; j < visible; j += 8) {
    const uint32_t n = std::min(8u, visible - j);
    const float* keys = b.k + size_t(j) * D;
    __m512 acc[8];
    for (__m512& x : acc) x = _mm512_setzero_ps();
    auto products = [&]<uint32_t N>() {
      for (uint32_t v = 0; v < nv; ++v) {
        const __m512 qv = v < kMaxVecs ? qs[v] : q_pair(v);
#pragma GCC unroll 8
        for (uint32_t k = 0; k < N; ++k)
          acc[k] = _mm512_fmadd_ps(qv, _mm512_broadcast_f32x8(_mm256_loadu_ps(keys + size_t(k) * D + v * kLanes8)), acc[k]);
      }
    };
    if (n == 8) {
      products.template operator()<8>();  // a whole block without a test per product
    } else {
      products.template operator()<7>();  // the chunk's last keys: any of 1..7 (rows past n unused)
    }
    const __m512 sums = hsum8x8_halves(acc);
    const __mmask8 keep = __mmask8((1u << n) - 1);  // straight from the register (a copy through
    _mm256_mask_storeu_ps(p + j, keep, _mm512_castps512_ps256(sums));  // memory stalled on forwarding)
    _mm256_mask_storeu_ps(p + kChunkKeys + j, keep, _mm512_extractf32x8_ps(sums, 1));
  }
}

// Rows a .. a + 3's scores for keys [0, visible) into p + i · kChunkKeys (row a + i), for heads of
// at most 64 (both pairs' queries in registers): four keys at a time, each key row loaded once for
// the four rows; the sums of pair (a, a + 1) and pair (a + 2, a + 3) reduced together.
void quad_scores(const AttentionBuffers& b, uint32_t nv, uint32_t a, uint32_t visible, float* p) {
  constexpr uint32_t kMaxVecs = 8;
  const uint32_t D = nv * kLanes8;
  auto q_pair = [&](const float* q, uint32_t v) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(q + v * kLanes8)), _mm256_loadu_ps(q + D + v * kLanes8), 1);
  };
  __m512 q0[kMaxVecs], q1[kMaxVecs];
  for (uint32_t v = 0; v < nv; ++v) q0[v] = q_pair(b.q + size_t(a) * D, v), q1[v] = q_pair(b.q + size_t(a + 2) * D, v);
  for (uint32_t j = 0; j < visible; j += 4) {
    const uint32_t n = std::min(4u, visible - j);
    const float* keys = b.k + size_t(j) * D;
    __m512 acc[8];  // [k]: pair (a, a + 1) and key j + k; [4 + k]: pair (a + 2, a + 3)
    for (__m512& x : acc) x = _mm512_setzero_ps();
    for (uint32_t v = 0; v < nv; ++v)
      for (uint32_t k = 0; k < 4; ++k) {  // keys past n are the chunk's other rows: scored, not stored
        const __m512 kv = _mm512_broadcast_f32x8(_mm256_loadu_ps(keys + size_t(k) * D + v * kLanes8));
        acc[k] = _mm512_fmadd_ps(q0[v], kv, acc[k]);
        acc[4 + k] = _mm512_fmadd_ps(q1[v], kv, acc[4 + k]);
      }
    const __m512 sums = hsum8x8_halves(acc);  // rows a, a + 2, a + 1, a + 3: four keys each
    const __mmask8 keep = __mmask8((1u << n) - 1);
    _mm_mask_storeu_ps(p + j, keep, _mm512_extractf32x4_ps(sums, 0));
    _mm_mask_storeu_ps(p + 2 * kChunkKeys + j, keep, _mm512_extractf32x4_ps(sums, 1));
    _mm_mask_storeu_ps(p + kChunkKeys + j, keep, _mm512_extractf32x4_ps(sums, 2));
    _mm_mask_storeu_ps(p + 3 * kChunkKeys + j, keep, _mm512_extractf32x4_ps(sums, 3));
  }
}

// Rows o[0 .. R) (D apart), W vectors of 16 of each = o · alpha, then + p[i][k] · V[k] fused for
// k < n in order (row i's probabilities at p + i · kChunkKeys); each value vector loaded once for
// all R rows.
template <uint32_t R, uint32_t W>
[[gnu::always_inline]] inline void rows_values(const float* p, const float* values, uint32_t n, uint32_t D,
                                               const float* alpha, float* o) {
  __m512 x[R][W];
  for (uint32_t i = 0; i < R; ++i)
    for (uint32_t w = 0; w < W; ++w) x[i][w] = _mm512_mul_ps(_mm512_loadu_ps(o + size_t(i) * D + w * 16), _mm512_set1_ps(alpha[i]));
  for (uint32_t k = 0; k < n; ++k) {
    __m512 vv[W];
    for (uint32_t w = 0; w < W; ++w) vv[w] = _mm512_loadu_ps(values + size_t(k) * D + w * 16);
    for (uint32_t i = 0; i < R; ++i) {
      const __m512 pk = _mm512_set1_ps(p[i * kChunkKeys + k]);
      for (uint32_t w = 0; w < W; ++w) x[i][w] = _mm512_fmadd_ps(pk, vv[w], x[i][w]);
    }
  }
  for (uint32_t i = 0; i < R; ++i)
    for (uint32_t w = 0; w < W; ++w) _mm512_storeu_ps(o + size_t(i) * D + w * 16, x[i][w]);
}

// Over a whole head row, at most 4 vectors of each row at a time (4 rows × 4 in registers).
template <uint32_t R>
void rows_accumulate(const float* p, const float* values, uint32_t n, uint32_t D, const float* alpha, float* o) {
  uint32_t d = 0;
  for (; d + 64 <= D; d += 64) rows_values<R, 4>(p, values + d, n, D, alpha, o + d);
  switch ((D - d) / 16) {
    case 0: break;
    case 1: return rows_values<R, 1>(p, values + d, n, D, alpha, o + d);
    case 2: return rows_values<R, 2>(p, values + d, n, D, alpha, o + d);
    default: return rows_values<R, 3>(p, values + d, n, D, alpha, o + d);
  }
}

// Rows a .. a + R - 1 (R = 2 or 4) over the chunk, as chunk_row computes each: row i sees
// visible(a + i) keys, which grow with i (rows go by position). Keys past a row's own are scored
// for it too, then masked: its probability there is 0, and adding 0 · V leaves its o as it was.
template <uint32_t R, class Visible>
void rows_step(const AttentionBuffers& b, uint32_t nv, uint32_t a, Visible&& visible) {
  const uint32_t D = nv * kLanes8, last = visible(a + R - 1);
  if (R == 4 && nv <= 8) {
    quad_scores(b, nv, a, last, b.p);
  } else {
    for (uint32_t i = 0; i < R; i += 2) pair_scores(b, nv, a + i, last, b.p + i * kChunkKeys);
  }
  float alpha[R];
  for (uint32_t i = 0; i < R; ++i) {
    float* p = b.p + i * kChunkKeys;
    std::fill(p + visible(a + i), p + kChunkKeys, -INFINITY);
    alpha[i] = chunk_softmax(p, b.m[a + i], b.l[a + i]);
  }
  rows_accumulate<R>(b.p, b.v, last, D, alpha, b.o + size_t(a) * D);
}

void run_avx512(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                const AttentionBuffers& b) {
  const uint32_t nv = sh.head_dim / kLanes8;
  attend_rows(sh, job, kvh, t_begin, t_end, b, [&](uint32_t r, uint32_t left, auto&& visible) -> uint32_t {
    if (left >= 4) return rows_step<4>(b, nv, r, visible), 4;
    if (left >= 2) return rows_step<2>(b, nv, r, visible), 2;
    return 0;
  });
}

}  // namespace
}  // namespace kvtier::engine
KVTIER_ISA_REGION_END

namespace kvtier::engine {

// Outside the ISA region: a plain call into the kernel, made only where the CPU has AVX-512.
void attend_avx512(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                   AttentionScratch& s) {
  run_avx512(sh, job, kvh, t_begin, t_end, s.buffers());
}

}  // namespace kvtier::engine
