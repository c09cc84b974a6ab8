#include "engine/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/attention_chunked.h"
#include "engine/kv_rows.h"
#include "engine/qdot.h"
#include "engine/simd.h"

namespace kvtier::engine {

using simd::vfloat;

namespace {

// Query rows per task. A task converts every key and value it reads from the
// page dtype to f32 once, for all its rows: with 64 rows that conversion was
// the larger half of attention over a long cached context; 256 rows (q and
// o blocks of 64 KiB at head_dim 64, still in L2) made a 64-token suffix
// over 16384 cached tokens about 1.5x faster (docs/PERF.md, bench ttft).
constexpr uint32_t kTargetRows = 256;

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
constexpr uint32_t kDecodeBlock = chunk_keys<vfloat>;
// Query rows of a decode pass (several tokens' rows when a prefill recomputes decoded tokens:
// engine.h, PrefillOptions::decode_from).
constexpr uint32_t kDecodePassRows = 32;

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

// Tokens [t_begin, t_end) as decode steps (job.decode): each token's g query rows of KV head kvh
// against keys [0, its position], with an exact two-pass softmax: S = Q · Kᵀ over blocks of keys,
// P = exp(S - max) with 1 / Σ P kept, O = P · V over blocks of values. Every block of keys and
// values is widened once for all the tokens' rows, and each row's arithmetic is the one a single
// token's call does (a key's score never depends on the rows beside it), so a token's result is
// the same bit for bit whichever tokens share the call. `scores` grows to rows * (keys + 1) floats,
// `block` holds kDecodeBlock rows of D, `o` the rows' D each.
void attend_decode(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                   std::vector<float>& scores, float* block, float* o) {
  const uint32_t D = sh.head_dim, nv = D / simd::kLanes;
  const uint32_t g = sh.num_heads / sh.num_kv_heads, rows = (t_end - t_begin) * g, n_max = job.pos0 + t_end;
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
      if (j0 + k + kPrefetchRows < n_max) {
        const std::byte* ahead = row_at(part, j0 + k + kPrefetchRows);
        for (size_t line = 0; line < row_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      }
      load_kv_row(geo.dtype, row_at(part, j0 + k), block + size_t(k) * D, D);
    }
  };
  // Row r = (t - t_begin) * g + h: its query, its scores (n_max apart) and its key count.
  auto keys_of = [&](uint32_t r) { return job.pos0 + t_begin + r / g + 1; };
  auto query_of = [&](uint32_t r) {
    return job.q + size_t(t_begin + r / g) * job.q_stride + size_t(kvh * g + r % g) * D;
  };
  scores.resize(size_t(rows) * n_max + rows);
  float* inv = scores.data() + size_t(rows) * n_max;  // 1 / Σ P per row
  for (uint32_t j0 = 0; j0 < n_max; j0 += kDecodeBlock) {  // S = Q · Kᵀ
    const uint32_t n = std::min(kDecodeBlock, n_max - j0);
    read_block(&BlockPool::k, j0, n);
    for (uint32_t r = 0; r < rows; ++r) {
      if (keys_of(r) <= j0) continue;
      const uint32_t nr = std::min(n, keys_of(r) - j0);
      for (uint32_t k = 0; k < nr; k += 8)
        score_keys(query_of(r), block + size_t(k) * D, std::min(8u, nr - k), nv, sh.scale,
                   scores.data() + size_t(r) * n_max + j0 + k);
    }
  }
  for (uint32_t r = 0; r < rows; ++r) {  // P = softmax(S), unnormalised; 1 / Σ P kept
    float* s = scores.data() + size_t(r) * n_max;
    const uint32_t n_keys = keys_of(r);
    const float mx = *std::max_element(s, s + n_keys);
    float sum = 0.0f;
    uint32_t j = 0;
    for (; j + simd::kLanes <= n_keys; j += simd::kLanes) {
      const vfloat p = simd::vexp(load(s + j) - splat(mx));
      store(s + j, p);
      sum += simd::hsum(p);
    }
    for (; j < n_keys; ++j) sum += (s[j] = std::exp(s[j] - mx));
    inv[r] = 1.0f / sum;
  }
  std::fill(o, o + size_t(rows) * D, 0.0f);
  for (uint32_t j0 = 0; j0 < n_max; j0 += kDecodeBlock) {  // O = P · V
    const uint32_t n = std::min(kDecodeBlock, n_max - j0);
    read_block(&BlockPool::v, j0, n);
    for (uint32_t r = 0; r < rows; ++r)
      if (keys_of(r) > j0)
        accumulate_row(scores.data() + size_t(r) * n_max + j0, block, std::min(n, keys_of(r) - j0), nv, o + size_t(r) * D);
  }
  for (uint32_t r = 0; r < rows; ++r) {
    float* dst = job.out + size_t(t_begin + r / g) * job.out_stride + size_t(kvh * g + r % g) * D;
    for (uint32_t d = 0; d < D; ++d) dst[d] = o[size_t(r) * D + d] * inv[r];
  }
}

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& sh, uint32_t max_rows)
    : q_(size_t(max_rows) * sh.head_dim),
      o_(size_t(max_rows) * sh.head_dim),
      m_(max_rows),
      l_(max_rows),
      kt_(size_t(sh.head_dim) * kMaxChunkKeys),
      v_(size_t(sh.head_dim) * kMaxChunkKeys),
      p_(kMaxRowGroup * kMaxChunkKeys),
      pos_(max_rows) {}

