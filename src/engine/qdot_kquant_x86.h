// Internal, included once by each x86 kernel file (qdot_avx2.cc,
// qdot_avxvnni.cc, qdot_avx512.cc), which selects the instruction set (see
// engine/qdot_x86_isa.h): quantize_q8k and the Q2_K .. Q6_K dots against
// BlockQ8K rows, computing the integers of qdot_kquant_scalar.cc straight from
// the packed bits. Per super-block: the weights are unpacked once into eight
// 32-byte chunks and eight int16 scale vectors (shared by every activation row
// of a many-row call), then per activation row unsigned weights × signed
// activations by _mm256_maddubs_epi16 (pair sums fit int16: at most 2 · 63 ·
// 128), group scales multiplied in and summed into int32 (madd, or VNNI's
// dpwssd), the mins (and Q3_K/Q6_K's constant offset) through the activations'
// bsums, then one f32 FMA. Every set built from this file computes the same
// integers and f32 operations, so they agree bit for bit. Internal linkage
// only (an unnamed namespace).
#pragma once

#include <cstring>
#include <limits>

#include "engine/qdot_impl.h"
#include "engine/qdot_x86_isa.h"

namespace kvtier::engine::qdot::impl::kquant_x86 {
namespace {

constexpr size_t kQK = 256;  // elements per super-block (and per BlockQ8K)

// The helpers below run once or more per super-block; they are forced inline
// (GCC's -O2 heuristics leave some as calls) and their loops fully unrolled, so
// every shift count and shuffle selector is a constant.
#define KQ_INLINE [[gnu::always_inline]] inline

KQ_INLINE float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

KQ_INLINE uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
KQ_INLINE __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
KQ_INLINE __m256i bytes(int v) { return _mm256_set1_epi8(char(v)); }

float hsum(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}
float hsum(__m256 v) { return hsum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); }

// sum + Σ q[i] * a[i] over 32 elements, with the 16 pair sums scaled by the int16 lanes of
// `scales` and added in pairs: 8 int32 lanes.
KQ_INLINE __m256i add_scaled_dot32(__m256i sum, __m256i q, const int8_t* a, __m256i scales) {
  return x86::add_madd_i16(sum, _mm256_maddubs_epi16(q, load(a)), scales);
}

// Prefetches the super-block kPrefetchAhead blocks after `x` (2-3 KiB ahead): the hardware
// prefetcher alone leaves one core's stream of weight rows short of the memory bandwidth (measured:
// 1.2-1.6x faster gemv over 10-50 MB matrices with this, no change in cache). The address is formed
// as an integer, as it may pass the row's end: prefetches never fault, and in a matrix the next row
// follows.
constexpr size_t kPrefetchAhead = 16;
template <typename Block, size_t kAhead = kPrefetchAhead>
KQ_INLINE void prefetch_ahead(const Block* x) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(x) + kAhead * sizeof(Block);
  for (size_t line = 0; line < sizeof(Block); line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at + line), _MM_HINT_T0);
}

// --- Q2_K, Q3_K, Q6_K: element 128h + 32s + l, sixteen groups of 16 -------------
//
// A chunk (h, s) is 32 elements: groups 8h + 2s and 8h + 2s + 1, which are the
// low and high 128-bit lanes of maddubs' output. Its scale vector comes from
// the half's eight int16 scales, copied to both lanes, by a byte shuffle that
// picks scale 2s in the low lane and 2s + 1 in the high one.
//
// The chunk functions extract bit fields of every byte with 16-bit shifts by
// constants and a mask; a bit that crosses from the neighbouring byte always
// lands outside the mask.

// The int16 group scales 8h .. 8h + 7 of `scales16` (group g in lane g) in both 128-bit lanes.
KQ_INLINE __m256i half_scales(__m256i scales16, int h) {
  return h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                : _mm256_permute2x128_si256(scales16, scales16, 0x11);
}

// Calls fn(c, q, scale) for each chunk c = 4h + s of a super-block, in order: its q as 32
// unsigned bytes (chunk(x, h, s)) and the int16 scales of its two groups (the low and high 128-bit
// lanes of maddubs' output) from `scales16`, which holds scale g in int16 lane g.
template <typename Block, __m256i (*chunk)(const Block&, int, int), typename Fn>
KQ_INLINE void for_each_chunk(const Block& x, __m256i scales16, Fn&& fn) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i sc = half_scales(scales16, h);
    // Chunk 0's shuffle: int16 scale 0 in the low lane, 1 in the high; each next chunk is 2 further.
    __m256i sel = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                   2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      fn(4 * h + s, chunk(x, h, s), _mm256_shuffle_epi8(sc, sel));
      sel = _mm256_add_epi8(sel, bytes(4));
    }
  }
}

