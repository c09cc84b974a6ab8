#include "engine/half.h"

#include <immintrin.h>

#include "engine/qdot.h"

namespace kvtier::engine {

namespace {

// The row conversions with F16C, chosen at run time (the build does not assume the instruction
// set). Both round to nearest even, so for every non-NaN value they give the scalar functions'
// bits (NaN stays NaN; only its payload may differ).
[[gnu::target("avx,f16c")]] void f16_to_f32_f16c(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
}

[[gnu::target("avx,f16c")]] void f32_to_f16_f16c(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
}

bool have_f16c() {
  static const bool has = qdot::cpu_has(qdot::Isa::kAvx2);  // AVX2 implies AVX and F16C there
  return has;
}

}  // namespace

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_to_f32(sign);
  // Subnormal: normalise.
  int e = -1;
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400u) == 0);
  return bits_to_f32(sign | uint32_t(112 - e) << 23 | ((mant & 0x3ffu) << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t b = f32_to_bits(f);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // nan
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                 // normal f16
    uint32_t r = abs - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return uint16_t(sign | (r >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
  // Subnormal f16: shift the full mantissa with round to nearest even.
  const uint32_t e = abs >> 23;
  const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24 → result = m >> shift
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  if (have_f16c()) f16_to_f32_f16c(in, out, i = n / 8 * 8);
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

void f32_to_f16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  if (have_f16c()) f32_to_f16_f16c(in, out, i = n / 8 * 8);
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

}  // namespace kvtier::engine
