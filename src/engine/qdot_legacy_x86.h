// Internal, included once by each x86 kernel file (qdot_avx2.cc,
// qdot_avxvnni.cc, qdot_avx512.cc), which selects the instruction set: the kernels for
// the legacy 32-element block types against BlockQ8 activations, F16/BF16 rows
// against f32, and quantize_q8: the scalar set's math
// (engine/qdot_legacy_scalar.cc) with 32 int8 products per block in one
// register. A block's integer sum is exact in int32 lanes (maddubs pairs stay
// below 2 * 128 * 127 < 2^15, so nothing saturates; VNNI's dpbusd sums four
// products straight into int32) and is scaled by one f32 FMA; only the f32
// summation order differs from the scalar set, and the sets built from this
// file compute the same integers and the same f32 operations in the same order,
// so they agree bit for bit.
//
// The including file defines KVTIER_QDOT_VNNI (engine/qdot_x86_isa.h) and
// includes this inside its target region; everything here has internal linkage
// (an unnamed namespace), so no copy compiled for one ISA can be picked by the
// linker for another.
#pragma once

#include <algorithm>
#include <cstring>

#include "engine/half.h"
#include "engine/qdot_impl.h"
#include "engine/qdot_x86_isa.h"

namespace kvtier::engine::qdot::impl::legacy_x86 {
namespace {

constexpr size_t kBlock = 32;

// The f16 stored at `p` (any alignment), widened exactly.
float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// One block, the same f32 operations as the scalar quantize_block (d =
// max|x| / 127, q = round-half-even(x * (1 / d)) clamped to ±127, s = d * Σ q),
// so the two produce identical bits for finite x.
void quantize_block(const float* x, BlockQ8& out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  const float d = hmax(amax) / 127.0f;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
  }
  const int32_t sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  // The packs interleave the 128-bit halves: 4-byte groups come out as
  // q0[0:4] q1[0:4] q2[0:4] q3[0:4] q0[4:8] ..., which the permute puts back in order.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs), ordered);
  out.d = d;
  out.s = d * float(sum);
}

void quantize_q8(const float* x, size_t n, void* out) {
  auto* blocks = static_cast<BlockQ8*>(out);
  for (size_t b = 0; b < n / kBlock; ++b) quantize_block(x + b * kBlock, blocks[b]);
}

// 8 int32 lanes summing to Σ x_j y_j over the 32 byte pairs: x unsigned
// (0..128 here), y signed (engine/qdot_x86_isa.h).
using x86::dot_u8_i8;

// As dot_u8_i8 for x signed (-128 allowed), y in [-127, 127]: the unsigned
// operand gets |x| and y carries x's sign.
__m256i dot_i8(__m256i x, __m256i y) { return dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

// The 16 bytes at p as 32 nibbles in element order: low nibbles are elements 0..15, high ones 16..31.
__m256i nibbles(const uint8_t* p) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0xF));
}

