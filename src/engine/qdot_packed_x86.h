// Internal, included once by each x86 kernel file (qdot_avx2.cc, qdot_avxvnni.cc,
// qdot_avx512.cc) after the row kernels (qdot_kquant_x86.h, qdot_legacy_x86.h), whose helpers it
// uses: the group dots of the packed layouts (qdot.h: Packing; layouts: qdot_impl.h). Each (row,
// token) takes the f32 steps of the scalar reference (qdot_pack.cc) lane by lane, so every set
// built from this file gives the reference's results bit for bit. Q4_K, Q6_K, Q8_0 and Q5_0 in
// every set (AVX2 splits Q8_0's offset bytes for maddubs, which would saturate on them). Internal
// linkage only, as the row kernels.
#pragma once

#include <cstring>

#include "engine/qdot_impl.h"
#include "engine/qdot_x86_isa.h"

namespace kvtier::engine::qdot::impl::packed_x86 {
namespace {

using kquant_x86::bytes;
using kquant_x86::kQK;
using kquant_x86::load;
using kquant_x86::prefetch_ahead;
constexpr size_t kBlock = 32;  // elements per legacy block

#define KQ_INLINE [[gnu::always_inline]] inline

// The four bytes at p as one int32 (activation bytes, for a broadcast).
KQ_INLINE int32_t i32_at(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Σ qs over an activation block, exactly (byte sums of qs + 128).
[[gnu::always_inline]] inline int32_t block_sum(const BlockQ8& a) {
  const __m256i q =
      _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)), _mm256_set1_epi8(char(0x80)));
  const __m256i sums = _mm256_sad_epu8(q, _mm256_setzero_si256());
  const __m128i half = _mm_add_epi64(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  return int32_t(_mm_cvtsi128_si64(half) + _mm_extract_epi64(half, 1)) - 32 * 128;
}

#if KVTIER_QDOT_VNNI == 1
// --- Packed Q4_K and Q6_K (qdot.h: Packing), a row per 32-bit lane of a 512-bit register ----
//
// A sub-block's (or chunk's) quants are unpacked once per group super-block into eight registers
// (line k: elements 4k .. 4k + 3 of each of the 16 rows) and serve every token of the call: per
// token, a dpbusd per line against its four activation bytes, broadcast, gives the 16 rows' exact
// integer dots, then the reference's f32 steps (qdot_pack.cc), lane by lane in its order. Four
// multiply ops per 256 products, where the row kernels take eight (maddubs and dpwssd per 64).

KQ_INLINE __m512 f16x16(const uint16_t* p) { return _mm512_cvtph_ps(load(p)); }
KQ_INLINE __m512i u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The last steps of every K-quant group block, per token: s += scale · Σ_p pairs[p] · (bsums 2p,
// 2p + 1) (the int16 halves of a lane against a pair of the activations' group sums: the mins or
// the constant offset), then acc += d_a · s.
template <int N>
KQ_INLINE void finish_tokens(const __m512i* pairs, __m512 scale, const BlockQ8K* const* a, const __m512* s,
                             __m512* acc) {
  for (int t = 0; t < N; ++t) {
    __m512i sums = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p)
      sums = _mm512_dpwssd_epi32(sums, pairs[p], _mm512_set1_epi32(i32_at(a[t]->bsums + 2 * p)));
    acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(a[t]->d), _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sums), s[t]), acc[t]);
  }
}