// A super-block unpacked for the dots of many activation rows: chunk c's q and scales.
struct Unpacked {
  __m256i q[8], scale[8];
};
template <typename Block, __m256i (*chunk)(const Block&, int, int)>
KQ_INLINE void unpack_groups(const Block& x, __m256i scales16, Unpacked& u) {
  for_each_chunk<Block, chunk>(x, scales16, [&](int c, __m256i q, __m256i scale) { u.q[c] = q, u.scale[c] = scale; });
}

// Σ_c scale_c · Σ_{i in c} q_i a_i over an unpacked super-block (chunk c: elements 32c ..): 8
// int32 lanes, exact.
KQ_INLINE __m256i unpacked_dot(const Unpacked& u, const BlockQ8K& a) {
  __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) sum = add_scaled_dot32(sum, u.q[c], a.qs + 32 * c, u.scale[c]);
  return sum;
}

#if KVTIER_QDOT_VNNI == 1
// --- AVX-512: the many-row dots on 512-bit registers ---------------------------------------
//
// Two 32-element chunks per register: an unpacked super-block's chunks 2k and 2k + 1 (and their
// scale vectors) go into the low and high halves of register k, and the activations' elements
// 64k .. 64k + 63 are one 64-byte load. The integer lanes of the two halves are then added: lane
// i of the result is Σ_c (chunk c's lane i), the very int32 lanes the 256-bit kernels sum, so
// the f32 steps that follow (the type's accumulate) are the same operations on the same values
// and every row is the row kernel's result bit for bit.
struct Unpacked512 {
  __m512i q[4], scale[4];
};
// The unpacked super-block as the many-row dots take it: two chunks per register.
KQ_INLINE Unpacked512 for_dots(const Unpacked& u) {
  Unpacked512 w;
  for (int k = 0; k < 4; ++k) {
    w.q[k] = _mm512_inserti64x4(_mm512_castsi256_si512(u.q[2 * k]), u.q[2 * k + 1], 1);
    w.scale[k] = _mm512_inserti64x4(_mm512_castsi256_si512(u.scale[2 * k]), u.scale[2 * k + 1], 1);
  }
  return w;
}
KQ_INLINE __m256i unpacked_dot(const Unpacked512& u, const BlockQ8K& a) {
  // Two chains of two, so a row's four dependent multiply-adds are not one chain of four.
  __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)
    sum[k % 2] =
        _mm512_dpwssd_epi32(sum[k % 2], _mm512_maddubs_epi16(u.q[k], _mm512_loadu_si512(a.qs + 64 * k)), u.scale[k]);
  const __m512i both = _mm512_add_epi32(sum[0], sum[1]);
  return _mm256_add_epi32(_mm512_castsi512_si256(both), _mm512_extracti64x4_epi64(both, 1));
}
#else
KQ_INLINE const Unpacked& for_dots(const Unpacked& u) { return u; }
#endif

// unpacked_dot's integers for one activation block, unpacking each chunk as it is used (a row's
// dot: only a few vectors live at once, where unpacking all sixteen first would spill them).
template <typename Block, __m256i (*chunk)(const Block&, int, int)>
KQ_INLINE __m256i groups_dot(const Block& x, const BlockQ8K& a, __m256i scales16) {
  __m256i sum = _mm256_setzero_si256();
  for_each_chunk<Block, chunk>(
      x, scales16, [&](int c, __m256i q, __m256i scale) { sum = add_scaled_dot32(sum, q, a.qs + 32 * c, scale); });
  return sum;
}

// Σ_g scale_g · bsums_g: 8 int32 lanes (what a per-group min or constant offset costs).
KQ_INLINE __m256i bsums_dot(__m256i scales16, const BlockQ8K& a) { return _mm256_madd_epi16(scales16, load(a.bsums)); }

// Q2_K chunk (h, s): bits 2s..2s+1 of qs[32h ..].
KQ_INLINE __m256i q2_k_chunk(const BlockQ2K& x, int h, int s) {
  return _mm256_and_si256(_mm256_srli_epi16(load(x.qs + 32 * h), 2 * s), bytes(3));
}

