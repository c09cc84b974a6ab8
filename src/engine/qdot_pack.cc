// The packed weight layouts of engine/qdot.h (pack, unpack, sizes) and their
// scalar group dots, the reference every set's group dot reproduces bit for
// bit. Written from the Q4_K and Q6_K block layouts of engine/quant.cc.
#include <cmath>
#include <cstring>

#include "engine/half.h"
#include "engine/qdot.h"
#include "engine/qdot_impl.h"

namespace kvtier::engine::qdot {
namespace {

constexpr size_t kQK = 256;  // elements per super-block

using impl::BlockQ4K;
using impl::PackedQ4K16;

void pack_q4k16(const std::byte* const* rows, size_t n, PackedQ4K16* out) {
  for (size_t b = 0; b < n / kQK; ++b) {
    PackedQ4K16& x = out[b];
    for (uint32_t r = 0; r < kGroupRows; ++r) {
      BlockQ4K blk;
      std::memcpy(&blk, rows[r] + b * sizeof(BlockQ4K), sizeof blk);
      std::memcpy(&x.d[r], blk.d, 2);
      std::memcpy(&x.dmin[r], blk.dmin, 2);
      uint8_t sc[8], m[8];
      quant::unpack_k4_scales(blk.scales, sc, m);
      for (int j = 0; j < 8; ++j) x.scales[j][r] = sc[j], x.mins[j][r] = m[j];
      for (int p = 0; p < 4; ++p)
        for (int k = 0; k < 8; ++k) std::memcpy(&x.qs[p][k][4 * r], blk.qs + 32 * p + 4 * k, 4);
    }
  }
}

void unpack_q4k16(const PackedQ4K16* group, size_t n, uint32_t r, std::byte* out) {
  for (size_t b = 0; b < n / kQK; ++b) {
    const PackedQ4K16& x = group[b];
    BlockQ4K blk;
    std::memcpy(blk.d, &x.d[r], 2);
    std::memcpy(blk.dmin, &x.dmin[r], 2);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) sc[j] = x.scales[j][r], m[j] = x.mins[j][r];
    quant::pack_k4_scales(sc, m, blk.scales);
    for (int p = 0; p < 4; ++p)
      for (int k = 0; k < 8; ++k) std::memcpy(blk.qs + 32 * p + 4 * k, &x.qs[p][k][4 * r], 4);
    std::memcpy(out + b * sizeof(BlockQ4K), &blk, sizeof blk);
  }
}

using impl::BlockQ6K;
using impl::PackedQ6K16;

void pack_q6k16(const std::byte* const* rows, size_t n, PackedQ6K16* out) {
  for (size_t b = 0; b < n / kQK; ++b) {
    PackedQ6K16& x = out[b];
    std::memset(x.pad, 0, sizeof x.pad);
    for (uint32_t r = 0; r < kGroupRows; ++r) {
      BlockQ6K blk;
      std::memcpy(&blk, rows[r] + b * sizeof(BlockQ6K), sizeof blk);
      std::memcpy(&x.d[r], blk.d, 2);
      for (int g = 0; g < 16; ++g) x.scales[g][r] = blk.scales[g];
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 8; ++k) {
          for (int half = 0; half < 2; ++half)
            std::memcpy(&x.ql[h][half][k][4 * r], blk.ql + 64 * h + 32 * half + 4 * k, 4);
          std::memcpy(&x.qh[h][k][4 * r], blk.qh + 32 * h + 4 * k, 4);
        }
    }
  }
}

void unpack_q6k16(const PackedQ6K16* group, size_t n, uint32_t r, std::byte* out) {
  for (size_t b = 0; b < n / kQK; ++b) {
    const PackedQ6K16& x = group[b];
    BlockQ6K blk;
    std::memcpy(blk.d, &x.d[r], 2);
    for (int g = 0; g < 16; ++g) blk.scales[g] = x.scales[g][r];
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 8; ++k) {
        for (int half = 0; half < 2; ++half)
          std::memcpy(blk.ql + 64 * h + 32 * half + 4 * k, &x.ql[h][half][k][4 * r], 4);
        std::memcpy(blk.qh + 32 * h + 4 * k, &x.qh[h][k][4 * r], 4);
      }
    std::memcpy(out + b * sizeof(BlockQ6K), &blk, sizeof blk);
  }
}