// One Q4_K group super-block against N activation blocks, into acc[0 .. N) (a lane per row). A pair's
// lines are loaded once: sub-block 2p is their low nibbles, 2p + 1 their high nibbles left in
// place (16 q), its dots 16 times the reference's and its scale a 16th of it — both exact (the
// dots stay below 2^24, the scales normal floats), so each fma sees the reference's product.
template <int N>
KQ_INLINE void group_block(const PackedQ4K16& x, const BlockQ8K* const* a, __m512* acc) {
  const __m512 d = f16x16(x.d);
  __m512 s[N];
  for (int t = 0; t < N; ++t) s[t] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    __m512i lo[8], hi[8];
    for (int k = 0; k < 8; ++k) {
      const __m512i line = _mm512_loadu_si512(x.qs[p][k]);
      lo[k] = _mm512_and_si512(line, _mm512_set1_epi8(0x0F));
      hi[k] = _mm512_and_si512(line, _mm512_set1_epi8(char(0xF0)));
    }
    const __m512 scale_lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(u8x16(x.scales[2 * p])));
    const __m512 scale_hi =
        _mm512_mul_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(u8x16(x.scales[2 * p + 1]))), _mm512_set1_ps(1.0f / 16));
    for (int t = 0; t < N; ++t) {
      const int8_t* q = a[t]->qs + 64 * p;
      __m512i dot_lo = _mm512_setzero_si512(), dot_hi = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        dot_lo = _mm512_dpbusd_epi32(dot_lo, lo[k], _mm512_set1_epi32(i32_at(q + 4 * k)));
        dot_hi = _mm512_dpbusd_epi32(dot_hi, hi[k], _mm512_set1_epi32(i32_at(q + 32 + 4 * k)));
      }
      s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_lo), scale_lo, s[t]);
      s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_hi), scale_hi, s[t]);
    }
  }
  // The mins: min_j in both int16 halves of a lane, against the pair bsums 2j, 2j + 1.
  __m512i mins[8];
  for (int j = 0; j < 8; ++j) {
    const __m512i m = u8x16(x.mins[j]);
    mins[j] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
  }
  const __m512i dmin = _mm512_castps_si512(f16x16(x.dmin));  // negated below: -dmin, as the reference
  finish_tokens<N>(mins, _mm512_castsi512_ps(_mm512_xor_si512(dmin, _mm512_set1_epi32(int(0x80000000u)))), a, s, acc);
}

// Q6_K line k of chunk c (elements 128h + 32c ..) of a group: nibble c / 2 of its ql line and
// bits 2c .. 2c + 1 of its qh line moved to bits 4 .. 5 (q6_k_chunk's fields, on 16 rows' lines).
KQ_INLINE __m512i q6k16_line(const PackedQ6K16& x, int h, int c, int k) {
  const __m512i ql = _mm512_loadu_si512(x.ql[h][c % 2][k]);
  const __m512i qh = _mm512_loadu_si512(x.qh[h][k]);
  const __m512i low = c < 2 ? ql : _mm512_srli_epi16(ql, 4);
  const __m512i high = c < 2 ? _mm512_slli_epi16(qh, 4 - 2 * c) : _mm512_srli_epi16(qh, 2 * c - 4);
  return _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi8(0x0F)), _mm512_and_si512(high, _mm512_set1_epi8(0x30)));
}
KQ_INLINE __m512i i8x16(const int8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// One Q6_K group super-block against N activation blocks: per chunk of 32 elements, eight lines
// unpacked once for all the tokens, four dpbusd per group of 16 and its scale in f32; the offset
// 32 through the activations' group sums, the scales of groups 2p and 2p + 1 as the int16 halves
// of a lane (the reference's steps: qdot_pack.cc, q6k16_row_block).
template <int N>
KQ_INLINE void group_block(const PackedQ6K16& x, const BlockQ8K* const* a, __m512* acc) {
  const __m512 d = f16x16(x.d);
  __m512 s[N];
  for (int t = 0; t < N; ++t) s[t] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int hc = 0; hc < 8; ++hc) {
    __m512i w[8];
    for (int k = 0; k < 8; ++k) w[k] = q6k16_line(x, hc / 4, hc % 4, k);
    const __m512 scale0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(i8x16(x.scales[2 * hc])));
    const __m512 scale1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(i8x16(x.scales[2 * hc + 1])));
    for (int t = 0; t < N; ++t) {
      const int8_t* q = a[t]->qs + 32 * hc;
      __m512i dot0 = _mm512_setzero_si512(), dot1 = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        dot0 = _mm512_dpbusd_epi32(dot0, w[k], _mm512_set1_epi32(i32_at(q + 4 * k)));
        dot1 = _mm512_dpbusd_epi32(dot1, w[k + 4], _mm512_set1_epi32(i32_at(q + 16 + 4 * k)));
      }
      s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot0), scale0, s[t]);
      s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot1), scale1, s[t]);
    }
  }
  __m512i pairs[8];
  for (int p = 0; p < 8; ++p)
    pairs[p] = _mm512_or_si512(_mm512_and_si512(i8x16(x.scales[2 * p]), _mm512_set1_epi32(0xFFFF)),
                               _mm512_slli_epi32(i8x16(x.scales[2 * p + 1]), 16));
  finish_tokens<N>(pairs, _mm512_mul_ps(d, _mm512_set1_ps(-32.0f)), a, s, acc);
}

