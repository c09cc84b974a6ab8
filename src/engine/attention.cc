#include "engine/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include "engine/half.h"
#include "engine/kv_rows.h"
#include "engine/simd.h"

namespace kvtier::engine {

using simd::load;
using simd::splat;
using simd::store;
using simd::vfloat;

namespace {

// Register tiles: the scores (kRowGroup rows × kChunk keys), a slice of K and the P·V tile
// (kRowGroup rows × kPvVecs vectors of a head row) stay in registers: 32 of 16 lanes on
// AVX-512, 16 of 8 on AVX2.
constexpr uint32_t kChunk = 4 * simd::kLanes;       // keys per chunk
constexpr uint32_t kRowGroup = simd::kLanes / 4;    // query rows that share each K/V load: 4, or 2 on AVX2
constexpr uint32_t kPvVecs = 4;                     // head-row vectors of O held at once
constexpr uint32_t kChunkVecs = kChunk / simd::kLanes;
// Query rows per task. A task converts every key and value it reads from the
// page dtype to f32 once, for all its rows: with 64 rows that conversion was
// the larger half of attention over a long cached context; 256 rows (q and
// o blocks of 64 KiB at head_dim 64, still in L2) made a 64-token suffix
// over 16384 cached tokens about 1.5x faster (docs/PERF.md, bench ttft).
constexpr uint32_t kTargetRows = 256;

// DV: head_dim / kLanes when known at compile time (registers hold a whole row), 0 otherwise.
template <uint32_t DV>
void attend_impl(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                 float* qb, float* ob, float* mb, float* lb, uint32_t* posb, float* kt, float* vc, float* pb) {
  const uint32_t D = DV ? DV * simd::kLanes : sh.head_dim;
  const uint32_t nv = D / simd::kLanes;
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
  const vfloat iota = simd::iota();

  float row[simd::kLanes];
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
        for (uint32_t d0 = 0; d0 < D; d0 += simd::kLanes) {
          load_kv_row(geo.dtype, ks + d0 * esz, row, simd::kLanes);
          for (uint32_t d = 0; d < simd::kLanes; ++d) kt[size_t(d0 + d) * kChunk + j] = row[d];
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
      vfloat s[kRowGroup][kChunkVecs] = {};
      const float* q0 = qb + size_t(r0) * D;
      for (uint32_t d = 0; d < D; ++d) {
        vfloat k[kChunkVecs];
        for (uint32_t c = 0; c < kChunkVecs; ++c) k[c] = load(kt + size_t(d) * kChunk + c * simd::kLanes);
        for (uint32_t i = 0; i < kRowGroup; ++i) {
          if (i >= nr) break;
          const vfloat qv = splat(q0[size_t(i) * D + d]);
          for (uint32_t c = 0; c < kChunkVecs; ++c) s[i][c] += qv * k[c];
        }
      }
      // Online softmax update per row.
      float alpha[kRowGroup];
      for (uint32_t i = 0; i < nr; ++i) {
        const uint32_t r = r0 + i;
        if (posb[r] < kp) {
          alpha[i] = 1.0f;
          for (uint32_t c = 0; c < kChunkVecs; ++c) store(pb + i * kChunk + c * simd::kLanes, vfloat{});
          continue;
        }
        const float lim = float(std::min(posb[r] - kp, clen - 1));  // keys j <= lim are visible
        vfloat mx = splat(-INFINITY);
        for (uint32_t c = 0; c < kChunkVecs; ++c) {
          const vfloat j = iota + float(c * simd::kLanes);
          s[i][c] = j <= lim ? s[i][c] : splat(-INFINITY);
          mx = simd::vmax(mx, s[i][c]);
        }
        const float m_new = std::max(mb[r], simd::hmax(mx));
        alpha[i] = std::exp(mb[r] - m_new);
        vfloat sum{};
        for (uint32_t c = 0; c < kChunkVecs; ++c) {
          const vfloat p = simd::vexp(s[i][c] - m_new);
          sum += p;
          store(pb + i * kChunk + c * simd::kLanes, p);
        }
        lb[r] = lb[r] * alpha[i] + simd::hsum(sum);
        mb[r] = m_new;
      }
      // O = O * alpha + P · V.
      const uint32_t jmax = std::min(clen, posb[r0 + nr - 1] - kp + 1);
      constexpr uint32_t W = DV ? std::min(DV, kPvVecs) : 1;  // vectors of a row held in registers at once
      for (uint32_t v0 = 0; v0 < nv; v0 += W) {
        vfloat o[kRowGroup][W];
        for (uint32_t i = 0; i < nr; ++i)
          for (uint32_t w = 0; w < W; ++w) o[i][w] = load(ob + size_t(r0 + i) * D + (v0 + w) * simd::kLanes) * alpha[i];
        for (uint32_t j = 0; j < jmax; ++j) {
          vfloat vv[W];
          for (uint32_t w = 0; w < W; ++w) vv[w] = load(vc + size_t(j) * D + (v0 + w) * simd::kLanes);
          for (uint32_t i = 0; i < kRowGroup; ++i) {
            if (i >= nr) break;
            const vfloat pv = splat(pb[i * kChunk + j]);
            for (uint32_t w = 0; w < W; ++w) o[i][w] += pv * vv[w];
          }
        }
        for (uint32_t i = 0; i < nr; ++i)
          for (uint32_t w = 0; w < W; ++w) store(ob + size_t(r0 + i) * D + (v0 + w) * simd::kLanes, o[i][w]);
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

// Lane i of the result: the sum of a[i]'s lanes (eight 8-lane vectors, AVX2).
inline vfloat hsum8x8(const vfloat* a) {
  const __m256 t0 = _mm256_hadd_ps(__m256(a[0]), __m256(a[1])), t1 = _mm256_hadd_ps(__m256(a[2]), __m256(a[3]));
  const __m256 t2 = _mm256_hadd_ps(__m256(a[4]), __m256(a[5])), t3 = _mm256_hadd_ps(__m256(a[6]), __m256(a[7]));
  // u0 = [a0..a3 over lanes 0-3 | a0..a3 over lanes 4-7], u1 the same for a4..a7.
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return vfloat(_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
}
static_assert(simd::kLanes == 8, "attention.cc is built for AVX2 (engine/CMakeLists.txt)");

// Decode reads keys and values kDecodeBlock rows at a time, widened to f32 once into a block that
// every query row of the group then reuses from L1.
constexpr uint32_t kDecodeBlock = kChunk;

// scores[k] = scale · q · K[k] for the n ≤ 8 key rows at `keys` (D floats each): eight keys'
// products in eight registers, reduced together. A key's score never depends on n.
inline void score_keys(const float* q, const float* keys, uint32_t n, uint32_t nv, float scale, float* scores) {
  vfloat acc[8] = {};
  for (uint32_t v = 0; v < nv; ++v) {
    const vfloat qv = load(q + v * simd::kLanes);
#pragma GCC unroll 8
    for (uint32_t k = 0; k < 8; ++k)
      if (k < n) acc[k] += qv * load(keys + size_t(k) * nv * simd::kLanes + v * simd::kLanes);
  }
  float out[8];
  store(out, hsum8x8(acc) * splat(scale));
  std::memcpy(scores, out, n * sizeof(float));
}

// o[0 .. W vectors) += Σ_k p[k] · V[k] over n value rows at `values` (D floats each).
template <uint32_t W>
inline void accumulate_values(const float* p, const float* values, uint32_t n, uint32_t D, float* o) {
  vfloat acc[W];
  for (uint32_t w = 0; w < W; ++w) acc[w] = load(o + w * simd::kLanes);
  for (uint32_t k = 0; k < n; ++k) {
    const vfloat pk = splat(p[k]);
    for (uint32_t w = 0; w < W; ++w) acc[w] += pk * load(values + size_t(k) * D + w * simd::kLanes);
  }
  for (uint32_t w = 0; w < W; ++w) store(o + w * simd::kLanes, acc[w]);
}

// The same over a whole head row, 8 vectors (registers) at a time.
inline void accumulate_row(const float* p, const float* values, uint32_t n, uint32_t nv, float* o) {
  const uint32_t D = nv * simd::kLanes;
  uint32_t v = 0;
  for (; v + 8 <= nv; v += 8) accumulate_values<8>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
  switch (nv - v) {
    case 0: break;
    case 1: return accumulate_values<1>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
    case 2: return accumulate_values<2>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
    case 3: return accumulate_values<3>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
    case 4: return accumulate_values<4>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
    case 5: return accumulate_values<5>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
    case 6: return accumulate_values<6>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
    default: return accumulate_values<7>(p, values + v * simd::kLanes, n, D, o + v * simd::kLanes);
  }
}

// One token (job.decode): the g query rows of KV head kvh against keys [0, pos], with an exact
// two-pass softmax: S = Q · Kᵀ over blocks of keys, P = exp(S - max) with 1 / Σ P kept, O = P · V
// over blocks of values. `scores` grows to g * (pos + 2) floats, `block` holds kDecodeBlock rows of
// D, `o` g rows of D.
void attend_decode(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t, std::vector<float>& scores,
                   float* block, float* o) {
  const uint32_t D = sh.head_dim, nv = D / simd::kLanes;
  const uint32_t g = sh.num_heads / sh.num_kv_heads, n_keys = job.pos0 + t + 1;
  const KVGeometry& geo = job.pool->geometry();
  const size_t esz = geo.elem_bytes(), tok_stride = size_t(geo.num_kv_heads) * D * esz;
  const size_t row_bytes = size_t(D) * esz;
  auto row_at = [&](const std::byte* (BlockPool::*part)(PageId, LayerIdx) const, uint32_t pos) {
    const std::byte* page = (job.pool->*part)(job.pages[pos / geo.page_tokens], job.layer);
    return page + size_t(pos % geo.page_tokens) * tok_stride + size_t(kvh) * row_bytes;
  };
  // Rows [j0, j0 + n) of K or V for head kvh, widened into `block`. The rows are strided (one
  // head of each token) and pages are apart, which the hardware prefetcher follows poorly, so
  // the row kPrefetchRows ahead is requested as each row is read.
  constexpr uint32_t kPrefetchRows = 8;
  auto read_block = [&](const std::byte* (BlockPool::*part)(PageId, LayerIdx) const, uint32_t j0, uint32_t n) {
    for (uint32_t k = 0; k < n; ++k) {
      if (j0 + k + kPrefetchRows < n_keys) {
        const std::byte* ahead = row_at(part, j0 + k + kPrefetchRows);
        for (size_t line = 0; line < row_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      }
      load_kv_row(geo.dtype, row_at(part, j0 + k), block + size_t(k) * D, D);
    }
  };
  const float* q = job.q + size_t(t) * job.q_stride + size_t(kvh) * g * D;
  scores.resize(size_t(g) * n_keys + g);
  float* inv = scores.data() + size_t(g) * n_keys;  // 1 / Σ P per query row
  for (uint32_t j0 = 0; j0 < n_keys; j0 += kDecodeBlock) {  // S = Q · Kᵀ
    const uint32_t n = std::min(kDecodeBlock, n_keys - j0);
    read_block(&BlockPool::k, j0, n);
    for (uint32_t h = 0; h < g; ++h)
      for (uint32_t k = 0; k < n; k += 8)
        score_keys(q + size_t(h) * D, block + size_t(k) * D, std::min(8u, n - k), nv, sh.scale,
                   scores.data() + size_t(h) * n_keys + j0 + k);
  }
  for (uint32_t h = 0; h < g; ++h) {  // P = softmax(S), unnormalised; 1 / Σ P kept
    float* s = scores.data() + size_t(h) * n_keys;
    const float mx = *std::max_element(s, s + n_keys);
    float sum = 0.0f;
    uint32_t j = 0;
    for (; j + simd::kLanes <= n_keys; j += simd::kLanes) {
      const vfloat p = simd::vexp(load(s + j) - splat(mx));
      store(s + j, p);
      sum += simd::hsum(p);
    }
    for (; j < n_keys; ++j) sum += (s[j] = std::exp(s[j] - mx));
    inv[h] = 1.0f / sum;
  }
  std::fill(o, o + size_t(g) * D, 0.0f);
  for (uint32_t j0 = 0; j0 < n_keys; j0 += kDecodeBlock) {  // O = P · V
    const uint32_t n = std::min(kDecodeBlock, n_keys - j0);
    read_block(&BlockPool::v, j0, n);
    for (uint32_t h = 0; h < g; ++h) accumulate_row(scores.data() + size_t(h) * n_keys + j0, block, n, nv, o + size_t(h) * D);
  }
  for (uint32_t h = 0; h < g; ++h) {
    float* dst = job.out + size_t(t) * job.out_stride + size_t(kvh * g + h) * D;
    for (uint32_t d = 0; d < D; ++d) dst[d] = o[size_t(h) * D + d] * inv[h];
  }
}

template <uint32_t DV>
void attend_dispatch(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                     float* q, float* o, float* m, float* l, uint32_t* pos, float* kt, float* v,
                     float* p, std::vector<float>& scores) {
  if (!job.decode) return attend_impl<DV>(sh, job, kvh, t_begin, t_end, q, o, m, l, pos, kt, v, p);
  for (uint32_t t = t_begin; t < t_end; ++t) attend_decode(sh, job, kvh, t, scores, kt, o);
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& sh, uint32_t max_rows)
    : q_(size_t(max_rows) * sh.head_dim),
      o_(size_t(max_rows) * sh.head_dim),
      m_(max_rows),
      l_(max_rows),
      kt_(size_t(sh.head_dim) * kChunk),
      v_(size_t(sh.head_dim) * kChunk),
      p_(kRowGroup * kChunk),
      pos_(max_rows) {}

uint32_t attention_block_tokens(const AttentionShape& sh) {
  const uint32_t g = sh.num_heads / sh.num_kv_heads;
  return std::max<uint32_t>(1, kTargetRows / g);
}

void attend(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
            AttentionScratch& s) {
  auto run = [&](auto dv) {
    attend_dispatch<decltype(dv)::value>(sh, job, kvh, t_begin, t_end, s.q_.data(), s.o_.data(), s.m_.data(),
                                         s.l_.data(), s.pos_.data(), s.kt_.data(), s.v_.data(), s.p_.data(), s.scores_);
  };
  switch (sh.head_dim / simd::kLanes) {
    case 1: return run(std::integral_constant<uint32_t, 1>());
    case 2: return run(std::integral_constant<uint32_t, 2>());
    case 4: return run(std::integral_constant<uint32_t, 4>());
    case 8: return run(std::integral_constant<uint32_t, 8>());
    default: return run(std::integral_constant<uint32_t, 0>());
  }
}

}  // namespace kvtier::engine