// 0xFF in byte j where bit j of the little-endian u32 at p is set, else 0.
__m256i bit_mask(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  // Byte j takes byte j / 8 of `bits` (each 128-bit half holds all four), then tests bit j % 8.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)),
                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i select = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// The 32 weights of one block as bytes, in element order, for each type: signed for the
// offset types (q - 8, q - 16) and Q8_0, unsigned for the min types (kSigned below).
__m256i w_q4_0(const uint8_t* b) { return _mm256_sub_epi8(nibbles(b + 2), _mm256_set1_epi8(8)); }
__m256i w_q4_1(const uint8_t* b) { return nibbles(b + 4); }
// Q5_0's q - 16 as int8: the nibble where the high bit is set, the nibble | 0xF0 (= nibble - 16) where it is clear.
__m256i w_q5_0(const uint8_t* b) {
  return _mm256_or_si256(nibbles(b + 6), _mm256_andnot_si256(bit_mask(b + 2), _mm256_set1_epi8(int8_t(0xF0))));
}
__m256i w_q5_1(const uint8_t* b) {
  return _mm256_or_si256(nibbles(b + 8), _mm256_and_si256(bit_mask(b + 4), _mm256_set1_epi8(0x10)));
}
__m256i w_q8_0(const uint8_t* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }

// Σ q_w q_a of one block (8 int32 lanes), `a` the activation's 32 int8.
template <bool kSigned, __m256i (*W)(const uint8_t*)>
__m256i idot(const uint8_t* b, __m256i a) {
  return kSigned ? dot_i8(W(b), a) : dot_u8_i8(W(b), a);
}

// A running sum: vector lanes for the scaled integer sums, a scalar for the min terms.
struct Acc {
  __m256 v = _mm256_setzero_ps();
  float min = 0.0f;
};

// Adds block `blk` · `a`: (d_w * d_a) * Σ q_w q_a in one FMA, plus m * s when kHasMin.
template <bool kHasMin, __m256i (*IntDot)(const uint8_t*, __m256i)>
inline void add_block(const uint8_t* blk, const BlockQ8& a, Acc& acc) {
  const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
  const __m256 products = _mm256_cvtepi32_ps(IntDot(blk, qa));
  acc.v = _mm256_fmadd_ps(_mm256_set1_ps(half_at(blk) * a.d), products, acc.v);
  if constexpr (kHasMin) acc.min += half_at(blk + 2) * a.s;
}

// The row's dot, alternating two accumulators so consecutive blocks' FMAs do not wait on each other.
template <size_t kBytes, bool kHasMin, __m256i (*IntDot)(const uint8_t*, __m256i)>
float dot_q8(size_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const BlockQ8*>(a);
  const size_t blocks = n / kBlock;
  Acc even, odd;
  size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    // The weights a few hundred bytes ahead (prefetches never fault; past the row's end is the
    // next row): the hardware prefetcher alone left decode's weight stream short of bandwidth.
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(wb + (b + 16) * kBytes)), _MM_HINT_T0);
    add_block<kHasMin, IntDot>(wb + b * kBytes, ab[b], even);
    add_block<kHasMin, IntDot>(wb + (b + 1) * kBytes, ab[b + 1], odd);
  }
  if (b < blocks) add_block<kHasMin, IntDot>(wb + b * kBytes, ab[b], even);
  return hsum(_mm256_add_ps(even.v, odd.v)) + (even.min + odd.min);
}

// `count` (≤ kDotN) activation rows at once. The weights are unpacked eight blocks at a time (|q|
// for the sign trick once, the activation's sign per row), then each row runs over them: per row
// the same integer lanes and the same f32 operations in the same order as dot_q8 (a chunk starts
// at an even block, so the even/odd split is dot_q8's), so each result is dot_q8's bit for bit.
template <size_t kBytes, bool kHasMin, bool kSigned, __m256i (*W)(const uint8_t*)>
void dot_n_q8(size_t n, const void* w, const void* const* act, int count, float* out, size_t stride) {
  constexpr size_t kChunk = 8;
  const auto* wb = static_cast<const uint8_t*>(w);
  const size_t blocks = n / kBlock;
  Acc even[kDotN], odd[kDotN];
  for (size_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const size_t nb = std::min(kChunk, blocks - b0);
    __m256i q[kChunk], uq[kChunk];
    float dw[kChunk], mw[kChunk];
    for (size_t j = 0; j < nb; ++j) {
      const uint8_t* blk = wb + (b0 + j) * kBytes;
      q[j] = W(blk);
      uq[j] = kSigned ? _mm256_sign_epi8(q[j], q[j]) : q[j];
      dw[j] = half_at(blk);
      mw[j] = kHasMin ? half_at(blk + 2) : 0.0f;
    }
    for (int t = 0; t < count; ++t) {
      const BlockQ8* ab = static_cast<const BlockQ8*>(act[t]) + b0;
      __m256 v[2] = {even[t].v, odd[t].v};
      float min[2] = {even[t].min, odd[t].min};
#pragma GCC unroll 8
      for (size_t j = 0; j < kChunk; ++j) {
        if (j == nb) break;
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[j].qs));
        const __m256 products = _mm256_cvtepi32_ps(dot_u8_i8(uq[j], kSigned ? _mm256_sign_epi8(qa, q[j]) : qa));
        v[j % 2] = _mm256_fmadd_ps(_mm256_set1_ps(dw[j] * ab[j].d), products, v[j % 2]);
        if constexpr (kHasMin) min[j % 2] += mw[j] * ab[j].s;
      }
      even[t] = {v[0], min[0]}, odd[t] = {v[1], min[1]};
    }
  }
  for (int t = 0; t < count; ++t)
    out[t * stride] = hsum(_mm256_add_ps(even[t].v, odd[t].v)) + (even[t].min + odd[t].min);
}

