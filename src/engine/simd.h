// Internal: a 16-lane float vector (GCC/Clang vector extension; one AVX-512
// register, two AVX2 registers or four SSE registers depending on the target)
// and the few vector functions the kernels need. Not a public header.
#pragma once

#include <cstdint>

namespace kvtier::engine::simd {

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

inline constexpr int kLanes = 16;

inline v16f load(const float* p) {
  v16f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, v16f v) { __builtin_memcpy(p, &v, sizeof v); }
inline v16f splat(float x) { return v16f{} + x; }
inline v16f vmax(v16f a, v16f b) { return a > b ? a : b; }
inline v16f vmin(v16f a, v16f b) { return a < b ? a : b; }

inline float hsum(v16f v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float hmax(v16f v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// e^x with relative error ~2e-7 on [-87, 88]; lanes below -87 give 0.
inline v16f vexp(v16f x) {
  const v16f lo = splat(-87.0f);
  const v16i under = x < lo;
  x = vmin(vmax(x, lo), splat(88.0f));
  // n = round(x / ln 2) through the 1.5 * 2^23 rounding trick.
  const v16f shifter = splat(12582912.0f);
  v16f t = x * splat(1.44269504088896341f) + shifter;
  const v16i n = (v16i)t - (v16i)shifter;
  t = t - shifter;
  v16f r = x - t * splat(0.693145751953125f);
  r = r - t * splat(1.428606765330187e-06f);
  v16f p = splat(1.0f / 720.0f);
  p = p * r + splat(1.0f / 120.0f);
  p = p * r + splat(1.0f / 24.0f);
  p = p * r + splat(1.0f / 6.0f);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const v16f scale = (v16f)((n + 127) << 23);
  const v16f y = p * scale;
  return under ? v16f{} : y;
}

}  // namespace kvtier::engine::simd