uint32_t attention_block_tokens(const AttentionShape& sh) {
  const uint32_t g = sh.num_heads / sh.num_kv_heads;
  return std::max<uint32_t>(1, kTargetRows / g);
}

void attend(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
            AttentionScratch& s) {
  if (job.decode) {
    // Tokens in passes of about kDecodePassRows rows: they share each widened block of K and V, and
    // their scores (rows × keys) stay a few MiB at long contexts.
    const uint32_t pass = std::max<uint32_t>(1, kDecodePassRows / (sh.num_heads / sh.num_kv_heads));
    for (uint32_t t = t_begin; t < t_end; t += pass)
      attend_decode(sh, job, kvh, t, std::min(t_end, t + pass), s.scores_, s.kt_.data(), s.o_.data());
    return;
  }
  const AttentionBuffers b{s.q_.data(), s.o_.data(), s.m_.data(),  s.l_.data(),
                           s.pos_.data(), s.kt_.data(), s.v_.data(), s.p_.data()};
  // Prefill's chunked kernel: the 16-lane one where the CPU has AVX-512, else the 8-lane one. A
  // process always takes the same, so a row's result never depends on the call that computed it.
  static const bool wide = qdot::cpu_has(qdot::Isa::kAvx512);
  if (wide) return attend_chunked_avx512(sh, job, kvh, t_begin, t_end, b);
  attend_chunked_avx2(sh, job, kvh, t_begin, t_end, b);
}

void attend_chunked_avx2(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin,
                         uint32_t t_end, const AttentionBuffers& b) {
  switch (sh.head_dim / simd::lanes<simd::vfloat8>) {
    case 1: return attend_chunked<simd::vfloat8, 1>(sh, job, kvh, t_begin, t_end, b);
    case 2: return attend_chunked<simd::vfloat8, 2>(sh, job, kvh, t_begin, t_end, b);
    case 4: return attend_chunked<simd::vfloat8, 4>(sh, job, kvh, t_begin, t_end, b);
    case 8: return attend_chunked<simd::vfloat8, 8>(sh, job, kvh, t_begin, t_end, b);
    default: return attend_chunked<simd::vfloat8, 0>(sh, job, kvh, t_begin, t_end, b);
  }
}

}  // namespace kvtier::engine