// Q2_K: value d · scale · q - dmin · min, q the 2-bit field.
float dot_q2_k(size_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockQ2K*>(w);
  const auto* ab = static_cast<const BlockQ8K*>(act);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (size_t b = 0; b < n / kQK; ++b) {
    const BlockQ2K& x = wb[b];
    const BlockQ8K& a = ab[b];
    prefetch_ahead(&x);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    const __m256i scales16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0xF)));
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
    const __m256i sumi = groups_dot<BlockQ2K, q2_k_chunk>(x, a, scales16);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a.d * f16_at(x.d)), _mm256_cvtepi32_ps(sumi), acc);
    acc_min = _mm256_fmadd_ps(_mm256_set1_ps(a.d * f16_at(x.dmin)), _mm256_cvtepi32_ps(bsums_dot(mins16, a)), acc_min);
  }
  return hsum(acc) - hsum(acc_min);
}

// The sixteen signed 6-bit Q3_K scales (offset 32 removed) as int16, from 12 packed bytes: the
// low nibble of scale j in byte j % 8 (nibble j / 8), the high 2 bits in byte 8 + j % 4 (bits 2 (j / 4)).
KQ_INLINE __m256i q3_k_scales(const uint8_t* packed) {
  const uint32_t w[3] = {u32_at(packed), u32_at(packed + 4), u32_at(packed + 8)};
  const uint32_t s0 = (w[0] & 0x0F0F0F0F) | ((w[2] << 4) & 0x30303030);
  const uint32_t s1 = (w[1] & 0x0F0F0F0F) | ((w[2] << 2) & 0x30303030);
  const uint32_t s2 = ((w[0] >> 4) & 0x0F0F0F0F) | (w[2] & 0x30303030);
  const uint32_t s3 = ((w[1] >> 4) & 0x0F0F0F0F) | ((w[2] >> 2) & 0x30303030);
  const __m128i biased = _mm_setr_epi32(int(s0), int(s1), int(s2), int(s3));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(biased, _mm_set1_epi8(32)));
}

// Q3_K chunk (h, s): Q2_K's 2-bit field | bit c = 4h + s of hmask[..] moved to bit 2, ∈ [0, 7].
KQ_INLINE __m256i q3_k_chunk(const BlockQ3K& x, int h, int s) {
  const int c = 4 * h + s;
  const __m256i hm = load(x.hmask);
  const __m256i high = c >= 2 ? _mm256_srli_epi16(hm, c - 2) : _mm256_slli_epi16(hm, 2 - c);
  const __m256i low = _mm256_srli_epi16(load(x.qs + 32 * h), 2 * s);
  return _mm256_or_si256(_mm256_and_si256(low, bytes(3)), _mm256_and_si256(high, bytes(4)));
}

// Q3_K: value d · scale · (q - 4); the -4 goes through bsums.
float dot_q3_k(size_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockQ3K*>(w);
  const auto* ab = static_cast<const BlockQ8K*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < n / kQK; ++b) {
    const BlockQ3K& x = wb[b];
    const BlockQ8K& a = ab[b];
    prefetch_ahead(&x);
    const __m256i scales16 = q3_k_scales(x.scales);
    const __m256i offset = _mm256_slli_epi32(bsums_dot(scales16, a), 2);
    const __m256i sumi = _mm256_sub_epi32(groups_dot<BlockQ3K, q3_k_chunk>(x, a, scales16), offset);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a.d * f16_at(x.d)), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

// Q6_K chunk (h, s): nibble s / 2 of ql[64h + 32 (s % 2) ..] | bits 2s..2s+1 of qh[32h ..] moved
// to bits 4..5, ∈ [0, 63].
KQ_INLINE __m256i q6_k_chunk(const BlockQ6K& x, int h, int s) {
  const __m256i ql = load(x.ql + 64 * h + 32 * (s % 2));
  const __m256i low = s < 2 ? ql : _mm256_srli_epi16(ql, 4);
  const __m256i qh = load(x.qh + 32 * h);
  const __m256i high = s < 2 ? _mm256_slli_epi16(qh, 4 - 2 * s) : _mm256_srli_epi16(qh, 2 * s - 4);
  return _mm256_or_si256(_mm256_and_si256(low, bytes(0x0F)), _mm256_and_si256(high, bytes(0x30)));
}

