// Portable kernels for the legacy 32-element block types (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0) against BlockQ8 activations, F16/BF16 rows against f32, and
// quantize_q8. These define the math every other kernel set reproduces: per
// block an exact int32 sum of weight integer × activation integer, scaled once
// in f32 (plus min × s for the types with an offset). Written from the GGUF
// block layouts (engine/quant.cc documents them).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/half.h"
#include "engine/qdot_impl.h"

namespace kvtier::engine::qdot::impl {
namespace {

constexpr size_t kBlock = 32;

// The f16 stored at `p` (any alignment), widened exactly.
float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Quantizes one block: d = max|x| / 127, qs = round-half-even(x * (1 / d))
// clamped to [-127, 127], s = d * Σ qs; an all-zero block gives d = 0, qs = 0.
// The AVX2 version repeats these exact f32 operations, so both give the same
// bits (x must be finite).
void quantize_block(const float* x, BlockQ8& out) {
  float amax = 0.0f;
  for (size_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (size_t j = 0; j < kBlock; ++j) {
    const int q = std::clamp(int(std::nearbyint(x[j] * id)), -127, 127);
    out.qs[j] = int8_t(q);
    sum += q;
  }
  out.d = d;
  out.s = d * float(sum);
}

void quantize_q8(const float* x, size_t n, void* out) {
  auto* blocks = static_cast<BlockQ8*>(out);
  for (size_t b = 0; b < n / kBlock; ++b) quantize_block(x + b * kBlock, blocks[b]);
}

// Σ q_w q_a over one block, `a` the activation's 32 int8, with the type's
// offset subtracted from each weight integer for the symmetric types (Q4_0:
// q - 8, Q5_0: q - 16; the types with a min use q as is). One loop without an
// unpacked copy of the block: the compiler vectorizes it for any target.
int32_t idot_nibbles(const uint8_t* qs, int offset, const int8_t* a) {
  int32_t sum = 0;
  for (size_t j = 0; j < 16; ++j) sum += ((qs[j] & 0xF) - offset) * a[j] + ((qs[j] >> 4) - offset) * a[j + 16];
  return sum;
}

// As idot_nibbles, with bit j of the u32 at `high` as bit 4 of element j.
int32_t idot_five_bits(const uint8_t* high, const uint8_t* qs, int offset, const int8_t* a) {
  uint32_t qh;
  std::memcpy(&qh, high, 4);
  int32_t sum = 0;
  for (size_t j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | int((qh >> j) & 1u) << 4;
    const int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
    sum += (lo - offset) * a[j] + (hi - offset) * a[j + 16];
  }
  return sum;
}

int32_t idot_q4_0(const uint8_t* b, const int8_t* a) { return idot_nibbles(b + 2, 8, a); }
int32_t idot_q4_1(const uint8_t* b, const int8_t* a) { return idot_nibbles(b + 4, 0, a); }
int32_t idot_q5_0(const uint8_t* b, const int8_t* a) { return idot_five_bits(b + 2, b + 6, 16, a); }
int32_t idot_q5_1(const uint8_t* b, const int8_t* a) { return idot_five_bits(b + 4, b + 8, 0, a); }
int32_t idot_q8_0(const uint8_t* b, const int8_t* a) {
  int32_t sum = 0;
  for (size_t j = 0; j < kBlock; ++j) sum += int8_t(b[2 + j]) * a[j];
  return sum;
}

// Σ over the row of d_w * d_a * Σ q_w q_a (+ m * s when kHasMin: the min is
// the f16 right after d). A block is kBytes bytes; IntDot gives its integer sum.
template <size_t kBytes, bool kHasMin, int32_t (*IntDot)(const uint8_t*, const int8_t*)>
float dot_q8(size_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const BlockQ8*>(a);
  float sum = 0.0f;
  for (size_t b = 0; b < n / kBlock; ++b, wb += kBytes, ++ab) {
    sum += half_at(wb) * ab->d * float(IntDot(wb, ab->qs));
    if constexpr (kHasMin) sum += half_at(wb + 2) * ab->s;
  }
  return sum;
}

// Σ w[i] * a[i] for 16-bit float weights (any alignment) against f32, taken
// 32 at a time, each chunk summed on its own before it joins the total (less
// rounding than one running sum over the row). F16 widens through the bulk
// conversion (F16C where the target has it); BF16 is a shift, done inline.
template <bool kIsF16>
float dot_f32(size_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* af = static_cast<const float*>(a);
  float sum = 0.0f;
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t count = std::min(kBlock, n - i);
    uint16_t h[kBlock];
    std::memcpy(h, wb + 2 * i, 2 * count);
    float chunk = 0.0f;
    if constexpr (kIsF16) {
      float wf[kBlock];
      f16_to_f32(h, wf, count);
      for (size_t j = 0; j < count; ++j) chunk += wf[j] * af[i + j];
    } else {
      for (size_t j = 0; j < count; ++j) chunk += bf16_to_f32(h[j]) * af[i + j];
    }
    sum += chunk;
  }
  return sum;
}

}  // namespace

void fill_legacy_scalar(Kernels& k) {
  k.quantize_q8 = quantize_q8;
  k.dot[uint32_t(GgufType::kQ4_0)] = dot_q8<18, false, idot_q4_0>;
  k.dot[uint32_t(GgufType::kQ4_1)] = dot_q8<20, true, idot_q4_1>;
  k.dot[uint32_t(GgufType::kQ5_0)] = dot_q8<22, false, idot_q5_0>;
  k.dot[uint32_t(GgufType::kQ5_1)] = dot_q8<24, true, idot_q5_1>;
  k.dot[uint32_t(GgufType::kQ8_0)] = dot_q8<34, false, idot_q8_0>;
  k.dot[uint32_t(GgufType::kF16)] = dot_f32<true>;
  k.dot[uint32_t(GgufType::kBF16)] = dot_f32<false>;
}

}  // namespace kvtier::engine::qdot::impl
