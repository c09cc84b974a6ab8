// Internal: float vectors (GCC/Clang vector extension) and the few vector
// functions the kernels need, generic over the width: vfloat8 (one AVX2
// register) and vfloat16 (one AVX-512 register). `vfloat` is this file's
// default width: 16 lanes where the file is compiled for AVX-512, 8 otherwise
// (a 16-lane vector on AVX2 takes two registers, and attention's register
// tiles spilled). The functions are forced inline: compiled into a caller
// inside an AVX-512 region (engine/isa_region.h) they use its registers, and
// no out-of-line copy ever passes a vector between code built for two ISAs.
// Not a public header.
#pragma once

#include <cstdint>

namespace kvtier::engine::simd {

typedef float vfloat8 __attribute__((vector_size(32)));
typedef float vfloat16 __attribute__((vector_size(64)));
#if defined(__AVX512F__)
typedef vfloat16 vfloat;
#else
typedef vfloat8 vfloat;
#endif
template <class V>
inline constexpr int lanes = int(sizeof(V) / sizeof(float));
inline constexpr int kLanes = lanes<vfloat>;
// The int32 vector of V's width (what comparing two V gives).
template <class V>
using vint_of = decltype(V{} < V{});
typedef vint_of<vfloat> vint;

#define KVTIER_SIMD_INLINE [[gnu::always_inline]] inline

// {0, 1, ..., lanes - 1}
template <class V = vfloat>
KVTIER_SIMD_INLINE V iota() {
  V v;
  for (int i = 0; i < lanes<V>; ++i) v[i] = float(i);
  return v;
}

template <class V = vfloat>
KVTIER_SIMD_INLINE V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
KVTIER_SIMD_INLINE void store(float* p, V v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <class V = vfloat>
KVTIER_SIMD_INLINE V splat(float x) {
  return V{} + x;
}
template <class V>
KVTIER_SIMD_INLINE V vmax(V a, V b) {
  return a > b ? a : b;
}
template <class V>
KVTIER_SIMD_INLINE V vmin(V a, V b) {
  return a < b ? a : b;
}

template <class V>
KVTIER_SIMD_INLINE float hsum(V v) {
  float s = 0.0f;
  for (int i = 0; i < lanes<V>; ++i) s += v[i];
  return s;
}
template <class V>
KVTIER_SIMD_INLINE float hmax(V v) {
  float m = v[0];
  for (int i = 1; i < lanes<V>; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// e^x with relative error ~2e-7 on [-87, 88]; lanes below -87 give 0.
template <class V>
KVTIER_SIMD_INLINE V vexp(V x) {
  using VI = vint_of<V>;
  const V lo = splat<V>(-87.0f);
  const VI under = x < lo;
  x = vmin(vmax(x, lo), splat<V>(88.0f));
  // n = round(x / ln 2) through the 1.5 * 2^23 rounding trick.
  const V shifter = splat<V>(12582912.0f);
  V t = x * splat<V>(1.44269504088896341f) + shifter;
  const VI n = (VI)t - (VI)shifter;
  t = t - shifter;
  V r = x - t * splat<V>(0.693145751953125f);
  r = r - t * splat<V>(1.428606765330187e-06f);
  V p = splat<V>(1.0f / 720.0f);
  p = p * r + splat<V>(1.0f / 120.0f);
  p = p * r + splat<V>(1.0f / 24.0f);
  p = p * r + splat<V>(1.0f / 6.0f);
  p = p * r + splat<V>(0.5f);
  p = p * r + splat<V>(1.0f);
  p = p * r + splat<V>(1.0f);
  const V scale = (V)((n + 127) << 23);
  const V y = p * scale;
  return under ? V{} : y;
}

#undef KVTIER_SIMD_INLINE

}  // namespace kvtier::engine::simd
