// AVX2 + F16C kernels of the KV codecs. They compute exactly what the scalar
// kernels (kv_codec_scalar.cc) compute — same operations on the same values,
// to-nearest-even everywhere — eight values at a time; tests compare the
// two bit for bit. Built with the machine's own flags (KVTIER_NATIVE); a
// build without AVX2/F16C gets no native kernels and uses the scalar ones.
#include "codec/kv_codec_kernels.h"

#if defined(__AVX2__) && defined(__F16C__)

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kvtier::detail {

namespace {

constexpr size_t kBlock = 32;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

template <DType T>
constexpr size_t elem_size() {
  return T == DType::kF32 ? 4 : 2;
}

template <DType T>
__m256 load8(const std::byte* p) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

// f32 -> bf16 bits, to nearest even, NaN quieted (as the scalar kernel).
__m128i to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i halves = _mm256_blendv_epi8(rounded, quiet, is_nan);
  const __m256i packed = _mm256_packus_epi32(halves, halves);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// Saturate: clamp f16 output to +-65504 (kv_codec.h); callers skip it when
// no value of the scale's group can leave the f16 range.
template <DType T, bool Saturate>
void store8(std::byte* p, __m256 v) {
  if constexpr (T == DType::kF32) {
    _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
  } else if constexpr (T == DType::kF16) {
    if constexpr (Saturate) v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-65504.0f)), _mm256_set1_ps(65504.0f));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, kNearest));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_bf16(v));
  }
}

__m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
// All-ones lanes where v is NaN or +-Inf.
__m256 not_finite8(__m256 v) { return _mm256_cmp_ps(abs8(v), _mm256_set1_ps(kInf), _CMP_NLT_UQ); }

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// One f16 scale as the scalar kernel stores it: false on overflow.
bool store_scale(float d, std::byte* at, float& stored, float& inverse) {
  const uint16_t bits = _cvtss_sh(d, kNearest);
  std::memcpy(at, &bits, 2);
  stored = _cvtsh_ss(bits);
  inverse = stored != 0.0f ? 1.0f / stored : 0.0f;
  return (bits & 0x7C00u) != 0x7C00u;
}

float scale_at(const std::byte* at) {
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return _cvtsh_ss(bits);
}

// Four vectors of int32 -> 32 bytes in order (saturating; values fit).
__m256i pack_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

__m256i quantize8(__m256 x, __m256 inverse, float lo, float hi) {
  const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, inverse), _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
  return _mm256_cvtps_epi32(v);  // MXCSR rounding: to nearest even
}

// 32 q4 quants (int32, four vectors, already biased by +8) -> 16 bytes of nibbles.
__m128i pack_nibbles(const __m256i* q) {
  const __m256i bytes = pack_bytes(q[0], q[1], q[2], q[3]);
  const __m128i low = _mm256_castsi256_si128(bytes), high = _mm256_extracti128_si256(bytes, 1);
  return _mm_or_si128(low, _mm_slli_epi16(high, 4));
}

// 16 bytes of nibbles -> 32 int8 in [-8, 7], value order.
__m256i unpack_nibbles(const std::byte* p) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_and_si128(packed, mask), high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
  return _mm256_sub_epi8(_mm256_set_m128i(high, low), _mm256_set1_epi8(8));
}

// Quants (32 int8) times scales -> 32 output values.
template <DType T, bool Saturate>
void dequantize32(__m256i quants, const __m256* scales, std::byte* out) {
  const __m128i halves[2] = {_mm256_castsi256_si128(quants), _mm256_extracti128_si256(quants, 1)};
  for (int k = 0; k < 4; ++k) {
    const __m128i eight = k % 2 == 0 ? halves[k / 2] : _mm_srli_si128(halves[k / 2], 8);
    const __m256 values = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight));
    store8<T, Saturate>(out + 8 * k * elem_size<T>(), _mm256_mul_ps(values, scales[k]));
  }
}

// Can q * scale (|q| <= q_max) leave the f16 range? True for NaN too.
bool may_overflow_f16(float scale, float q_max) { return !(std::fabs(scale) * q_max <= 65504.0f); }
bool may_overflow_f16(const __m256* scales, float q_max) {
  __m256 any = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k)
    any = _mm256_or_ps(any, _mm256_cmp_ps(_mm256_mul_ps(abs8(scales[k]), _mm256_set1_ps(q_max)),
                                          _mm256_set1_ps(65504.0f), _CMP_NLE_UQ));
  return _mm256_movemask_ps(any) != 0;
}