template <int N, typename Packed>
void group_tokens(size_t n, const Packed* g, const BlockQ8K* const* act, float* out, size_t stride) {
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < n / kQK; ++b) {
    const BlockQ8K* a[N];
    for (int t = 0; t < N; ++t) a[t] = act[t] + b;
    prefetch_ahead<Packed, 1>(&g[b]);  // 2.3-3.3 KiB ahead, as the row kernels' 16 blocks
    group_block<N>(g[b], a, acc);
  }
  for (int t = 0; t < N; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

#else
// --- Packed Q4_K and Q6_K on 256-bit registers: a group is two halves of 8 rows --------------
//
// The same steps as the AVX-512 kernel, one half of the group at a time. With 16 vector
// registers a sub-block's eight lines are unpacked at a time, for up to 4 tokens.

KQ_INLINE __m256 f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
KQ_INLINE __m256i u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Σ_k w[k] · (q[4k .. 4k + 3] broadcast) over kLines lines: a row's exact dot per int32 lane.
// AVX2 adds kSums of maddubs' int16 pair sums before each madd: below 2^15 for quants below
// 16 (eight sums) or 64 (two).
template <int kLines, int kSums>
KQ_INLINE __m256i lines_dot(const __m256i* w, const int8_t* q) {
  __m256i dot = _mm256_setzero_si256();
#if KVTIER_QDOT_VNNI == 2
  for (int k = 0; k < kLines; ++k) dot = _mm256_dpbusd_avx_epi32(dot, w[k], _mm256_set1_epi32(i32_at(q + 4 * k)));
#else
  for (int k = 0; k < kLines; k += kSums) {
    __m256i pairs = _mm256_maddubs_epi16(w[k], _mm256_set1_epi32(i32_at(q + 4 * k)));
    for (int j = 1; j < kSums; ++j)
      pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[k + j], _mm256_set1_epi32(i32_at(q + 4 * (k + j)))));
    dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
#endif
  return dot;
}

// The last steps of every K-quant half block, per token: the AVX-512 finish_tokens on 8 rows.
template <int N>
KQ_INLINE void finish_tokens(const __m256i* pairs, __m256 scale, const BlockQ8K* const* a, const __m256* s,
                             __m256* acc) {
  for (int t = 0; t < N; ++t) {
    __m256i sums = _mm256_setzero_si256();
    for (int p = 0; p < 8; ++p)
      sums = x86::add_madd_i16(sums, pairs[p], _mm256_set1_epi32(i32_at(a[t]->bsums + 2 * p)));
    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t]->d), _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), s[t]), acc[t]);
  }
}

// Half h (rows 8h .. 8h + 7) of one Q4_K group super-block against N activation blocks, into acc.
template <int N>
KQ_INLINE void half_block(const PackedQ4K16& x, int h, const BlockQ8K* const* a, __m256* acc) {
  const __m256 d = f16x8(x.d + 8 * h);
  __m256 s[N];
  for (int t = 0; t < N; ++t) s[t] = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    __m256i w[8];
    for (int k = 0; k < 8; ++k) {
      const __m256i line = load(x.qs[j / 2][k] + 32 * h);
      w[k] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(line, 4) : line, bytes(0x0F));
    }
    const __m256 scale = _mm256_mul_ps(d, _mm256_cvtepi32_ps(u8x8(x.scales[j] + 8 * h)));
    for (int t = 0; t < N; ++t)
      s[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lines_dot<8, 8>(w, a[t]->qs + 32 * j)), scale, s[t]);
  }
  __m256i mins[8];  // min_j in both int16 halves of a lane, against the pair bsums 2j, 2j + 1
  for (int j = 0; j < 8; ++j) {
    const __m256i m = u8x8(x.mins[j] + 8 * h);
    mins[j] = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
  }
  finish_tokens<N>(mins, _mm256_xor_ps(f16x8(x.dmin + 8 * h), _mm256_set1_ps(-0.0f)), a, s, acc);  // -dmin
}

