// Internal: each kernel file fills its part of a qdot::Kernels table
// (engine/qdot.h). The x86 files are compiled with -mavx2 -mfma -mf16c (the
// VNNI ones add their instructions to the kernels alone) and only ever called
// after cpu_has() reports their set. Not a public header.
#pragma once

#include <cstdint>

#include "engine/qdot.h"

namespace kvtier::engine::qdot::impl {

// The K-quant block layouts (engine/quant.cc), shared by the scalar and AVX2 kernels. Byte
// arrays only, so a row may start at any address; the f16 fields are read with memcpy.
struct BlockQ2K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min, per group of 16
  uint8_t qs[64];
  uint8_t d[2], dmin[2];
};
struct BlockQ3K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // sixteen 6-bit scales, offset by 32
  uint8_t d[2];
};
struct BlockQ4K {
  uint8_t d[2], dmin[2];
  uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins
  uint8_t qs[128];
};
struct BlockQ5K {
  uint8_t d[2], dmin[2];
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint8_t d[2];
};
static_assert(sizeof(BlockQ2K) == 84 && sizeof(BlockQ3K) == 110 && sizeof(BlockQ4K) == 144 && sizeof(BlockQ5K) == 176 &&
              sizeof(BlockQ6K) == 210);

// One super-block of a Packing::kQ4K16 group (qdot.h): super-block b of each of its 16 rows.
struct PackedQ4K16 {
  uint16_t d[16], dmin[16];            // row r's f16 d and dmin
  uint8_t scales[8][16], mins[8][16];  // sub-block j's 6-bit scale and min, row r
  uint8_t qs[4][8][64];                // [pair p][line k][4r + e]: the file's qs[32p + 4k + e] of row r
};
static_assert(sizeof(PackedQ4K16) == 2368 && sizeof(PackedQ4K16) % 64 == 0);

// One super-block of a Packing::kQ6K16 group: super-block b of each of its 16 rows.
struct PackedQ6K16 {
  uint8_t ql[2][2][8][64];  // [h][s % 2][line k][4r + e]: the file's ql[64h + 32 (s % 2) + 4k + e] of row r
  uint8_t qh[2][8][64];     // [h][line k][4r + e]: the file's qh[32h + 4k + e] of row r
  int8_t scales[16][16];    // [group g][row r]
  uint16_t d[16];
  uint8_t pad[32];  // to a whole number of 64-byte lines
};
static_assert(sizeof(PackedQ6K16) == 3392 && sizeof(PackedQ6K16) % 64 == 0);

// A Packing::kQ8016 / kQ5016 group of n elements per row: the 16 rows' f16 d of block b at
// d[16 b + r], padded to whole 64-byte lines (legacy_d_bytes), then per block its lines:
//   Q8_0 (512 bytes): [line k][4r + e] = the file's qs[4k + e] of row r, plus 128;
//   Q5_0 (320 bytes): [line k < 4][4r + e] = the file's qs[4k + e] of row r (low nibble: element
//     4k + e, high nibble: 16 + 4k + e), then eight 64-bit masks: bit 4r + e of mask k is the
//     file's high bit of element 4k + e of row r.
inline constexpr size_t kLegacyQ8LineBytes = 512, kLegacyQ5LineBytes = 320;
constexpr size_t legacy_d_bytes(size_t blocks) { return (blocks * 32 + 63) / 64 * 64; }

// The packed layouts' scalar group dots: every set's default (qdot_pack.cc).
void fill_packed_scalar(Kernels& k);

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 against BlockQ8; F16 and BF16 against f32; quantize_q8.
void fill_legacy_scalar(Kernels& k);
// Q2_K .. Q6_K against BlockQ8K; quantize_q8k.
void fill_kquant_scalar(Kernels& k);
// The x86 sets, whole (qdot_avx2.cc, qdot_avxvnni.cc, qdot_avx512.cc).
void fill_avx2(Kernels& k);
void fill_avxvnni(Kernels& k);
void fill_avx512(Kernels& k);

}  // namespace kvtier::engine::qdot::impl