// Lane i of the result = op over the 8 lanes of v[i] (max and min only: exact in any order).
template <class Op>
__m256 reduce8x8(const __m256* v, Op op) {
  __m256 pairs[4], quads[2];
  for (int i = 0; i < 4; ++i)
    pairs[i] = op(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    quads[i] = op(_mm256_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                  _mm256_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return op(_mm256_permute2f128_ps(quads[0], quads[1], 0x20), _mm256_permute2f128_ps(quads[0], quads[1], 0x31));
}
const auto max8 = [](__m256 a, __m256 b) { return _mm256_max_ps(a, b); };
const auto min8 = [](__m256 a, __m256 b) { return _mm256_min_ps(a, b); };

// Eight scales at once, as store_scale does one: stores them (f16) at `at`,
// writes the reciprocals (0 for a zero scale); false on an f16 overflow.
bool store_scales8(__m256 d, std::byte* at, float* inverse) {
  const __m128i bits = _mm256_cvtps_ph(d, kNearest);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(at), bits);
  const __m256 stored = _mm256_cvtph_ps(bits);
  const __m256 zero = _mm256_cmp_ps(stored, _mm256_setzero_ps(), _CMP_EQ_OQ);
  _mm256_storeu_ps(inverse, _mm256_andnot_ps(zero, _mm256_div_ps(_mm256_set1_ps(1.0f), stored)));
  return _mm256_movemask_ps(_mm256_cmp_ps(abs8(stored), _mm256_set1_ps(kInf), _CMP_EQ_OQ)) == 0;
}

// One q8 block with its scale's reciprocal known: quantize and store 32 int8.
template <DType T>
void q8_quantize_block(const std::byte* in, float inverse, std::byte* quants) {
  const __m256 inv = _mm256_set1_ps(inverse);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = quantize8(load8<T>(in + 8 * k * elem_size<T>()), inv, -127.0f, 127.0f);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(quants), pack_bytes(q[0], q[1], q[2], q[3]));
}

// amax of a block of 32 values; ORs NaN/Inf lanes into `bad`.
template <DType T>
__m256 block_amax(const std::byte* in, __m256& bad) {
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    const __m256 x = load8<T>(in + 8 * k * elem_size<T>());
    bad = _mm256_or_ps(bad, not_finite8(x));
    amax = _mm256_max_ps(amax, abs8(x));
  }
  return amax;
}

template <DType T>
bool q8_encode_t(const std::byte* in, size_t blocks, std::byte* scales, std::byte* quants) {
  constexpr size_t kBlockBytes = kBlock * elem_size<T>();
  __m256 bad = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 8 <= blocks; b += 8) {  // eight scales per vector division
    __m256 amax[8];
    for (size_t i = 0; i < 8; ++i) amax[i] = block_amax<T>(in + (b + i) * kBlockBytes, bad);
    float inverse[8];
    const __m256 d = _mm256_div_ps(reduce8x8(amax, max8), _mm256_set1_ps(127.0f));
    if (!store_scales8(d, scales + 2 * b, inverse)) return false;
    for (size_t i = 0; i < 8; ++i) q8_quantize_block<T>(in + (b + i) * kBlockBytes, inverse[i], quants + (b + i) * kBlock);
  }
  for (; b < blocks; ++b) {
    float scale, inverse;
    if (!store_scale(hmax(block_amax<T>(in + b * kBlockBytes, bad)) / 127.0f, scales + 2 * b, scale, inverse))
      return false;
    q8_quantize_block<T>(in + b * kBlockBytes, inverse, quants + b * kBlock);
  }
  return _mm256_movemask_ps(bad) == 0;
}

