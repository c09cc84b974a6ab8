// Block dequantisers. Each decode_* turns one block into its elements; the
// layouts follow ggml's block_* structs (all fields little-endian, scales as
// f16). Written from the ggml/GGUF format definitions.
#include "engine/quant.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <iterator>
#include <cstring>
#include <string>

#include "engine/half.h"

namespace kvtier::engine::quant {
namespace {

constexpr uint32_t kLegacyBlock = 32;  // QK4_0 .. QK8_0
constexpr uint32_t kSuperBlock = 256;  // QK_K

constexpr std::array<TypeInfo, 13> kTypes = {{
    {GgufType::kF32, "F32", 1, 4},
    {GgufType::kF16, "F16", 1, 2},
    {GgufType::kQ4_0, "Q4_0", kLegacyBlock, 2 + 16},
    {GgufType::kQ4_1, "Q4_1", kLegacyBlock, 2 + 2 + 16},
    {GgufType::kQ5_0, "Q5_0", kLegacyBlock, 2 + 4 + 16},
    {GgufType::kQ5_1, "Q5_1", kLegacyBlock, 2 + 2 + 4 + 16},
    {GgufType::kQ8_0, "Q8_0", kLegacyBlock, 2 + 32},
    {GgufType::kQ2_K, "Q2_K", kSuperBlock, 16 + 64 + 2 + 2},
    {GgufType::kQ3_K, "Q3_K", kSuperBlock, 32 + 64 + 12 + 2},
    {GgufType::kQ4_K, "Q4_K", kSuperBlock, 2 + 2 + 12 + 128},
    {GgufType::kQ5_K, "Q5_K", kSuperBlock, 2 + 2 + 12 + 32 + 128},
    {GgufType::kQ6_K, "Q6_K", kSuperBlock, 128 + 64 + 16 + 2},
    {GgufType::kBF16, "BF16", 1, 2},
}};

// The f16 stored at `p` (any alignment), widened exactly.
float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Q4_0: d, then 16 bytes; element j is the low nibble of byte j, element j+16 the high one; value (q - 8) * d.
void decode_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = float(int(qs[j] & 0xF) - 8) * d;
    y[j + 16] = float(int(qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: d, m, then nibbles as Q4_0; value q * d + m.
void decode_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = float(qs[j] & 0xF) * d + m;
    y[j + 16] = float(qs[j] >> 4) * d + m;
  }
}

// The 5-bit values of a Q5 block: nibbles as Q4_0, bit j of the u32 `high_bits` is bit 4 of element j.
void five_bit_values(const uint8_t* high_bits, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, high_bits, 4);
  for (uint32_t j = 0; j < 16; ++j) {
    q[j] = int((qs[j] & 0xF) | (((qh >> j) & 1u) << 4));
    q[j + 16] = int((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}

// Q5_0: d, 4 bytes of high bits, 16 bytes of nibbles; value (q - 16) * d.
void decode_q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  int q[kLegacyBlock];
  five_bit_values(b + 2, b + 6, q);
  for (uint32_t j = 0; j < kLegacyBlock; ++j) y[j] = float(q[j] - 16) * d;
}

// Q5_1: d, m, high bits, nibbles; value q * d + m.
void decode_q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  int q[kLegacyBlock];
  five_bit_values(b + 4, b + 8, q);
  for (uint32_t j = 0; j < kLegacyBlock; ++j) y[j] = float(q[j]) * d + m;
}

// Q8_0: d, then 32 int8; value q * d.
void decode_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (uint32_t j = 0; j < kLegacyBlock; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

// Q2_K: 16 bytes of scales (low nibble: scale, high nibble: min, per 16
// elements), 64 bytes of 2-bit values, d, dmin. Element 128h + 32s + l is bits
// 2s..2s+1 of byte 32h + l; value (d * scale) * q - (dmin * min).
void decode_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  for (uint32_t e = 0; e < kSuperBlock; ++e) {
    const uint32_t half = e / 128, shift = 2 * ((e % 128) / 32), l = e % 32;
    const uint8_t sc = scales[e / 16];
    const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
    y[e] = dl * float((qs[32 * half + l] >> shift) & 3) - ml;
  }
}

// The sixteen 6-bit signed scales of a Q3_K block, packed in 12 bytes: the
// low 4 bits of scale j in byte j % 8 (nibble j / 8), the high 2 bits in byte
// 8 + j % 4 (bits 2 (j / 4)); the stored value is offset by 32.
void q3_k_scales(const uint8_t* packed, int* scales) {
  for (uint32_t j = 0; j < 16; ++j) {
    const int low = (packed[j % 8] >> (4 * (j / 8))) & 0xF;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = (low | (high << 4)) - 32;
  }
}

// Q3_K: 32 bytes of high-bit masks, 64 bytes of 2-bit values, 12 bytes of
// scales, d. Element 128h + 32s + l: low bits as Q2_K, high bit is bit 4h + s
// of mask byte l, and a clear high bit subtracts 4; value (d * scale) * q.
void decode_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const float d = half_at(b + 108);
  int scales[16];
  q3_k_scales(b + 96, scales);
  for (uint32_t e = 0; e < kSuperBlock; ++e) {
    const uint32_t half = e / 128, s = (e % 128) / 32, l = e % 32;
    const int low = (qs[32 * half + l] >> (2 * s)) & 3;
    const int high_set = (hmask[l] >> (4 * half + s)) & 1;
    const float dl = d * float(scales[e / 16]);
    y[e] = dl * float(low - (high_set ? 0 : 4));
  }
}

// Q4_K: d, dmin, 12 bytes of scales/mins, 128 bytes of nibbles. Sub-block j
// (32 elements) is nibble j % 2 of bytes 32 (j / 2) ..; value (d * scale) * q - (dmin * min).
void decode_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* qs = b + 16;
  uint8_t scales[8], mins[8];
  unpack_k4_scales(b + 4, scales, mins);
  for (uint32_t j = 0; j < 8; ++j) {
    const float dl = d * float(scales[j]), ml = dmin * float(mins[j]);
    for (uint32_t l = 0; l < 32; ++l) y[32 * j + l] = dl * float((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) - ml;
  }
}

// Q5_K: as Q4_K with 32 bytes of high bits after the scales: bit j of byte l
// is bit 4 of element 32j + l.
void decode_q5_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  uint8_t scales[8], mins[8];
  unpack_k4_scales(b + 4, scales, mins);
  for (uint32_t j = 0; j < 8; ++j) {
    const float dl = d * float(scales[j]), ml = dmin * float(mins[j]);
    for (uint32_t l = 0; l < 32; ++l) {
      const int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | (((qh[l] >> j) & 1) << 4);
      y[32 * j + l] = dl * float(q) - ml;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8
// scales, d. Element 128h + 32s + l: low nibble of byte 64h + 32 (s % 2) + l
// (high nibble when s >= 2), high bits 2s of byte 32h + l; value (d * scale) * (q - 32).
void decode_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (uint32_t e = 0; e < kSuperBlock; ++e) {
    const uint32_t half = e / 128, s = (e % 128) / 32, l = e % 32;
    const int low = (ql[64 * half + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0xF;
    const int high = (qh[32 * half + l] >> (2 * s)) & 3;
    y[e] = (d * float(scales[e / 16])) * float((low | (high << 4)) - 32);
  }
}

// F16 or BF16 elements at `src` (any alignment) to f32, through the vectorised bulk conversions.
void widen_16bit(bool is_f16, const uint8_t* src, size_t n, float* out) {
  uint16_t chunk[1024];
  for (size_t done = 0; done < n; done += std::size(chunk)) {
    const size_t count = std::min(std::size(chunk), n - done);
    std::memcpy(chunk, src + 2 * done, 2 * count);
    if (is_f16) f16_to_f32(chunk, out + done, count);
    else bf16_to_f32(chunk, out + done, count);
  }
}

using BlockDecoder = void (*)(const uint8_t*, float*);

BlockDecoder block_decoder(GgufType type) {
  switch (type) {
    case GgufType::kQ4_0: return decode_q4_0;
    case GgufType::kQ4_1: return decode_q4_1;
    case GgufType::kQ5_0: return decode_q5_0;
    case GgufType::kQ5_1: return decode_q5_1;
    case GgufType::kQ8_0: return decode_q8_0;
    case GgufType::kQ2_K: return decode_q2_k;
    case GgufType::kQ3_K: return decode_q3_k;
    case GgufType::kQ4_K: return decode_q4_k;
    case GgufType::kQ5_K: return decode_q5_k;
    case GgufType::kQ6_K: return decode_q6_k;
    default: return nullptr;
  }
}

}  // namespace

std::span<const TypeInfo> all_types() { return kTypes; }

const TypeInfo* find_type(uint32_t code) {
  for (const TypeInfo& t : kTypes)
    if (uint32_t(t.type) == code) return &t;
  return nullptr;
}

const TypeInfo& info(GgufType type) { return *find_type(uint32_t(type)); }

Status dequantize_row(GgufType type, std::span<const std::byte> bytes, size_t n, float* out) {
  const TypeInfo* t = find_type(uint32_t(type));
  if (!t) return Status::InvalidArgument("dequantize_row: unknown type " + std::to_string(uint32_t(type)));
  if (n % t->block_elems != 0)
    return Status::InvalidArgument("dequantize_row: " + std::string(t->name) + " rows hold multiples of " +
                                   std::to_string(t->block_elems) + " elements, not " + std::to_string(n));
  if (bytes.size() < row_bytes(*t, n))
    return Status::InvalidArgument("dequantize_row: " + std::to_string(n) + " " + std::string(t->name) + " elements need " +
                                   std::to_string(row_bytes(*t, n)) + " bytes, got " + std::to_string(bytes.size()));
  const auto* src = reinterpret_cast<const uint8_t*>(bytes.data());
  switch (type) {
    case GgufType::kF32: std::memcpy(out, src, n * 4); return Status::Ok();
    case GgufType::kF16:
    case GgufType::kBF16: widen_16bit(type == GgufType::kF16, src, n, out); return Status::Ok();
    default: break;
  }
  const BlockDecoder decode = block_decoder(type);
  for (size_t blk = 0; blk < n / t->block_elems; ++blk) decode(src + blk * t->block_bytes, out + blk * t->block_elems);
  return Status::Ok();
}


namespace {

// Byte offsets of the f16 scale fields of one block of `type` (ggml's block layouts).
std::span<const uint32_t> scale_offsets(GgufType type) {
  static constexpr uint32_t d0[] = {0}, dm[] = {0, 2}, q2k[] = {80, 82}, q3k[] = {108}, q6k[] = {208};
  switch (type) {
    case GgufType::kQ4_0: case GgufType::kQ5_0: case GgufType::kQ8_0: return d0;
    case GgufType::kQ4_1: case GgufType::kQ5_1: case GgufType::kQ4_K: case GgufType::kQ5_K: return dm;
    case GgufType::kQ2_K: return q2k;
    case GgufType::kQ3_K: return q3k;
    case GgufType::kQ6_K: return q6k;
    default: return {};
  }
}

bool finite_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7C00u) != 0x7C00u;
}

}  // namespace

size_t first_nonfinite(GgufType type, std::span<const std::byte> bytes, size_t n) {
  const auto* src = reinterpret_cast<const uint8_t*>(bytes.data());
  switch (type) {
    case GgufType::kF32:
      for (size_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, src + 4 * i, 4);
        if (!std::isfinite(v)) return i;
      }
      return n;
    case GgufType::kF16:
      for (size_t i = 0; i < n; ++i)
        if (!finite_f16(src + 2 * i)) return i;
      return n;
    case GgufType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        if ((b & 0x7F80u) == 0x7F80u) return i;
      }
      return n;
    default: break;
  }
  const TypeInfo& t = info(type);
  for (size_t blk = 0; blk < n / t.block_elems; ++blk)
    for (uint32_t off : scale_offsets(type))
      if (!finite_f16(src + blk * t.block_bytes + off)) return blk * t.block_elems;
  return n;
}

void unpack_k4_scales(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63, mins[j] = packed[j + 4] & 63;
    scales[j + 4] = uint8_t((packed[j + 8] & 0xF) | ((packed[j] >> 6) << 4));
    mins[j + 4] = uint8_t((packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4));
  }
}

void pack_k4_scales(const uint8_t scales[8], const uint8_t mins[8], uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = uint8_t(scales[j] | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = uint8_t(mins[j] | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = uint8_t((scales[j + 4] & 0xF) | ((mins[j + 4] & 0xF) << 4));
  }
}

}  // namespace kvtier::engine::quant
