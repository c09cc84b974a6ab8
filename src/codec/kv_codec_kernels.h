// The inner loops of the KV codecs (tiers/kv_codec.h), behind a table of
// function pointers so that the portable scalar kernels and the AVX2 ones
// (built when the translation unit is compiled with AVX2 and F16C) can be
// run side by side: tests check that they agree bit for bit. Internal to
// tiers/; callers use kv_codec.h. Pure functions, thread-safe.
//
// Scale and quant pointers are plain bytes (any alignment); scales are f16
// bit patterns, little-endian. Encoders return false when an input value is
// NaN/Inf or a scale overflows f16 (the output is then unspecified).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/types.h"
#include "codec/kv_codec.h"

namespace kvtier::detail {

// f32 bits <-> bf16 bits: to nearest even, NaN quieted (as the AVX2 kernels
// round). Integer-only, so shared by every kernel file.
inline uint16_t f32_bits_to_bf16(uint32_t bits) {
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
inline uint32_t bf16_to_f32_bits(uint16_t b) { return uint32_t(b) << 16; }

struct KvCodecKernels {
  const char* name;
  // q8: `blocks` blocks of 32 contiguous values.
  bool (*q8_encode)(DType dt, const std::byte* in, size_t blocks, std::byte* scales, std::byte* quants);
  void (*q8_decode)(DType dt, const std::byte* scales, const std::byte* quants, size_t blocks, std::byte* out);
  // q4, per-token blocks: `blocks` blocks of 32 contiguous values, 16 bytes of nibbles each.
  bool (*q4_encode)(DType dt, const std::byte* in, size_t blocks, std::byte* scales, std::byte* nibbles);
  void (*q4_decode)(DType dt, const std::byte* scales, const std::byte* nibbles, size_t blocks, std::byte* out);
  // q4, per-channel group: 32 rows (pointers, as a group spans pages) of
  // `row_values` values; row_values scales; nibbles of the 32 rows, row after row.
  bool (*q4_encode_channels)(DType dt, const std::byte* const* rows, size_t row_values, std::byte* scales,
                             std::byte* nibbles);
  void (*q4_decode_channels)(DType dt, const std::byte* scales, const std::byte* nibbles, size_t row_values,
                             std::byte* const* rows);
  // Value conversions (exposed for the tests): n values.
  void (*f32_to_f16)(const float* in, size_t n, uint16_t* out);
  void (*f16_to_f32)(const uint16_t* in, size_t n, float* out);
};

// by_dtype and make_kernels are in an unnamed namespace: each kernel file
// gets its own copy. Their template arguments are class templates from each
// file's anonymous namespace, and GCC does not give such instantiations
// internal linkage (it emits them as weak symbols with the same mangled name
// in every file), so as ordinary templates the linker kept one file's copy
// for both tables: the "avx2" table ran the scalar loops, unnoticed by tests
// that compared the two tables' results (CodecKernels.TablesAreDistinct).
namespace {

// DType -> template instance: Op<T>::run(args...). Each kernel file defines
// its Ops (KVTIER_KERNEL_OP, in its own anonymous namespace) over its
// templates `name_t<T>` and dispatches its table entries through this.
template <template <DType> class Op, class... Args>
auto by_dtype(DType dt, Args... args) {
  switch (dt) {
    case DType::kF16: return Op<DType::kF16>::run(args...);
    case DType::kBF16: return Op<DType::kBF16>::run(args...);
    default: return Op<DType::kF32>::run(args...);
  }
}

#define KVTIER_KERNEL_OP(op)                            \
  template <DType T>                                    \
  struct op##_op {                                      \
    template <class... A>                               \
    static auto run(A... a) { return op##_t<T>(a...); } \
  };

// The table of a kernel file whose Ops are defined with KVTIER_KERNEL_OP.
template <template <DType> class Q8Encode, template <DType> class Q8Decode, template <DType> class Q4Encode,
          template <DType> class Q4Decode, template <DType> class Q4EncodeChannels,
          template <DType> class Q4DecodeChannels>
KvCodecKernels make_kernels(const char* name, void (*f32_to_f16)(const float*, size_t, uint16_t*),
                            void (*f16_to_f32)(const uint16_t*, size_t, float*)) {
  return KvCodecKernels{
      name,
      [](DType dt, const std::byte* in, size_t blocks, std::byte* s, std::byte* q) {
        return by_dtype<Q8Encode>(dt, in, blocks, s, q);
      },
      [](DType dt, const std::byte* s, const std::byte* q, size_t blocks, std::byte* out) {
        by_dtype<Q8Decode>(dt, s, q, blocks, out);
      },
      [](DType dt, const std::byte* in, size_t blocks, std::byte* s, std::byte* q) {
        return by_dtype<Q4Encode>(dt, in, blocks, s, q);
      },
      [](DType dt, const std::byte* s, const std::byte* q, size_t blocks, std::byte* out) {
        by_dtype<Q4Decode>(dt, s, q, blocks, out);
      },
      [](DType dt, const std::byte* const* rows, size_t n, std::byte* s, std::byte* q) {
        return by_dtype<Q4EncodeChannels>(dt, rows, n, s, q);
      },
      [](DType dt, const std::byte* s, const std::byte* q, size_t n, std::byte* const* rows) {
        by_dtype<Q4DecodeChannels>(dt, s, q, n, rows);
      },
      f32_to_f16,
      f16_to_f32,
  };
}

}  // namespace

const KvCodecKernels& scalar_kernels();
// The AVX2+F16C kernels, or nullptr when this build has none or the CPU
// lacks either (their table is built by code compiled for AVX2).
const KvCodecKernels* native_kernels();
// The same without asking the CPU (kv_codec_avx2.cc): only native_kernels() calls it.
const KvCodecKernels* native_kernels_unchecked();
// What the public functions use: native when built, else scalar.
const KvCodecKernels& best_kernels();

// How q4 groups keys. kKeyChannels is the format (kv_codec.h); kTokenBlocks
// (every row per token, i.e. q4_0 on all values) exists to measure the choice.
enum class Q4Keys : uint8_t { kKeyChannels, kTokenBlocks };

// kv_encode_layer / kv_decode_layer with chosen kernels (and q4 key grouping).
Status encode_layer_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, uint32_t n_pages,
                         std::span<const std::byte> raw, std::span<std::byte> out,
                         Q4Keys keys = Q4Keys::kKeyChannels);
Status decode_layer_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, uint32_t n_pages,
                         std::span<const std::byte> enc, std::span<std::byte> raw,
                         Q4Keys keys = Q4Keys::kKeyChannels);
// kv_decode_layer_pages with chosen kernels.
Status decode_pages_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, std::span<const std::byte> enc,
                         std::span<std::byte* const> pages, Q4Keys keys = Q4Keys::kKeyChannels);

}  // namespace kvtier::detail
