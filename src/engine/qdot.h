// Dot products of weight rows held in their GGUF type with activation rows,
// the building block of the quantized matmul (engine/qmatmul.h).
//
// Activations are quantized per row, once per matmul, into the format the
// weight type pairs with (act_type): 32-element q8 blocks for the legacy
// types, 256-element q8_K super-blocks for the K-quants, f32 as is for
// F16/BF16. A dot is then integer products of small integers inside each
// block, scaled in f32. Every kernel set computes the same math; they differ
// only in f32 rounding (summation order), so a SIMD path is tested against
// the scalar one with a bound, and each against dequantize-then-f32.
//
// A set may want a type's rows regrouped at load (Packing, below; the x86
// sets take Q4_K and Q6_K 16 rows at a time); group dots then run on those groups,
// with one f32 formula that every set reproduces bit for bit.
//
// Dispatch: kernels(isa) for an Isa the CPU reports (cpu_has); best() picks
// the widest. A given process always uses one set, so a row's result never
// depends on which other rows share the call. The x86 sets are one source
// built three ways (engine/qdot_x86_isa.h) and agree bit for bit.
// Stateless; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/quant.h"

namespace kvtier::engine::qdot {

// kAvxVnni: AVX2 plus AVX-VNNI's VEX-encoded dpbusd/dpwssd. kAvx512: AVX2 plus AVX-512 F, BW, VL,
// DQ and VNNI (the same integer products, EVEX-encoded, with 32 vector registers; DQ for the
// compiler's 64x2/32x8 lane extracts); an AVX-512 CPU without VNNI runs the AVX2 set.
enum class Isa : uint8_t { kScalar, kAvx2, kAvxVnni, kAvx512 };
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512};
std::string_view isa_name(Isa isa);
// The CPU (and the OS, for the register state) reports every instruction the set uses: AVX2
// needs avx2, fma and f16c; the others that plus avxvnni, or avx512f, avx512bw, avx512vl and
// avx512vnni.
bool cpu_has(Isa isa);

// Activation blocks. x[i] ≈ d * qs[i].
struct BlockQ8 {  // 32 elements
  float d;
  float s;  // d * Σ qs (what Q4_1 / Q5_1's offset multiplies)
  int8_t qs[32];
};
struct BlockQ8K {  // 256 elements
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // Σ qs over each group of 16 (what the K-quants' mins multiply)
};
static_assert(sizeof(BlockQ8) == 40 && sizeof(BlockQ8K) == 292);

enum class ActType : uint8_t { kF32, kQ8, kQ8K };
// The activation format weights of type `w` pair with (F32 weights: kF32).
ActType act_type(GgufType w);
// Bytes of an activation row of n elements (n a multiple of the block size).
size_t act_row_bytes(ActType a, size_t n);

// Quantizes n floats into `out` (act_row_bytes of them).
using QuantizeFn = void (*)(const float* x, size_t n, void* out);
// Σ w[i] * a[i] over n elements: `w` a row of the weight type, `a` an activation row of its act_type.
using DotFn = float (*)(size_t n, const void* w, const void* a);

// The dots of one weight row with `count` activation rows a[0..count), 1 ≤ count ≤ kDotN, into
// out[j * stride] (a stride lets the caller lay out a tile token-major): the weight blocks are
// unpacked once for all of them (prefill's GEMM). Contract: out[j * stride] is bit for bit
// dot(n, w, a[j]) — the same integer sums and the same f32 operations in the same order — so a
// token's result never depends on which tokens shared its call.
inline constexpr int kDotN = 16;
using DotNFn = void (*)(size_t n, const void* w, const void* const* a, int count, float* out, size_t stride);

// --- Packed weight layouts ---------------------------------------------------------------
//
// A set may want a weight type's rows regrouped at load (never widened; Linear::pack). kQ4K16 and
// kQ6K16: groups of kGroupRows rows, super-block by super-block; each 64-byte line holds the bits
// of four consecutive quants for every row of the group (a 32-bit lane per row: the file's bytes
// at the same offsets, transposed), so one byte dot product per unpacked line gives the 16 rows'
// partial dots against four broadcast activation bytes; Q4_K's 6-bit scales and mins become
// bytes. Each holds exactly the file's information: unpack_row gives back a row's file bytes.
// kQ8016 and kQ5016 (the legacy 32-element blocks): the group's f16 scales of every block first,
// then per block its lines, Q8_0's quants offset by 128 and Q5_0's high bits as one 64-bit mask
// per line, so both are unsigned for the byte dot product (engine/qdot_impl.h).
enum class Packing : uint8_t { kRows, kQ4K16, kQ6K16, kQ8016, kQ5016 };
inline constexpr int kPackings = 5;
inline constexpr uint32_t kGroupRows = 16;
std::string_view packing_name(Packing p);  // "rows", "q4_K x16", "q6_K x16", "q8_0 x16", "q5_0 x16"
// Bytes of one group of kGroupRows rows of n elements (n a multiple of the type's block).
size_t group_bytes(Packing p, size_t n);
// Bytes of a matrix of `rows` × `cols` of type t held as packing p wants: whole groups packed,
// the rows past the last whole group as the file stores them (Linear::pack).
uint64_t packed_matrix_bytes(Packing p, GgufType t, uint64_t rows, uint64_t cols);
// Packs file rows rows[0 .. kGroupRows) of n elements into `out` (group_bytes of them).
void pack_group(Packing p, const std::byte* const* rows, size_t n, std::byte* out);
// Row r of a packed group, as the file stores it, into `out` (the type's row bytes).
void unpack_row(Packing p, const std::byte* group, size_t n, uint32_t r, std::byte* out);

// The dots of the kGroupRows weight rows of a packed group with `count` activation rows (1 ≤
// count ≤ kDotN) into out[t * stride + r]. Contract: each (row, token) is the same f32
// operations in the same order in every set, the scalar reference included, so results are bit
// for bit equal whatever count and whichever set.
using GroupDotFn = void (*)(size_t n, const void* group, const void* const* a, int count, float* out, size_t stride);

struct Kernels {
  Isa isa;
  // The layout this set wants each type's weights in (indexed like dot; kRows: the file's).
  Packing packing[32];
  // By Packing (kRows: null): every set has one for each packing, the scalar reference where
  // it has nothing faster, so a set can run weights packed for another.
  GroupDotFn group_dot[kPackings];
  QuantizeFn quantize_q8;
  QuantizeFn quantize_q8k;
  // Indexed by GgufType code (engine/quant.h); null where the type has no kernel (F32: BLAS).
  DotFn dot[32];
  // Optional (null: call dot per row).
  DotNFn dot_n[32];
};

// The set for `isa`, or nullptr when this build lacks it or the CPU does not report it.
const Kernels* kernels(Isa isa);
// The widest available set (never null: the scalar one always is).
const Kernels& best();

}  // namespace kvtier::engine::qdot