// Row r of a Q6_K group super-block against activation block a, as q4k16_row_block below: the
// quants (6 bits, offset 32) by group of 16 with their int8 scales, exact in f32 as there
// (|dot| ≤ 16 · 63 · 128, |Σ scale · bsums| ≤ 16 · 128 · 2032, d · scale 11 × 8 bits):
//   s = Σ_g fma(dot_g, d · scale_g, s) over groups g in order, from 0;
//   s = fma(-32 d, Σ_g scale_g bsums_g, s);   acc = fma(d_a, s, acc).
float q6k16_row_block(const PackedQ6K16& x, uint32_t r, const BlockQ8K& a, float acc) {
  const float d = f16_to_f32(x.d[r]);
  float s = 0.0f;
  int32_t offset = 0;
  for (int g = 0; g < 16; ++g) {
    const int h = g / 8, c = g % 8 / 2;  // element 128h + 32c + l, l from 16 (g % 2)
    int32_t dot = 0;
    for (int i = 0; i < 16; ++i) {
      const int l = 16 * (g % 2) + i, k = l / 4, e = l % 4;
      const int low = (x.ql[h][c % 2][k][4 * r + e] >> (4 * (c / 2))) & 0xF;
      const int high = (x.qh[h][k][4 * r + e] >> (2 * c)) & 3;
      dot += (low | (high << 4)) * a.qs[16 * g + i];
    }
    s = std::fma(float(dot), d * float(x.scales[g][r]), s);
    offset += x.scales[g][r] * a.bsums[g];
  }
  s = std::fma(-32.0f * d, float(offset), s);
  return std::fma(a.d, s, acc);
}

// Row r of super-block x against activation block a: the f32 steps every set performs per (row,
// token), in this order. The integers are exact and so is each conversion (|dot| ≤ 32 · 15 · 127
// and |mins| ≤ 8 · 63 · 4064 are below 2^24), as is d · scale (11 × 6 significant bits):
//   s = Σ_j fma(dot_j, d · scale_j, s) over sub-blocks j in order, from 0;
//   s = fma(-dmin, Σ_j min_j (bsums_2j + bsums_2j+1), s);   acc = fma(d_a, s, acc).
float q4k16_row_block(const PackedQ4K16& x, uint32_t r, const BlockQ8K& a, float acc) {
  const float d = f16_to_f32(x.d[r]), dmin = f16_to_f32(x.dmin[r]);
  float s = 0.0f;
  int32_t mins = 0;
  for (int j = 0; j < 8; ++j) {
    int32_t dot = 0;
    for (int i = 0; i < 32; ++i) {
      const uint8_t byte = x.qs[j / 2][i / 4][4 * r + i % 4];
      dot += ((j % 2 ? byte >> 4 : byte) & 0xF) * a.qs[32 * j + i];
    }
    s = std::fma(float(dot), d * float(x.scales[j][r]), s);
    mins += x.mins[j][r] * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
  }
  s = std::fma(-dmin, float(mins), s);
  return std::fma(a.d, s, acc);
}

// --- The legacy packings: Q8_0 and Q5_0 (32-element blocks; qdot_impl.h) ---------------------

constexpr size_t kBlock = 32;

size_t legacy_line_bytes(Packing p) {
  return p == Packing::kQ8016 ? impl::kLegacyQ8LineBytes : impl::kLegacyQ5LineBytes;
}
size_t legacy_file_bytes(Packing p) { return p == Packing::kQ8016 ? 34 : 22; }  // d, then qs / qh, qs