template <DType T>
void q8_decode_t(const std::byte* scales, const std::byte* quants, size_t blocks, std::byte* out) {
  for (size_t b = 0; b < blocks; ++b) {
    const float scale = scale_at(scales + 2 * b);
    const __m256 four[4] = {_mm256_set1_ps(scale), _mm256_set1_ps(scale), _mm256_set1_ps(scale), _mm256_set1_ps(scale)};
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + b * kBlock));
    std::byte* dst = out + b * kBlock * elem_size<T>();
    if (T == DType::kF16 && may_overflow_f16(scale, 128.0f)) {  // a stored quant may be -128 (a damaged entry)
      dequantize32<T, true>(q, four, dst);
    } else {
      dequantize32<T, false>(q, four, dst);
    }
  }
}

// The q4 scale of a group, from its largest and smallest values (vectors).
__m256 q4_scale8(__m256 largest, __m256 smallest) {
  const __m256 negated = _mm256_xor_ps(smallest, _mm256_set1_ps(-0.0f));
  const __m256 extreme = _mm256_blendv_ps(smallest, largest, _mm256_cmp_ps(largest, negated, _CMP_GE_OQ));
  return _mm256_add_ps(_mm256_div_ps(extreme, _mm256_set1_ps(-8.0f)), _mm256_setzero_ps());
}

template <DType T>
void q4_quantize_block(const std::byte* in, float inverse, std::byte* nibbles) {
  const __m256 inv = _mm256_set1_ps(inverse);
  __m256i q[4];
  for (int k = 0; k < 4; ++k)
    q[k] = _mm256_add_epi32(quantize8(load8<T>(in + 8 * k * elem_size<T>()), inv, -8.0f, 7.0f), _mm256_set1_epi32(8));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(nibbles), pack_nibbles(q));
}

// Largest and smallest value of a block of 32 (lane-wise); ORs NaN/Inf lanes into `bad`.
template <DType T>
void block_range(const std::byte* in, __m256& largest, __m256& smallest, __m256& bad) {
  largest = smallest = load8<T>(in);
  for (int k = 0; k < 4; ++k) {
    const __m256 x = load8<T>(in + 8 * k * elem_size<T>());
    bad = _mm256_or_ps(bad, not_finite8(x));
    largest = _mm256_max_ps(largest, x), smallest = _mm256_min_ps(smallest, x);
  }
}

template <DType T>
bool q4_encode_t(const std::byte* in, size_t blocks, std::byte* scales, std::byte* nibbles) {
  constexpr size_t kBlockBytes = kBlock * elem_size<T>();
  __m256 bad = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 8 <= blocks; b += 8) {
    __m256 largest[8], smallest[8];
    for (size_t i = 0; i < 8; ++i) block_range<T>(in + (b + i) * kBlockBytes, largest[i], smallest[i], bad);
    float inverse[8];
    if (!store_scales8(q4_scale8(reduce8x8(largest, max8), reduce8x8(smallest, min8)), scales + 2 * b, inverse))
      return false;
    for (size_t i = 0; i < 8; ++i)
      q4_quantize_block<T>(in + (b + i) * kBlockBytes, inverse[i], nibbles + (b + i) * (kBlock / 2));
  }
  for (; b < blocks; ++b) {
    __m256 largest, smallest;
    block_range<T>(in + b * kBlockBytes, largest, smallest, bad);
    const float d = _mm256_cvtss_f32(q4_scale8(_mm256_set1_ps(hmax(largest)), _mm256_set1_ps(hmin(smallest))));
    float scale, inverse;
    if (!store_scale(d, scales + 2 * b, scale, inverse)) return false;
    q4_quantize_block<T>(in + b * kBlockBytes, inverse, nibbles + b * (kBlock / 2));
  }
  return _mm256_movemask_ps(bad) == 0;
}

template <DType T>
void q4_decode_t(const std::byte* scales, const std::byte* nibbles, size_t blocks, std::byte* out) {
  for (size_t b = 0; b < blocks; ++b) {
    const float scale = scale_at(scales + 2 * b);
    const __m256 four[4] = {_mm256_set1_ps(scale), _mm256_set1_ps(scale), _mm256_set1_ps(scale), _mm256_set1_ps(scale)};
    const __m256i q = unpack_nibbles(nibbles + b * (kBlock / 2));
    std::byte* dst = out + b * kBlock * elem_size<T>();
    if (T == DType::kF16 && may_overflow_f16(scale, 8.0f)) {
      dequantize32<T, true>(q, four, dst);
    } else {
      dequantize32<T, false>(q, four, dst);
    }
  }
}

