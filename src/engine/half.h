// Bit-exact conversions between f32 and the 16-bit float formats used for
// weights (GGUF F16/BF16) and for the KV cache (f16/bf16 pages). Scalar
// versions are portable; the span versions use F16C when the compiler
// targets it. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace kvtier::engine {

inline float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

// Bulk conversions (vectorised where the target allows).
void f16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_f16(const float* in, uint16_t* out, size_t n);
void bf16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_bf16(const float* in, uint16_t* out, size_t n);

}  // namespace kvtier::engine
