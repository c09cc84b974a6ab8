// Internal: the integer dot primitives that differ between the x86 kernel
// sets built from one source (engine/qdot_legacy_x86.h, qdot_kquant_x86.h).
// The including kernel file defines KVTIER_QDOT_VNNI and, for a VNNI set,
// includes this inside an ISA region (engine/isa_region.h) naming the instructions:
//   0  AVX2: maddubs (u8 × s8 → int16 pair sums) then madd (→ int32).
//   1  AVX-512 VNNI (with AVX512VL, on 256-bit registers): dpbusd / dpwssd.
//   2  AVX-VNNI (the same instructions, VEX-encoded, on CPUs without AVX-512).
// Every primitive gives the same int32 lanes whichever the variant (the
// callers keep maddubs' int16 pair sums below 2^15, so it never saturates), so
// the sets agree bit for bit. Internal linkage only: a copy compiled for one
// ISA is never shared with a file compiled for another.
#pragma once

#include <immintrin.h>

#ifndef KVTIER_QDOT_VNNI
#error "a kernel file defines KVTIER_QDOT_VNNI (0, 1 or 2) before including the x86 kernels"
#endif

namespace kvtier::engine::qdot::impl::x86 {
namespace {

// 8 int32 lanes, lane i = Σ u[4i + k] * s[4i + k] over k < 4: u unsigned bytes, s signed.
[[gnu::always_inline]] inline __m256i dot_u8_i8(__m256i u, __m256i s) {
#if KVTIER_QDOT_VNNI == 1
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif KVTIER_QDOT_VNNI == 2
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// acc + madd(a, b): int32 lane i += a[2i] * b[2i] + a[2i + 1] * b[2i + 1] (int16 operands).
[[gnu::always_inline]] inline __m256i add_madd_i16(__m256i acc, __m256i a, __m256i b) {
#if KVTIER_QDOT_VNNI == 1
  return _mm256_dpwssd_epi32(acc, a, b);
#elif KVTIER_QDOT_VNNI == 2
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

}  // namespace
}  // namespace kvtier::engine::qdot::impl::x86
