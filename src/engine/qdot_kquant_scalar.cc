// Portable K-quant kernels: quantize_q8k and the Q2_K .. Q6_K dots against
// BlockQ8K rows. Each weight super-block is reduced, against its activation
// block, to small integers: the integer dot of each 16-element group, one
// scale and one min per group; one shared function then applies them. The
// x86 kernels (qdot_kquant_x86.h) compute the same integers with SIMD. Written
// from the block layouts of engine/quant.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/half.h"
#include "engine/qdot_impl.h"

namespace kvtier::engine::qdot::impl {
namespace {

constexpr size_t kQK = 256;  // elements per super-block (and per BlockQ8K)

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// A weight super-block against its activation block as small integers: Σ w_i a_i over the
// super-block is d_a · Σ_g (d · sc[g] · dots[g] - dmin · m[g] · bsums[g]).
struct GroupDots {
  int32_t dots[16];  // Σ q_i · qs_i over group g (elements 16g .. 16g + 15)
  int16_t sc[16];
  int16_t m[16];
  float d, dmin;
};

// Σ q(l) · a[l] over 16 elements. Each product fits int16 (|q| ≤ 32, |a| ≤ 128), which lets
// compilers vectorize the loop with 16-bit multiplies; the pragma keeps GCC's -O3 from unrolling
// it into scalar code first.
template <typename Q>
int32_t dot16(const int8_t* a, Q q) {
  int32_t s = 0;
#pragma GCC unroll 1
  for (size_t l = 0; l < 16; ++l) s += int16_t(q(l) * a[l]);
  return s;
}

// Q2_K: element 128h + 32s + l is bits 2s..2s+1 of qs[32h + l]; group g is h = g / 8,
// s = g % 8 / 2, l from 16 (g % 2).
void q2_k_dots(const void* block, const int8_t* a, GroupDots& u) {
  const auto& b = *static_cast<const BlockQ2K*>(block);
  for (size_t g = 0; g < 16; ++g) {
    const uint8_t* qs = b.qs + 32 * (g / 8) + 16 * (g % 2);
    const int shift = int(2 * (g % 8 / 2));
    u.dots[g] = dot16(a + 16 * g, [&](size_t l) { return (qs[l] >> shift) & 3; });
    u.sc[g] = b.scales[g] & 0xF, u.m[g] = b.scales[g] >> 4;
  }
  u.d = f16_at(b.d), u.dmin = f16_at(b.dmin);
}

// Q3_K: Q2_K's 2-bit fields plus a high bit, bit 4h + s of hmask[l]; a clear one subtracts 4.
// Scale g: low 4 bits in scales[g % 8] (nibble g / 8), high 2 in scales[8 + g % 4] (bits 2 (g / 4)), offset 32.
void q3_k_dots(const void* block, const int8_t* a, GroupDots& u) {
  const auto& b = *static_cast<const BlockQ3K*>(block);
  for (size_t g = 0; g < 16; ++g) {
    const uint8_t* qs = b.qs + 32 * (g / 8) + 16 * (g % 2);
    const uint8_t* hm = b.hmask + 16 * (g % 2);
    const int shift = int(2 * (g % 8 / 2)), bit = int(4 * (g / 8) + g % 8 / 2);
    u.dots[g] = dot16(a + 16 * g, [&](size_t l) { return (((qs[l] >> shift) & 3) | (((hm[l] >> bit) & 1) << 2)) - 4; });
    const int low = (b.scales[g % 8] >> (4 * (g / 8))) & 0xF;
    const int high = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    u.sc[g] = int16_t((low | (high << 4)) - 32), u.m[g] = 0;
  }
  u.d = f16_at(b.d), u.dmin = 0.0f;
}

// Scale and min of 32-element sub-block j of a Q4_K/Q5_K block, written to both 16-element groups
// of the sub-block.
void k4_scales_mins(const uint8_t* packed, GroupDots& u) {
  uint8_t sc[8], m[8];
  quant::unpack_k4_scales(packed, sc, m);
  for (size_t j = 0; j < 8; ++j) {
    u.sc[2 * j] = u.sc[2 * j + 1] = int16_t(sc[j]);
    u.m[2 * j] = u.m[2 * j + 1] = int16_t(m[j]);
  }
}

// Q4_K: sub-block j = g / 2 (32 elements) is nibble j % 2 of qs[32 (j / 2) ..].
void q4_k_dots(const void* block, const int8_t* a, GroupDots& u) {
  const auto& b = *static_cast<const BlockQ4K*>(block);
  for (size_t g = 0; g < 16; ++g) {
    const uint8_t* qs = b.qs + 32 * (g / 4) + 16 * (g % 2);
    const int shift = int(4 * (g / 2 % 2));
    u.dots[g] = dot16(a + 16 * g, [&](size_t l) { return (qs[l] >> shift) & 0xF; });
  }
  k4_scales_mins(b.scales, u);
  u.d = f16_at(b.d), u.dmin = f16_at(b.dmin);
}

// Q5_K: Q4_K's nibbles plus bit 4 of element 32j + l in bit j of qh[l].
void q5_k_dots(const void* block, const int8_t* a, GroupDots& u) {
  const auto& b = *static_cast<const BlockQ5K*>(block);
  for (size_t g = 0; g < 16; ++g) {
    const uint8_t* qs = b.qs + 32 * (g / 4) + 16 * (g % 2);
    const uint8_t* qh = b.qh + 16 * (g % 2);
    const int shift = int(4 * (g / 2 % 2)), bit = int(g / 2);
    u.dots[g] = dot16(a + 16 * g, [&](size_t l) { return ((qs[l] >> shift) & 0xF) | (((qh[l] >> bit) & 1) << 4); });
  }
  k4_scales_mins(b.scales, u);
  u.d = f16_at(b.d), u.dmin = f16_at(b.dmin);
}

// Q6_K: element 128h + 32s + l is nibble s / 2 of ql[64h + 32 (s % 2) + l] plus bits 2s..2s+1 of
// qh[32h + l] as bits 4..5, offset by 32; group g is h = g / 8, s = g % 8 / 2, l from 16 (g % 2).
void q6_k_dots(const void* block, const int8_t* a, GroupDots& u) {
  const auto& b = *static_cast<const BlockQ6K*>(block);
  for (size_t g = 0; g < 16; ++g) {
    const size_t h = g / 8, s = g % 8 / 2;
    const uint8_t* ql = b.ql + 64 * h + 32 * (s % 2) + 16 * (g % 2);
    const uint8_t* qh = b.qh + 32 * h + 16 * (g % 2);
    const int low_shift = int(4 * (s / 2)), high_shift = int(2 * s);
    u.dots[g] = dot16(
        a + 16 * g, [&](size_t l) { return (((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4)) - 32; });
    u.sc[g] = b.scales[g], u.m[g] = 0;
  }
  u.d = f16_at(b.d), u.dmin = 0.0f;
}

// Σ w[i] * a[i] over one super-block: exact int32 sums (|Σ| < 2^28 for every type),
// then the activation scale, the weight scale and the weight min applied once each.
float super_block_dot(const GroupDots& u, const BlockQ8K& a) {
  int32_t sumi = 0, summ = 0;
  for (size_t g = 0; g < 16; ++g) {
    sumi += u.sc[g] * u.dots[g];
    summ += u.m[g] * a.bsums[g];
  }
  return (a.d * u.d) * float(sumi) - (a.d * u.dmin) * float(summ);
}

template <typename Block, void (*group_dots)(const void*, const int8_t*, GroupDots&)>
float dot_kquant(size_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const Block*>(w);
  const auto* ab = static_cast<const BlockQ8K*>(a);
  float sum = 0.0f;
  GroupDots u;
  for (size_t b = 0; b < n / kQK; ++b) {
    group_dots(&wb[b], ab[b].qs, u);
    sum += super_block_dot(u, ab[b]);
  }
  return sum;
}

// One BlockQ8K: d = max|x| / 127, qs = x / d rounded in the current (default:
// nearest-even) mode, so qs ∈ [-127, 127]; an all-zero block gives d = 0.
// The AVX2 version performs the same f32 operations, so it is bit-identical.
void quantize_block_q8k(const float* x, BlockQ8K& y) {
  float amax = 0.0f;
  for (size_t i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
  // Zero, or so small that d is subnormal (inexact: x / d could pass 127 and wrap): a zero block.
  if (!(amax / 127.0f >= std::numeric_limits<float>::min())) {
    std::memset(&y, 0, sizeof y);
    return;
  }
  y.d = amax / 127.0f;
  for (size_t i = 0; i < kQK; ++i) y.qs[i] = int8_t(std::nearbyint(x[i] / y.d));
  for (size_t g = 0; g < 16; ++g) {
    int s = 0;
    for (size_t l = 0; l < 16; ++l) s += y.qs[16 * g + l];
    y.bsums[g] = int16_t(s);
  }
}

void quantize_q8k(const float* x, size_t n, void* out) {
  auto* y = static_cast<BlockQ8K*>(out);
  for (size_t b = 0; b < n / kQK; ++b) quantize_block_q8k(x + b * kQK, y[b]);
}

}  // namespace

void fill_kquant_scalar(Kernels& k) {
  k.quantize_q8k = quantize_q8k;
  k.dot[uint32_t(GgufType::kQ2_K)] = dot_kquant<BlockQ2K, q2_k_dots>;
  k.dot[uint32_t(GgufType::kQ3_K)] = dot_kquant<BlockQ3K, q3_k_dots>;
  k.dot[uint32_t(GgufType::kQ4_K)] = dot_kquant<BlockQ4K, q4_k_dots>;
  k.dot[uint32_t(GgufType::kQ5_K)] = dot_kquant<BlockQ5K, q5_k_dots>;
  k.dot[uint32_t(GgufType::kQ6_K)] = dot_kquant<BlockQ6K, q6_k_dots>;
}

}  // namespace kvtier::engine::qdot::impl
