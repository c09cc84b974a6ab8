// Internal constants of the GGUF v3 container shared by the reader and the
// writer (the llama.cpp `gguf` specification). Not a public header.
#pragma once

#include <cstdint>

namespace kvtier::engine::gguf {

inline constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian uint32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr uint64_t kMaxMetadataEntries = 65536;  // real files have tens
inline constexpr uint64_t kMaxTensors = uint64_t(1) << 20;  // an 8B model has 291
inline constexpr uint32_t kQ8Block = 32;       // elements per Q8_0 block
inline constexpr uint32_t kQ8BlockBytes = 34;  // f16 scale + 32 int8

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// general.file_type values (llama_ftype).
inline constexpr uint32_t kFileTypeF32 = 0, kFileTypeF16 = 1, kFileTypeQ8_0 = 7, kFileTypeBF16 = 32;

}  // namespace kvtier::engine::gguf