#if KVTIER_QDOT_VNNI == 1
// [lo | hi] and the upper half, with AVX-512F alone (the f32x8 forms need AVX512DQ).
__m512 join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
__m256 upper(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// AVX-512: dot_n_q8 with two blocks per 512-bit register, the even block of a pair in the low half
// and the odd one in the high half. The accumulator [even | odd] then takes, lane by lane, the
// FMAs that dot_n_q8's two 256-bit accumulators take (a missing odd block of the last pair is
// masked out, not multiplied by zero), so each row is dot_q8's result bit for bit.
template <size_t kBytes, bool kHasMin, bool kSigned, __m256i (*W)(const uint8_t*)>
void dot_n_q8_512(size_t n, const void* w, const void* const* act, int count, float* out, size_t stride) {
  constexpr size_t kChunk = 8, kPairs = kChunk / 2;
  const auto* wb = static_cast<const uint8_t*>(w);
  const size_t blocks = n / kBlock;
  __m512 acc[kDotN];
  float min[kDotN][2] = {};
  for (int t = 0; t < count; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const size_t nb = std::min(kChunk, blocks - b0);
    __m512i uq[kPairs];
    __mmask64 negative[kPairs];
    __m512 dw[kPairs];  // [d_w of the even block x8 | of the odd one x8]
    float mw[kChunk];
    for (size_t p = 0; p < (nb + 1) / 2; ++p) {
      __m256i q[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      float d[2] = {0.0f, 0.0f};
      for (size_t h = 0; h < 2 && 2 * p + h < nb; ++h) {
        const uint8_t* blk = wb + (b0 + 2 * p + h) * kBytes;
        q[h] = W(blk);
        d[h] = half_at(blk);
        mw[2 * p + h] = kHasMin ? half_at(blk + 2) : 0.0f;
      }
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
      uq[p] = kSigned ? _mm512_abs_epi8(both) : both;
      negative[p] = _mm512_movepi8_mask(both);
      dw[p] = join(_mm256_set1_ps(d[0]), _mm256_set1_ps(d[1]));
    }
    // One row's pairs of this chunk; kFull: all kChunk blocks are there (no pair lacks its odd block).
    auto row = [&]<bool kFull>(int t) {
      const BlockQ8* ab = static_cast<const BlockQ8*>(act[t]) + b0;
      __m512 v = acc[t];
#pragma GCC unroll 4
      for (size_t p = 0; p < kPairs; ++p) {
        const size_t j = 2 * p;
        if (!kFull && j >= nb) break;
        const bool odd = kFull || j + 1 < nb;
        const size_t k = odd ? j + 1 : j;  // the odd block, or the even one again where it is missing
        __m512i qa =
            _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[j].qs))),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[k].qs)), 1);
        // The activation carries the weight's sign (|q| is the unsigned operand); where q is 0 the
        // product is 0 whatever the sign.
        if constexpr (kSigned) qa = _mm512_mask_sub_epi8(qa, negative[p], _mm512_setzero_si512(), qa);
        const __m512 products = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), uq[p], qa));
        // d_w * d_a per lane: the very product dot_q8 forms in scalar.
        const __m512 scale = _mm512_mul_ps(dw[p], join(_mm256_set1_ps(ab[j].d), _mm256_set1_ps(ab[k].d)));
        v = _mm512_mask3_fmadd_ps(scale, products, v, odd ? __mmask16(0xFFFF) : __mmask16(0x00FF));
        if constexpr (kHasMin) {
          min[t][0] += mw[j] * ab[j].s;
          if (odd) min[t][1] += mw[j + 1] * ab[j + 1].s;
        }
      }
      acc[t] = v;
    };
    if (nb == kChunk) {
      for (int t = 0; t < count; ++t) row.template operator()<true>(t);
    } else {
      for (int t = 0; t < count; ++t) row.template operator()<false>(t);
    }
  }
  for (int t = 0; t < count; ++t)
    out[t * stride] = hsum(_mm256_add_ps(_mm512_castps512_ps256(acc[t]), upper(acc[t]))) + (min[t][0] + min[t][1]);
}
#endif

