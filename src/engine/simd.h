// Internal: a float vector of one register's width (GCC/Clang vector
// extension: 16 lanes on AVX-512 targets, 8 otherwise — one AVX2 register; a
// 16-lane vector there took two, and attention's register tiles spilled) and
// the few vector functions the kernels need. Not a public header.
#pragma once

#include <cstdint>

namespace kvtier::engine::simd {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#else
inline constexpr int kLanes = 8;
#endif
typedef float vfloat __attribute__((vector_size(kLanes * 4)));
typedef int32_t vint __attribute__((vector_size(kLanes * 4)));

// {0, 1, ..., kLanes - 1}
inline vfloat iota() {
  vfloat v;
  for (int i = 0; i < kLanes; ++i) v[i] = float(i);
  return v;
}

inline vfloat load(const float* p) {
  vfloat v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vfloat v) { __builtin_memcpy(p, &v, sizeof v); }
inline vfloat splat(float x) { return vfloat{} + x; }
inline vfloat vmax(vfloat a, vfloat b) { return a > b ? a : b; }
inline vfloat vmin(vfloat a, vfloat b) { return a < b ? a : b; }

inline float hsum(vfloat v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float hmax(vfloat v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// e^x with relative error ~2e-7 on [-87, 88]; lanes below -87 give 0.
inline vfloat vexp(vfloat x) {
  const vfloat lo = splat(-87.0f);
  const vint under = x < lo;
  x = vmin(vmax(x, lo), splat(88.0f));
  // n = round(x / ln 2) through the 1.5 * 2^23 rounding trick.
  const vfloat shifter = splat(12582912.0f);
  vfloat t = x * splat(1.44269504088896341f) + shifter;
  const vint n = (vint)t - (vint)shifter;
  t = t - shifter;
  vfloat r = x - t * splat(0.693145751953125f);
  r = r - t * splat(1.428606765330187e-06f);
  vfloat p = splat(1.0f / 720.0f);
  p = p * r + splat(1.0f / 120.0f);
  p = p * r + splat(1.0f / 24.0f);
  p = p * r + splat(1.0f / 6.0f);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const vfloat scale = (vfloat)((n + 127) << 23);
  const vfloat y = p * scale;
  return under ? vfloat{} : y;
}

}  // namespace kvtier::engine::simd