// Q6_K: value d · scale · (q - 32); the -32 goes through bsums. Adds one super-block's value,
// given its integer sum, into acc: the f32 operations of every Q6_K kernel.
KQ_INLINE __m256 q6_k_accumulate(__m256i sum, __m256i scales16, const BlockQ8K& a, float d, __m256 acc) {
  const __m256i sumi = _mm256_sub_epi32(sum, _mm256_slli_epi32(bsums_dot(scales16, a), 5));
  return _mm256_fmadd_ps(_mm256_set1_ps(a.d * d), _mm256_cvtepi32_ps(sumi), acc);
}
KQ_INLINE __m256i q6_k_scales(const BlockQ6K& x) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
}

float dot_q6_k(size_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockQ6K*>(w);
  const auto* ab = static_cast<const BlockQ8K*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < n / kQK; ++b) {
    const BlockQ6K& x = wb[b];
    prefetch_ahead(&x);
    const __m256i scales16 = q6_k_scales(x);
    acc = q6_k_accumulate(groups_dot<BlockQ6K, q6_k_chunk>(x, ab[b], scales16), scales16, ab[b], f16_at(x.d), acc);
  }
  return hsum(acc);
}

// One Q6_K super-block against `count` activation blocks, unpacked once (dot_n_blocks).
KQ_INLINE void q6_k_block(const BlockQ6K& x, const BlockQ8K* const* a, int count, __m256* acc) {
  const __m256i scales16 = q6_k_scales(x);
  Unpacked u;
  unpack_groups<BlockQ6K, q6_k_chunk>(x, scales16, u);
  const auto& w = for_dots(u);
  const float d = f16_at(x.d);
  for (int t = 0; t < count; ++t) acc[t] = q6_k_accumulate(unpacked_dot(w, *a[t]), scales16, *a[t], d, acc[t]);
}

// --- Q4_K, Q5_K: eight sub-blocks of 32, each with a 6-bit scale and min -----------

// The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) as bytes, from the 12 packed bytes: scale/min
// j < 4 in the low 6 bits of bytes j / j + 4; j >= 4 takes its low 4 bits from byte j + 4 (scale:
// low nibble, min: high nibble) and its top 2 from bits 6..7 of bytes j - 4 / j. As words w0..w2:
// scales 0..3 = w0 & 0x3F.., 4..7 = (w2 & 0x0F..) | (w0 >> 2 & 0x30..), mins alike from w1 and w2 >> 4.
// The 16 bytes loaded end inside the block (the quants follow the scales).
KQ_INLINE __m128i k4_scales_mins(const uint8_t* packed) {
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(w, 0x98), _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
  const __m128i high =
      _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(w, 0x40), 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}

// Q4_K pair k: sub-blocks 2k and 2k + 1 are the low and high nibbles of qs[32k ..].
KQ_INLINE void q4_k_pair(const BlockQ4K& x, int k, __m256i q[2]) {
  const __m256i packed = load(x.qs + 32 * k);
  q[0] = _mm256_and_si256(packed, bytes(0x0F));
  q[1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), bytes(0x0F));
}

// Q5_K pair k: Q4_K's nibbles | bit j of qh[..] moved to bit 4 for sub-block j (16-bit shifts; a
// bit crossing from the neighbouring byte lands outside the mask).
KQ_INLINE void q5_k_pair(const BlockQ5K& x, int k, __m256i q[2]) {
  const __m256i packed = load(x.qs + 32 * k);
  const __m256i qh = load(x.qh);
  const __m256i high_lo = 2 * k <= 4 ? _mm256_slli_epi16(qh, 4 - 2 * k) : _mm256_srli_epi16(qh, 2 * k - 4);
  const __m256i high_hi = 2 * k + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - 2 * k) : _mm256_srli_epi16(qh, 2 * k - 3);
  q[0] = _mm256_or_si256(_mm256_and_si256(packed, bytes(0x0F)), _mm256_and_si256(high_lo, bytes(0x10)));
  q[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 4), bytes(0x0F)),
                         _mm256_and_si256(high_hi, bytes(0x10)));
}