// Per-channel scales of 32 channels over 32 rows; false on overflow.
template <DType T>
bool channel_scales(const std::byte* const* rows, size_t channel0, std::byte* scales, __m256* inverse, __m256& bad) {
  for (int k = 0; k < 4; ++k) {
    const size_t at = (channel0 + 8 * k) * elem_size<T>();
    __m256 largest = load8<T>(rows[0] + at), smallest = largest;
    for (size_t r = 0; r < kBlock; ++r) {
      const __m256 v = load8<T>(rows[r] + at);
      bad = _mm256_or_ps(bad, not_finite8(v));
      largest = _mm256_max_ps(largest, v), smallest = _mm256_min_ps(smallest, v);
    }
    const __m128i bits = _mm256_cvtps_ph(q4_scale8(largest, smallest), kNearest);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scales + 2 * (channel0 + 8 * k)), bits);
    const __m256 stored = _mm256_cvtph_ps(bits);
    const __m256 zero = _mm256_cmp_ps(stored, _mm256_setzero_ps(), _CMP_EQ_OQ);
    inverse[k] = _mm256_andnot_ps(zero, _mm256_div_ps(_mm256_set1_ps(1.0f), stored));
    if (_mm256_movemask_ps(_mm256_cmp_ps(abs8(stored), _mm256_set1_ps(kInf), _CMP_EQ_OQ)) != 0) return false;
  }
  return true;
}

template <DType T>
bool q4_encode_channels_t(const std::byte* const* rows, size_t row_values, std::byte* scales, std::byte* nibbles) {
  __m256 bad = _mm256_setzero_ps();
  for (size_t run = 0; run < row_values / kBlock; ++run) {
    __m256 inverse[4];
    if (!channel_scales<T>(rows, run * kBlock, scales, inverse, bad)) return false;
    for (size_t r = 0; r < kBlock; ++r) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 x = load8<T>(rows[r] + (run * kBlock + 8 * k) * elem_size<T>());
        q[k] = _mm256_add_epi32(quantize8(x, inverse[k], -8.0f, 7.0f), _mm256_set1_epi32(8));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(nibbles + r * (row_values / 2) + run * (kBlock / 2)),
                       pack_nibbles(q));
    }
  }
  return _mm256_movemask_ps(bad) == 0;
}

template <DType T>
void q4_decode_channels_t(const std::byte* scales, const std::byte* nibbles, size_t row_values,
                          std::byte* const* rows) {
  for (size_t run = 0; run < row_values / kBlock; ++run) {
    __m256 scale[4];
    for (int k = 0; k < 4; ++k)
      scale[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 2 * (run * kBlock + 8 * k))));
    const bool saturate = T == DType::kF16 && may_overflow_f16(scale, 8.0f);
    for (size_t r = 0; r < kBlock; ++r) {
      const __m256i q = unpack_nibbles(nibbles + r * (row_values / 2) + run * (kBlock / 2));
      if (saturate) {
        dequantize32<T, true>(q, scale, rows[r] + run * kBlock * elem_size<T>());
      } else {
        dequantize32<T, false>(q, scale, rows[r] + run * kBlock * elem_size<T>());
      }
    }
  }
}

KVTIER_KERNEL_OP(q8_encode)
KVTIER_KERNEL_OP(q8_decode)
KVTIER_KERNEL_OP(q4_encode)
KVTIER_KERNEL_OP(q4_decode)
KVTIER_KERNEL_OP(q4_encode_channels)
KVTIER_KERNEL_OP(q4_decode_channels)
#undef KVTIER_KERNEL_OP

void f32_to_f16_n(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kNearest));
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], kNearest);
}
void f16_to_f32_n(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

}  // namespace

const KvCodecKernels* native_kernels_unchecked() {
  static const KvCodecKernels kernels =
      make_kernels<q8_encode_op, q8_decode_op, q4_encode_op, q4_decode_op, q4_encode_channels_op,
                   q4_decode_channels_op>("avx2", f32_to_f16_n, f16_to_f32_n);
  return &kernels;
}

}  // namespace kvtier::detail

#else  // no AVX2/F16C in this build

namespace kvtier::detail {
const KvCodecKernels* native_kernels_unchecked() { return nullptr; }
}  // namespace kvtier::detail

#endif