KQ_INLINE __m256i i8x8(const int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Half h of one Q6_K group super-block: the AVX-512 group_block's steps on 8 rows.
template <int N>
KQ_INLINE void half_block(const PackedQ6K16& x, int h, const BlockQ8K* const* a, __m256* acc) {
  const __m256 d = f16x8(x.d + 8 * h);
  __m256 s[N];
  for (int t = 0; t < N; ++t) s[t] = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int hc = 0; hc < 8; ++hc) {
    const int c = hc % 4;
    __m256i w[8];
    for (int k = 0; k < 8; ++k) {
      const __m256i ql = load(x.ql[hc / 4][c % 2][k] + 32 * h), qh = load(x.qh[hc / 4][k] + 32 * h);
      const __m256i low = c < 2 ? ql : _mm256_srli_epi16(ql, 4);
      const __m256i high = c < 2 ? _mm256_slli_epi16(qh, 4 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 4);
      w[k] = _mm256_or_si256(_mm256_and_si256(low, bytes(0x0F)), _mm256_and_si256(high, bytes(0x30)));
    }
    for (int half = 0; half < 2; ++half) {
      const __m256 scale = _mm256_mul_ps(d, _mm256_cvtepi32_ps(i8x8(x.scales[2 * hc + half] + 8 * h)));
      for (int t = 0; t < N; ++t)
        s[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lines_dot<4, 2>(w + 4 * half, a[t]->qs + 32 * hc + 16 * half)), scale,
                               s[t]);
    }
  }
  __m256i pairs[8];  // the scales of groups 2p and 2p + 1 as the int16 halves of a lane
  for (int p = 0; p < 8; ++p)
    pairs[p] = _mm256_or_si256(_mm256_and_si256(i8x8(x.scales[2 * p] + 8 * h), _mm256_set1_epi32(0xFFFF)),
                               _mm256_slli_epi32(i8x8(x.scales[2 * p + 1] + 8 * h), 16));
  finish_tokens<N>(pairs, _mm256_mul_ps(d, _mm256_set1_ps(-32.0f)), a, s, acc);
}

template <int N, typename Packed>
void group_tokens(size_t n, const Packed* g, const BlockQ8K* const* act, float* out, size_t stride) {
  for (int h = 0; h < 2; ++h) {
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / kQK; ++b) {
      const BlockQ8K* a[N];
      for (int t = 0; t < N; ++t) a[t] = act[t] + b;
      prefetch_ahead<Packed, 1>(&g[b]);
      half_block<N>(g[b], h, a, acc);
    }
    for (int t = 0; t < N; ++t) _mm256_storeu_ps(out + t * stride + 8 * h, acc[t]);
  }
}

#endif

#if KVTIER_QDOT_VNNI == 1
// --- Packed Q8_0 and Q5_0 (qdot.h: Packing; layout: qdot_impl.h), a row per 32-bit lane -----
//
// A block's eight lines (elements 4k .. 4k + 3 of each of the 16 rows, unsigned: Q8_0's quants
// plus 128, Q5_0's 5-bit q) are unpacked once for every token of the call; per token, a dpbusd per
// line against four broadcast activation bytes, the offset (128 or 16) times the block's
// activation sum taken back, then the reference's one fma (qdot_pack.cc, legacy_group_dot).

template <Packing P>
[[gnu::always_inline]] inline void legacy_lines(const uint8_t* lines, __m512i* w) {
  if constexpr (P == Packing::kQ8016) {
    for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(lines + 64 * k);
  } else {
    for (int k = 0; k < 4; ++k) {
      const __m512i line = _mm512_loadu_si512(lines + 64 * k);
      const __m512i lo = _mm512_and_si512(line, _mm512_set1_epi8(0x0F));
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(line, 4), _mm512_set1_epi8(0x0F));
      uint64_t mask[2];
      std::memcpy(&mask[0], lines + 256 + 8 * k, 8);
      std::memcpy(&mask[1], lines + 256 + 8 * (k + 4), 8);
      w[k] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(mask[0]), lo, _mm512_set1_epi8(0x10));
      w[k + 4] = _mm512_mask_add_epi8(hi, _cvtu64_mask64(mask[1]), hi, _mm512_set1_epi8(0x10));
    }
  }
}