// The int16 lanes that make _mm256_madd_epi16 give min_j · (bsums_2j + bsums_2j+1) in int32 lane
// j: min j (byte 8 + j of scales_mins) in lanes 2j and 2j + 1.
KQ_INLINE __m256i k4_mins_pairs(__m128i scales_mins) {
  return _mm256_cvtepu8_epi16(
      _mm_shuffle_epi8(scales_mins, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
}

// Adds one Q4_K/Q5_K super-block's value d_a · (d · Σ_j scale_j Σ_{i in j} q_i a_i - dmin · Σ_j
// min_j bsums32_j), given its integer sum, into acc: the f32 operations of every Q4_K/Q5_K kernel
// (the scaled sums and the mins share one vector: pairwise integer sums of both, [d d -dmin -dmin]
// per 128-bit lane, one FMA), so a row's result never depends on the rows sharing the call.
KQ_INLINE __m256 k4_accumulate(__m256i sum, __m256i mins, const BlockQ8K& a, __m256 dd, __m256 acc) {
  const __m256i both = _mm256_hadd_epi32(sum, _mm256_madd_epi16(mins, load(a.bsums)));
  return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(a.d), dd), _mm256_cvtepi32_ps(both), acc);
}
template <typename Block>
KQ_INLINE __m256 k4_dd(const Block& x) {
  const float d = f16_at(x.d), dmin = f16_at(x.dmin);
  return _mm256_setr_ps(d, d, -dmin, -dmin, d, d, -dmin, -dmin);
}

// Calls fn(j, q, scale) for each sub-block j of a Q4_K/Q5_K super-block, in order: its q as 32
// unsigned bytes (pair(x, k, q) gives sub-blocks 2k and 2k + 1) and its scale as int16 in every
// lane, a byte shuffle of the scale bytes: (j, zero) repeated.
template <typename Block, void (*pair)(const Block&, int, __m256i*), typename Fn>
KQ_INLINE void for_each_sub_block(const Block& x, __m128i scales_mins, Fn&& fn) {
  const __m256i sc = _mm256_broadcastsi128_si256(scales_mins);
  __m256i sel = _mm256_set1_epi16(int16_t(0x8000));  // scale 0
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m256i q[2];
    pair(x, k, q);
    fn(2 * k, q[0], _mm256_shuffle_epi8(sc, sel));
    fn(2 * k + 1, q[1], _mm256_shuffle_epi8(sc, _mm256_add_epi16(sel, _mm256_set1_epi16(1))));
    sel = _mm256_add_epi16(sel, _mm256_set1_epi16(2));
  }
}

// Σ_j scale_j · Σ_{i in sub-block j} q_i a_i, unpacking each pair as it is used (a row's dot).
template <typename Block, void (*pair)(const Block&, int, __m256i*)>
KQ_INLINE __m256i k4_dot(const Block& x, const BlockQ8K& a, __m128i scales_mins) {
  __m256i sum = _mm256_setzero_si256();
  for_each_sub_block<Block, pair>(
      x, scales_mins, [&](int j, __m256i q, __m256i scale) { sum = add_scaled_dot32(sum, q, a.qs + 32 * j, scale); });
  return sum;
}

// Q4_K/Q5_K: value d · scale · q - dmin · min.
template <typename Block, void (*pair)(const Block&, int, __m256i*)>
float dot_k4(size_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const Block*>(w);
  const auto* ab = static_cast<const BlockQ8K*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < n / kQK; ++b) {
    const Block& x = wb[b];
    prefetch_ahead(&x);
    const __m128i scales_mins = k4_scales_mins(x.scales);
    acc = k4_accumulate(k4_dot<Block, pair>(x, ab[b], scales_mins), k4_mins_pairs(scales_mins), ab[b], k4_dd(x), acc);
  }
  return hsum(acc);
}

// One Q4_K/Q5_K super-block against `count` activation blocks, unpacked once (dot_n_blocks).
template <typename Block, void (*pair)(const Block&, int, __m256i*)>
KQ_INLINE void k4_block(const Block& x, const BlockQ8K* const* a, int count, __m256* acc) {
  const __m128i scales_mins = k4_scales_mins(x.scales);
  Unpacked u;  // sub-block j is chunk j
  for_each_sub_block<Block, pair>(x, scales_mins,
                                  [&](int j, __m256i q, __m256i scale) { u.q[j] = q, u.scale[j] = scale; });
  const auto& w = for_dots(u);
  const __m256i mins = k4_mins_pairs(scales_mins);
  const __m256 dd = k4_dd(x);
  for (int t = 0; t < count; ++t) acc[t] = k4_accumulate(unpacked_dot(w, *a[t]), mins, *a[t], dd, acc[t]);
}

