// Tensor element types of GGUF files (ggml_type values) and their
// dequantisation to f32, block by block, as ggml defines the block layouts:
// the legacy 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the
// 256-element K-quant super-blocks (Q2_K .. Q6_K) that Q4_K_M-style files mix.
//
// Contract: a row of `n` elements of type T takes n / block_elems(T) blocks of
// block_bytes(T) bytes; n must be a multiple of block_elems(T). Dequantisation
// is ggml's f32 arithmetic in ggml's order (products of an f16 scale and small
// integers are exact; quant.cc is compiled with -ffp-contract=off so no add is
// fused either), so it reproduces ggml's reference values bit for bit.
// Stateless free functions; safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::engine {

// The tensor types the engine reads (values are ggml_type codes).
enum class GgufType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
};

namespace quant {

struct TypeInfo {
  GgufType type;
  std::string_view name;  // ggml's spelling: "F32", "Q4_K", ...
  uint32_t block_elems;   // elements per block (1 for the float types)
  uint32_t block_bytes;   // bytes per block
};

// Every type above, in ggml_type order.
std::span<const TypeInfo> all_types();
// The entry of ggml type code `code`, or nullptr when the engine does not read it.
const TypeInfo* find_type(uint32_t code);
// The entry of `type`, which must be one of the enumerators above.
const TypeInfo& info(GgufType type);

// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline uint64_t row_bytes(const TypeInfo& t, uint64_t n) { return n / t.block_elems * t.block_bytes; }

// Decodes `n` elements (a multiple of the block size) from `bytes` (at least
// row_bytes(type, n) of them) into `out`. InvalidArgument when the sizes do
// not hold; the values themselves are not checked (a NaN scale gives NaNs).
Status dequantize_row(GgufType type, std::span<const std::byte> bytes, size_t n, float* out);

// Q4_K/Q5_K's eight 6-bit scales and eight 6-bit mins, packed in 12 bytes as ggml packs them
// (get_scale_min_k4): sub-blocks 0..3 in the low 6 bits of bytes j (scale) and j + 4 (min);
// 4..7 take their low 4 bits from byte j + 4 (scale: low nibble, min: high nibble) and their
// top 2 from bits 6..7 of bytes j - 4 and j. The packing is a bijection; values must be < 64.
void unpack_k4_scales(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]);
void pack_k4_scales(const uint8_t scales[8], const uint8_t mins[8], uint8_t* packed);

// The element index of the first block of `n` elements at `bytes` whose values are not all
// finite, or n when every value is: a float type checks each value, a block type its f16
// scales (with finite scales every value of a block is finite). Sizes as dequantize_row.
size_t first_nonfinite(GgufType type, std::span<const std::byte> bytes, size_t n);

}  // namespace quant
}  // namespace kvtier::engine