// Row r's element i (< 32; Q5_0: < 16, elements 16.. are the high nibbles) in a block's lines.
template <typename Byte>
Byte& legacy_byte(Byte* lines, uint32_t r, int i) {
  return lines[64 * (i / 4) + 4 * r + i % 4];
}
// The bit of Q5_0's mask lines that holds the high bit of row r's element i.
int q5_mask_bit(uint32_t r, int i) { return 64 * (i / 4) + int(4 * r) + i % 4; }

void pack_legacy(Packing p, const std::byte* const* rows, size_t n, std::byte* out) {
  const size_t blocks = n / kBlock, fb = legacy_file_bytes(p);
  auto* base = reinterpret_cast<uint8_t*>(out);
  std::memset(base, 0, group_bytes(p, n));
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* lines = base + impl::legacy_d_bytes(blocks) + b * legacy_line_bytes(p);
    for (uint32_t r = 0; r < kGroupRows; ++r) {
      const auto* file = reinterpret_cast<const uint8_t*>(rows[r]) + b * fb;
      std::memcpy(base + 2 * (kGroupRows * b + r), file, 2);
      if (p == Packing::kQ8016) {
        for (int i = 0; i < 32; ++i) legacy_byte(lines, r, i) = file[2 + i] ^ 0x80;  // int8 + 128
        continue;
      }
      uint32_t qh;
      std::memcpy(&qh, file + 2, 4);
      for (int i = 0; i < 16; ++i) legacy_byte(lines, r, i) = file[6 + i];
      for (int i = 0; i < 32; ++i)
        if ((qh >> i) & 1) lines[256 + q5_mask_bit(r, i) / 8] |= uint8_t(1u << (q5_mask_bit(r, i) % 8));
    }
  }
}

void unpack_legacy(Packing p, const std::byte* group, size_t n, uint32_t r, std::byte* out) {
  const size_t blocks = n / kBlock, fb = legacy_file_bytes(p);
  const auto* base = reinterpret_cast<const uint8_t*>(group);
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* lines = base + impl::legacy_d_bytes(blocks) + b * legacy_line_bytes(p);
    auto* file = reinterpret_cast<uint8_t*>(out) + b * fb;
    std::memcpy(file, base + 2 * (kGroupRows * b + r), 2);
    if (p == Packing::kQ8016) {
      for (int i = 0; i < 32; ++i) file[2 + i] = legacy_byte(lines, r, i) ^ 0x80;
      continue;
    }
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) file[6 + i] = legacy_byte(lines, r, i);
    for (int i = 0; i < 32; ++i)
      qh |= uint32_t((lines[256 + q5_mask_bit(r, i) / 8] >> (q5_mask_bit(r, i) % 8)) & 1) << i;
    std::memcpy(file + 2, &qh, 4);
  }
}

// The legacy group dot's reference: per block, the exact integer dot of the weights (Q8_0: the
// stored byte - 128; Q5_0: nibble | high bit << 4, - 16) with the activations, then
//   acc = fma(dot, d_w · d_a, acc)   (|dot| ≤ 32 · 128 · 127 < 2^24: the conversion is exact).
template <Packing P>
void legacy_group_dot(size_t n, const void* group, const void* const* a, int count, float* out, size_t stride) {
  const size_t blocks = n / kBlock;
  const auto* base = static_cast<const uint8_t*>(group);
  for (int t = 0; t < count; ++t) {
    const auto* ab = static_cast<const BlockQ8*>(a[t]);
    for (uint32_t r = 0; r < kGroupRows; ++r) {
      float acc = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* lines = base + impl::legacy_d_bytes(blocks) + b * legacy_line_bytes(P);
        int32_t dot = 0;
        for (int i = 0; i < 32; ++i) {
          int w;
          if constexpr (P == Packing::kQ8016) {
            w = int(legacy_byte(lines, r, i)) - 128;
          } else {
            const uint8_t byte = legacy_byte(lines, r, i % 16);
            const int high = (lines[256 + q5_mask_bit(r, i) / 8] >> (q5_mask_bit(r, i) % 8)) & 1;
            w = ((i < 16 ? byte & 0xF : byte >> 4) | high << 4) - 16;
          }
          dot += w * ab[b].qs[i];
        }
        uint16_t d;
        std::memcpy(&d, base + 2 * (kGroupRows * b + r), 2);
        acc = std::fma(float(dot), f16_to_f32(d) * ab[b].d, acc);
      }
      out[size_t(t) * stride + r] = acc;
    }
  }
}