// `count` (≤ kDotN) activation rows at once, each super-block by block_fn; per row the same
// operations as the type's row dot.
template <typename Block, void (*block_fn)(const Block&, const BlockQ8K* const*, int, __m256*)>
void dot_n_blocks(size_t n, const void* w, const void* const* act, int count, float* out, size_t stride) {
  const auto* wb = static_cast<const Block*>(w);
  __m256 acc[kDotN];
  for (int t = 0; t < count; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t b = 0; b < n / kQK; ++b) {
    const BlockQ8K* a[kDotN];
    for (int t = 0; t < count; ++t) a[t] = static_cast<const BlockQ8K*>(act[t]) + b;
    block_fn(wb[b], a, count, acc);
  }
  for (int t = 0; t < count; ++t) out[t * stride] = hsum(acc[t]);
}

// --- quantize_q8k ---------------------------------------------------------------------

// max |x[i]| over 256 floats.
float abs_max(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (size_t i = 0; i < kQK; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 v = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  v = _mm_max_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// x[0..31] / d rounded in the current (default: nearest-even) mode, as 32 int8 in order.
__m256i quantize32(const float* x, __m256 d) {
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + 8 * i), d));
  // The packs work per 128-bit lane, leaving 4-element runs in the order 0 2 4 6 1 3 5 7.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The same f32 operations as the scalar quantize_block_q8k (so bit-identical): d = max|x| / 127,
// qs = x / d rounded; an all-zero block gives d = 0. bsums by byte sums of qs + 128.
void quantize_block_q8k(const float* x, BlockQ8K& y) {
  const float amax = abs_max(x);
  // Zero, or so small that d is subnormal (inexact: x / d could pass 127 and wrap): a zero block.
  if (!(amax / 127.0f >= std::numeric_limits<float>::min())) {
    std::memset(&y, 0, sizeof y);
    return;
  }
  y.d = amax / 127.0f;
  const __m256 d = _mm256_set1_ps(y.d);
  for (size_t i = 0; i < kQK; i += 32) {
    const __m256i q = quantize32(x + i, d);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.qs + i), q);
    // Per 64-bit lane: Σ (q + 128) over 8 bytes; two lanes per group of 16.
    const __m256i sums = _mm256_sad_epu8(_mm256_xor_si256(q, bytes(0x80)), _mm256_setzero_si256());
    const __m256i group = _mm256_add_epi64(sums, _mm256_srli_si256(sums, 8));
    y.bsums[i / 16] = int16_t(_mm256_extract_epi32(group, 0) - 16 * 128);
    y.bsums[i / 16 + 1] = int16_t(_mm256_extract_epi32(group, 4) - 16 * 128);
  }
}

void quantize_q8k(const float* x, size_t n, void* out) {
  auto* y = static_cast<BlockQ8K*>(out);
  for (size_t b = 0; b < n / kQK; ++b) quantize_block_q8k(x + b * kQK, y[b]);
}

#undef KQ_INLINE

// The set's K-quant part (each kernel file's fill_<isa> calls this).
void fill(Kernels& k) {
  k.quantize_q8k = quantize_q8k;
  k.dot[uint32_t(GgufType::kQ2_K)] = dot_q2_k;
  k.dot[uint32_t(GgufType::kQ3_K)] = dot_q3_k;
  k.dot[uint32_t(GgufType::kQ4_K)] = dot_k4<BlockQ4K, q4_k_pair>;
  k.dot[uint32_t(GgufType::kQ5_K)] = dot_k4<BlockQ5K, q5_k_pair>;
  k.dot[uint32_t(GgufType::kQ6_K)] = dot_q6_k;
  k.dot_n[uint32_t(GgufType::kQ4_K)] = dot_n_blocks<BlockQ4K, k4_block<BlockQ4K, q4_k_pair>>;
  k.dot_n[uint32_t(GgufType::kQ5_K)] = dot_n_blocks<BlockQ5K, k4_block<BlockQ5K, q5_k_pair>>;
  k.dot_n[uint32_t(GgufType::kQ6_K)] = dot_n_blocks<BlockQ6K, q6_k_block>;
}

}  // namespace
}  // namespace kvtier::engine::qdot::impl::kquant_x86