template <int N, Packing P>
void legacy_group_tokens(size_t n, const uint8_t* group, const BlockQ8* const* act, float* out, size_t stride) {
  constexpr int32_t kOffset = P == Packing::kQ8016 ? 128 : 16;
  constexpr size_t kLineBytes = P == Packing::kQ8016 ? kLegacyQ8LineBytes : kLegacyQ5LineBytes;
  const size_t blocks = n / kBlock;
  const uint8_t* lines = group + legacy_d_bytes(blocks);
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < blocks; ++b, lines += kLineBytes) {
    for (size_t at = 0; at < kLineBytes; at += 64)
      _mm_prefetch(reinterpret_cast<const char*>(lines + 4 * kLineBytes + at), _MM_HINT_T0);
    __m512i w[8];
    legacy_lines<P>(lines, w);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32 * b)));
    for (int t = 0; t < N; ++t) {
      const BlockQ8& a = act[t][b];
      __m512i dot = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) dot = _mm512_dpbusd_epi32(dot, w[k], _mm512_set1_epi32(i32_at(a.qs + 4 * k)));
      dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(kOffset * block_sum(a)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[t]);
    }
  }
  for (int t = 0; t < N; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

#endif

#if KVTIER_QDOT_VNNI != 1
// AVX-VNNI and AVX2: the packed Q8_0 and Q5_0 groups (above) as two halves of 8 rows on 256-bit
// registers, with the AVX-512 set's integers and f32 steps (the scalar reference's), so the three
// sets agree bit for bit on these types too (AVX2 kept the file's rows and its row dot, whose f32
// steps differ: a matrix's outputs differed between an AVX2 host and a VNNI one).
// Q5_0's high bits: the half's 32 mask bits of a line, expanded to 0x10 in each byte that has one.
[[gnu::always_inline]] inline __m256i high_bits(const uint8_t* masks, int k, int h) {
  uint32_t m;
  std::memcpy(&m, masks + 8 * k + 4 * h, 4);  // bit 4r + e: row 8h + r, element e of the line
  const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,  //
                                       1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(m)), byte_of);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

template <Packing P>
[[gnu::always_inline]] inline void legacy_half_lines(const uint8_t* lines, int h, __m256i* w) {
  const auto line = [&](int k) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 64 * k + 32 * h));
  };
  if constexpr (P == Packing::kQ8016) {
    for (int k = 0; k < 8; ++k) w[k] = line(k);
  } else {
    for (int k = 0; k < 4; ++k) {
      const __m256i l = line(k);
      w[k] = _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi8(0x0F)), high_bits(lines + 256, k, h));
      w[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F)),
                                 high_bits(lines + 256, k + 4, h));
    }
  }
}

// Per int32 lane (a row of the half), Σ weight × activation over block `a`'s 32 elements; the lines
// hold each weight plus an offset as an unsigned byte. VNNI: dpbusd, then the offset's share taken
// off. AVX2: maddubs' int16 pair sums would saturate on Q8_0's bytes (up to 255), so their low 7
// bits and their top bit go in apart (each pair then stays within ±2^15); Q5_0's (below 32) go in
// as they are.
template <Packing P>
[[gnu::always_inline]] inline __m256i legacy_block_dot(const __m256i* w, const BlockQ8& a) {
  constexpr int32_t kOffset = P == Packing::kQ8016 ? 128 : 16;
  __m256i dot = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k) {
    const __m256i q = _mm256_set1_epi32(i32_at(a.qs + 4 * k));
#if KVTIER_QDOT_VNNI == 2
    dot = _mm256_dpbusd_avx_epi32(dot, w[k], q);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (P == Packing::kQ8016) {
      const __m256i top = _mm256_and_si256(w[k], _mm256_set1_epi8(char(0x80)));
      const __m256i low = _mm256_and_si256(w[k], _mm256_set1_epi8(0x7F));
      dot = _mm256_add_epi32(dot, _mm256_madd_epi16(_mm256_maddubs_epi16(top, q), ones));
      dot = _mm256_add_epi32(dot, _mm256_madd_epi16(_mm256_maddubs_epi16(low, q), ones));
    } else {
      dot = _mm256_add_epi32(dot, _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], q), ones));
    }
