// Portable kernels of the KV codecs: the reference the AVX2 kernels must
// match bit for bit. Compiled with -ffp-contract=off (no fused multiply-add
// may change a rounding). Layouts: tiers/kv_codec.h.
#include <cmath>
#include <cstring>

#include "codec/kv_codec_kernels.h"

namespace kvtier::detail {

namespace {

constexpr size_t kBlock = 32;

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// binary32 -> binary16, round to nearest even; NaN stays a (quiet) NaN with
// the top of its payload, as F16C's vcvtps2ph does.
uint16_t f32_to_f16_bits(float f) {
  const uint32_t bits = float_bits(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((mag >> 13) & 0x3FFu));  // NaN
  if (mag >= 0x477FF000u) return uint16_t(sign | 0x7C00u);                          // rounds to Inf (or is Inf)
  if (mag < 0x38800000u) {
    // Subnormal (or zero) half: adding 0.5 puts the float's last mantissa bit at
    // 2^-24, the half's subnormal step, so the FPU's own rounding is the half's.
    const float shifted = bits_float(mag) + 0.5f;
    return uint16_t(sign | (float_bits(shifted) - 0x3F000000u));
  }
  const uint32_t odd = (mag >> 13) & 1u;  // ties to even
  const uint32_t rebased = mag - ((127u - 15u) << 23) + 0xFFFu + odd;
  return uint16_t(sign | (rebased >> 13));
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = float(mantissa) * 0x1p-24f;  // exact
    return bits_float(sign | float_bits(magnitude));
  }
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t f32_to_bf16_bits(float f) { return f32_bits_to_bf16(float_bits(f)); }

// max then min with the operand order of vmaxps/vminps, so that a NaN comes
// out as the AVX2 kernels give it (`lo`).
float clamp(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }

template <DType T>
float load_value(const std::byte* base, size_t i) {
  if constexpr (T == DType::kF32) {
    float v;
    std::memcpy(&v, base + 4 * i, 4);
    return v;
  } else if constexpr (T == DType::kF16) {
    return f16_bits_to_f32(load_u16(base + 2 * i));
  } else {
    return bits_float(bf16_to_f32_bits(load_u16(base + 2 * i)));
  }
}

template <DType T>
void store_value(std::byte* base, size_t i, float v) {
  if constexpr (T == DType::kF32) {
    std::memcpy(base + 4 * i, &v, 4);
  } else if constexpr (T == DType::kF16) {
    store_u16(base + 2 * i, f32_to_f16_bits(clamp(v, -65504.0f, 65504.0f)));  // saturate: see kv_codec.h
  } else {
    store_u16(base + 2 * i, f32_to_bf16_bits(v));
  }
}

bool is_finite(float v) { return (float_bits(v) & 0x7F800000u) != 0x7F800000u; }

// Stores scale d as f16; returns the stored scale (by reference) and its
// reciprocal (0 for a zero scale). False when the scale overflowed f16.
bool store_scale(float d, std::byte* at, float& stored, float& inverse) {
  const uint16_t bits = f32_to_f16_bits(d);
  store_u16(at, bits);
  stored = f16_bits_to_f32(bits);
  inverse = stored != 0.0f ? 1.0f / stored : 0.0f;
  return (bits & 0x7C00u) != 0x7C00u;
}

int quantize(float x, float inverse, float lo, float hi) {
  return int(std::nearbyint(clamp(x * inverse, lo, hi)));  // the current rounding mode: to nearest even
}

// The q4 scale of a group: its value of largest magnitude (positive on a
// tie) over -8; "+ 0" turns the -0 of an all-zero group into +0.
float q4_scale(float largest, float smallest) {
  const float extreme = largest >= -smallest ? largest : smallest;
  return extreme / -8.0f + 0.0f;
}

template <DType T>
bool q8_encode_t(const std::byte* in, size_t blocks, std::byte* scales, std::byte* quants) {
  for (size_t b = 0; b < blocks; ++b) {
    float x[kBlock], amax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < kBlock; ++i) {
      x[i] = load_value<T>(in, b * kBlock + i);
      finite = finite && is_finite(x[i]);
      amax = std::fmax(amax, std::fabs(x[i]));
    }
    float scale, inverse;
    if (!store_scale(amax / 127.0f, scales + 2 * b, scale, inverse) || !finite) return false;
    for (size_t i = 0; i < kBlock; ++i) {
      const int8_t q = int8_t(quantize(x[i], inverse, -127.0f, 127.0f));
      std::memcpy(quants + b * kBlock + i, &q, 1);
    }
  }
  return true;
}

template <DType T>
void q8_decode_t(const std::byte* scales, const std::byte* quants, size_t blocks, std::byte* out) {
  for (size_t b = 0; b < blocks; ++b) {
    const float scale = f16_bits_to_f32(load_u16(scales + 2 * b));
    for (size_t i = 0; i < kBlock; ++i) {
      int8_t q;
      std::memcpy(&q, quants + b * kBlock + i, 1);
      store_value<T>(out, b * kBlock + i, float(q) * scale);
    }
  }
}

// 32 quants in [-8, 7] -> 16 bytes: value j low nibble, j+16 high nibble.
void pack_nibbles(const int* q, std::byte* out) {
  for (size_t j = 0; j < kBlock / 2; ++j) out[j] = std::byte(uint8_t((q[j] + 8) | ((q[j + 16] + 8) << 4)));
}
int nibble(const std::byte* packed, size_t i) {
  const uint8_t byte = uint8_t(packed[i % 16]);
  return int(i < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
}

template <DType T>
bool q4_encode_t(const std::byte* in, size_t blocks, std::byte* scales, std::byte* nibbles) {
  for (size_t b = 0; b < blocks; ++b) {
    float x[kBlock];
    bool finite = true;
    for (size_t i = 0; i < kBlock; ++i) {
      x[i] = load_value<T>(in, b * kBlock + i);
      finite = finite && is_finite(x[i]);
    }
    if (!finite) return false;
    float largest = x[0], smallest = x[0];
    for (float v : x) largest = std::fmax(largest, v), smallest = std::fmin(smallest, v);
    float scale, inverse;
    if (!store_scale(q4_scale(largest, smallest), scales + 2 * b, scale, inverse)) return false;
    int q[kBlock];
    for (size_t i = 0; i < kBlock; ++i) q[i] = quantize(x[i], inverse, -8.0f, 7.0f);
    pack_nibbles(q, nibbles + b * (kBlock / 2));
  }
  return true;
}

template <DType T>
void q4_decode_t(const std::byte* scales, const std::byte* nibbles, size_t blocks, std::byte* out) {
  for (size_t b = 0; b < blocks; ++b) {
    const float scale = f16_bits_to_f32(load_u16(scales + 2 * b));
    for (size_t i = 0; i < kBlock; ++i)
      store_value<T>(out, b * kBlock + i, float(nibble(nibbles + b * (kBlock / 2), i)) * scale);
  }
}

template <DType T>
bool q4_encode_channels_t(const std::byte* const* rows, size_t row_values, std::byte* scales, std::byte* nibbles) {
  for (size_t run = 0; run < row_values / kBlock; ++run) {
    float inverse[kBlock];
    for (size_t c = 0; c < kBlock; ++c) {
      const size_t channel = run * kBlock + c;
      float largest = load_value<T>(rows[0], channel), smallest = largest;
      for (size_t r = 0; r < kBlock; ++r) {
        const float v = load_value<T>(rows[r], channel);
        if (!is_finite(v)) return false;
        largest = std::fmax(largest, v), smallest = std::fmin(smallest, v);
      }
      float scale;
      if (!store_scale(q4_scale(largest, smallest), scales + 2 * channel, scale, inverse[c])) return false;
    }
    for (size_t r = 0; r < kBlock; ++r) {
      int q[kBlock];
      for (size_t c = 0; c < kBlock; ++c)
        q[c] = quantize(load_value<T>(rows[r], run * kBlock + c), inverse[c], -8.0f, 7.0f);
      pack_nibbles(q, nibbles + r * (row_values / 2) + run * (kBlock / 2));
    }
  }
  return true;
}

template <DType T>
void q4_decode_channels_t(const std::byte* scales, const std::byte* nibbles, size_t row_values,
                          std::byte* const* rows) {
  for (size_t r = 0; r < kBlock; ++r) {
    for (size_t channel = 0; channel < row_values; ++channel) {
      const float scale = f16_bits_to_f32(load_u16(scales + 2 * channel));
      const std::byte* packed = nibbles + r * (row_values / 2) + channel / kBlock * (kBlock / 2);
      store_value<T>(rows[r], channel, float(nibble(packed, channel % kBlock)) * scale);
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
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16_bits(in[i]);
}
void f16_to_f32_n(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = f16_bits_to_f32(in[i]);
}

}  // namespace

const KvCodecKernels& scalar_kernels() {
  static const KvCodecKernels kernels =
      make_kernels<q8_encode_op, q8_decode_op, q4_encode_op, q4_decode_op, q4_encode_channels_op,
                   q4_decode_channels_op>("scalar", f32_to_f16_n, f16_to_f32_n);
  return kernels;
}

}  // namespace kvtier::detail
