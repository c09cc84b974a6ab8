// Internal: the row-level pieces that the forward pass (engine.cc) and KV
// re-positioning (blend.cc) share, so each rule exists once: RoPE applied to
// a row of heads, and one token's K or V row converted between f32 and the
// pool's KV dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/half.h"
#include "model/model_config.h"

namespace kvtier::engine {

// RoPE on `heads` heads of `dim` values; cs holds (cos, sin) per pair
// (rope_cos_sin's layout for one position); `style` says which coordinates pair.
inline void apply_rope(float* x, uint32_t heads, uint32_t dim, const float* cs, RopeStyle style) {
  const uint32_t half = dim / 2;
  // Pair i is (v[stride * i], v[stride * i + offset]).
  const uint32_t stride = style == RopeStyle::kAdjacentPairs ? 2 : 1;
  const uint32_t offset = style == RopeStyle::kAdjacentPairs ? 1 : half;
  for (uint32_t h = 0; h < heads; ++h) {
    float* v = x + size_t(h) * dim;
    for (uint32_t i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      float& a = v[stride * i];
      float& b = v[stride * i + offset];
      const float a0 = a, b0 = b;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
  }
}

// n values from f32 into a KV row of `dt` (round to nearest even).
inline void store_kv_row(DType dt, const float* src, std::byte* dst, uint32_t n) {
  switch (dt) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); break;
    case DType::kF16: f32_to_f16(src, reinterpret_cast<uint16_t*>(dst), n); break;
    case DType::kBF16: f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst), n); break;
  }
}

// n values of a KV row of `dt` as f32 (exact).
inline void load_kv_row(DType dt, const std::byte* src, float* dst, uint32_t n) {
  switch (dt) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); break;
    case DType::kF16: f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n); break;
    case DType::kBF16: bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n); break;
  }
}

}  // namespace kvtier::engine