// Eight 16-bit floats at p (any alignment) widened to f32.
__m256 widen_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
__m256 widen_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Σ w[i] * a[i] for 16-bit float weights (any alignment) against f32, any n: four
// accumulators over 32 elements a step, then 8 at a time, then one by one.
template <__m256 (*Widen)(const uint16_t*), float (*WidenOne)(uint16_t)>
float dot_f32(size_t n, const void* w, const void* a) {
  const auto* wh = static_cast<const uint16_t*>(w);
  const auto* af = static_cast<const float*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(Widen(wh + i + 8 * k), _mm256_loadu_ps(af + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Widen(wh + i), _mm256_loadu_ps(af + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, wh + i, 2);
    sum += WidenOne(h) * af[i];
  }
  return sum;
}

float f16_one(uint16_t h) { return _cvtsh_ss(h); }
float bf16_one(uint16_t h) { return bf16_to_f32(h); }

// The set's legacy part (each kernel file's fill_<isa> calls this).
void fill(Kernels& k) {
  k.quantize_q8 = quantize_q8;
  k.dot[uint32_t(GgufType::kQ4_0)] = dot_q8<18, false, idot<true, w_q4_0>>;
  k.dot[uint32_t(GgufType::kQ4_1)] = dot_q8<20, true, idot<false, w_q4_1>>;
  k.dot[uint32_t(GgufType::kQ5_0)] = dot_q8<22, false, idot<true, w_q5_0>>;
  k.dot[uint32_t(GgufType::kQ5_1)] = dot_q8<24, true, idot<false, w_q5_1>>;
  k.dot[uint32_t(GgufType::kQ8_0)] = dot_q8<34, false, idot<true, w_q8_0>>;
#if KVTIER_QDOT_VNNI == 1
#define KVTIER_DOT_N dot_n_q8_512
#else
#define KVTIER_DOT_N dot_n_q8
#endif
  k.dot_n[uint32_t(GgufType::kQ4_0)] = KVTIER_DOT_N<18, false, true, w_q4_0>;
  k.dot_n[uint32_t(GgufType::kQ4_1)] = KVTIER_DOT_N<20, true, false, w_q4_1>;
  k.dot_n[uint32_t(GgufType::kQ5_0)] = KVTIER_DOT_N<22, false, true, w_q5_0>;
  k.dot_n[uint32_t(GgufType::kQ5_1)] = KVTIER_DOT_N<24, true, false, w_q5_1>;
  k.dot_n[uint32_t(GgufType::kQ8_0)] = KVTIER_DOT_N<34, false, true, w_q8_0>;
#undef KVTIER_DOT_N
  k.dot[uint32_t(GgufType::kF16)] = dot_f32<widen_f16, f16_one>;
  k.dot[uint32_t(GgufType::kBF16)] = dot_f32<widen_bf16, bf16_one>;
}

}  // namespace
}  // namespace kvtier::engine::qdot::impl::legacy_x86