template <typename Packed, float (*row_block)(const Packed&, uint32_t, const BlockQ8K&, float)>
void group_dot(size_t n, const void* group, const void* const* a, int count, float* out, size_t stride) {
  const auto* g = static_cast<const Packed*>(group);
  for (int t = 0; t < count; ++t) {
    const auto* ab = static_cast<const BlockQ8K*>(a[t]);
    for (uint32_t r = 0; r < kGroupRows; ++r) {
      float acc = 0.0f;
      for (size_t b = 0; b < n / kQK; ++b) acc = row_block(g[b], r, ab[b], acc);
      out[size_t(t) * stride + r] = acc;
    }
  }
}

}  // namespace

std::string_view packing_name(Packing p) {
  switch (p) {
    case Packing::kRows:
      return "rows";
    case Packing::kQ4K16:
      return "q4_K x16";
    case Packing::kQ6K16:
      return "q6_K x16";
    case Packing::kQ8016:
      return "q8_0 x16";
    case Packing::kQ5016:
      return "q5_0 x16";
  }
  return "?";
}

size_t group_bytes(Packing p, size_t n) {
  switch (p) {
    case Packing::kRows:
      return 0;
    case Packing::kQ4K16:
      return n / kQK * sizeof(PackedQ4K16);
    case Packing::kQ6K16:
      return n / kQK * sizeof(PackedQ6K16);
    case Packing::kQ8016:
    case Packing::kQ5016:
      return impl::legacy_d_bytes(n / kBlock) + n / kBlock * legacy_line_bytes(p);
  }
  return 0;
}

uint64_t packed_matrix_bytes(Packing p, GgufType t, uint64_t rows, uint64_t cols) {
  const uint64_t row = quant::row_bytes(quant::info(t), cols);
  if (p == Packing::kRows) return rows * row;
  return rows / kGroupRows * group_bytes(p, size_t(cols)) + rows % kGroupRows * row;
}

void pack_group(Packing p, const std::byte* const* rows, size_t n, std::byte* out) {
  if (p == Packing::kQ4K16) pack_q4k16(rows, n, reinterpret_cast<PackedQ4K16*>(out));
  if (p == Packing::kQ6K16) pack_q6k16(rows, n, reinterpret_cast<PackedQ6K16*>(out));
  if (p == Packing::kQ8016 || p == Packing::kQ5016) pack_legacy(p, rows, n, out);
}

void unpack_row(Packing p, const std::byte* group, size_t n, uint32_t r, std::byte* out) {
  if (p == Packing::kQ4K16) unpack_q4k16(reinterpret_cast<const PackedQ4K16*>(group), n, r, out);
  if (p == Packing::kQ6K16) unpack_q6k16(reinterpret_cast<const PackedQ6K16*>(group), n, r, out);
  if (p == Packing::kQ8016 || p == Packing::kQ5016) unpack_legacy(p, group, n, r, out);
}

namespace impl {
void fill_packed_scalar(Kernels& k) {
  k.group_dot[int(Packing::kQ4K16)] = group_dot<PackedQ4K16, q4k16_row_block>;
  k.group_dot[int(Packing::kQ6K16)] = group_dot<PackedQ6K16, q6k16_row_block>;
  k.group_dot[int(Packing::kQ8016)] = legacy_group_dot<Packing::kQ8016>;
  k.group_dot[int(Packing::kQ5016)] = legacy_group_dot<Packing::kQ5016>;
}
}  // namespace impl

}  // namespace kvtier::engine::qdot