#endif
  }
  return _mm256_sub_epi32(dot, _mm256_set1_epi32(kOffset * block_sum(a)));
}

template <int N, Packing P>
void legacy_group_tokens(size_t n, const uint8_t* group, const BlockQ8* const* act, float* out, size_t stride) {
  constexpr size_t kLineBytes = P == Packing::kQ8016 ? kLegacyQ8LineBytes : kLegacyQ5LineBytes;
  const size_t blocks = n / kBlock;
  for (int h = 0; h < 2; ++h) {
    const uint8_t* lines = group + legacy_d_bytes(blocks);
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (size_t b = 0; b < blocks; ++b, lines += kLineBytes) {
      for (size_t at = 0; at < kLineBytes; at += 64)
        _mm_prefetch(reinterpret_cast<const char*>(lines + 4 * kLineBytes + at), _MM_HINT_T0);
      __m256i w[8];
      legacy_half_lines<P>(lines, h, w);
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 32 * b + 16 * h)));
      for (int t = 0; t < N; ++t) {
        const BlockQ8& a = act[t][b];
        const __m256i dot = legacy_block_dot<P>(w, a);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) _mm256_storeu_ps(out + t * stride + 8 * h, acc[t]);
  }
}

#endif

#if KVTIER_QDOT_VNNI == 1
constexpr int kRunTokens = 8;
#else
constexpr int kRunTokens = 4;  // 16 vector registers: one unpacked chunk's lines and 4 tokens' sums
#endif

// Calls tokens.operator()<N>(t) for runs of kRunTokens tokens from t, then 4, then 1, over count
// (each token's lanes see the same steps whatever its run).
template <typename Tokens>
KQ_INLINE void in_runs(int count, Tokens&& tokens) {
  int t = 0;
  for (; count - t >= kRunTokens; t += kRunTokens) tokens.template operator()<kRunTokens>(t);
  for (; count - t >= 4; t += 4) tokens.template operator()<4>(t);
  for (; t < count; ++t) tokens.template operator()<1>(t);
}

// A packed K-quant group against `count` tokens (qdot.h's GroupDotFn).
template <typename Packed>
void group_dot(size_t n, const void* group, const void* const* act, int count, float* out, size_t stride) {
  const auto* g = static_cast<const Packed*>(group);
  const auto* const* a = reinterpret_cast<const BlockQ8K* const*>(act);
  in_runs(count, [&]<int N>(int t) { group_tokens<N>(n, g, a + t, out + t * stride, stride); });
}

// A packed Q8_0 or Q5_0 group against `count` tokens.
template <Packing P>
void legacy_group_dot(size_t n, const void* group, const void* const* act, int count, float* out, size_t stride) {
  const auto* g = static_cast<const uint8_t*>(group);
  const auto* const* a = reinterpret_cast<const BlockQ8* const*>(act);
  in_runs(count, [&]<int N>(int t) { legacy_group_tokens<N, P>(n, g, a + t, out + t * stride, stride); });
}

#undef KQ_INLINE

// The set's packings and their group dots (each kernel file's fill_<isa> calls this).
void fill(Kernels& k) {
  k.packing[uint32_t(GgufType::kQ4_K)] = Packing::kQ4K16;
  k.packing[uint32_t(GgufType::kQ6_K)] = Packing::kQ6K16;
  k.group_dot[int(Packing::kQ4K16)] = group_dot<PackedQ4K16>;
  k.group_dot[int(Packing::kQ6K16)] = group_dot<PackedQ6K16>;
  k.packing[uint32_t(GgufType::kQ8_0)] = Packing::kQ8016;
  k.packing[uint32_t(GgufType::kQ5_0)] = Packing::kQ5016;
  k.group_dot[int(Packing::kQ8016)] = legacy_group_dot<Packing::kQ8016>;
  k.group_dot[int(Packing::kQ5016)] = legacy_group_dot<Packing::kQ5016>;
}

}  // namespace
}  // namespace kvtier::engine::qdot::impl::packed_x86
