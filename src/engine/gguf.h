// GGUF (version 3) files of the `llama` and `qwen2` architectures: reading into a Model
// and writing a Model out (DESIGN §11 conventions: tensors `ne = [in, out]`
// are row-major [out][in]; RoPE pairs as ModelConfig::rope_style says, i.e.
// llama.cpp's "normal" rope for llama, "neox" for qwen2; Llama 3.1 scaling as
// rope_freqs.weight, linear scaling as rope.scaling.*; qwen2's Q/K/V biases as
// blk.N.attn_{q,k,v}.bias; llama.cpp tokenizer metadata).
//
// The reader maps the file read-only, checks everything it relies on (magic,
// version, bounds, alignment, shapes, types, the hyper-parameters) and
// dequantises F32/F16/BF16 and the Q4_0..Q8_0, Q2_K..Q6_K block types
// (engine/quant.h) to f32, after checking that the f32 weights fit in the
// memory available. Anything else is refused with
// a message naming the problem; a malformed file never crashes the reader.
// Stateless free functions; safe to call from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model.h"
#include "engine/quant.h"

namespace kvtier::engine {

// GgufType (engine/quant.h): the tensor element types we read.
// Lower-case ggml name: "f32", "q8_0", "q4_k", ...
std::string_view gguf_type_name(GgufType t);
// A type the writer can write: "f32" | "f16" | "bf16" | "q8_0".
Result<GgufType> parse_gguf_type(std::string_view name);

// One tensor of a GGUF file of any architecture (the tensor reader).
struct GgufTensor {
  std::string name;
  std::vector<uint64_t> shape;  // ggml ne: shape[0] is the row length
  GgufType type = GgufType::kF32;
  uint64_t file_offset = 0;     // where its data starts, from the start of the file
  uint64_t bytes = 0;           // size of its data in the file
  std::vector<float> values;    // dequantised, when asked for
};
// The tensor table of a GGUF file, sorted by name, checked as the model loader
// checks it (types, row lengths against the block size, bounds, overlaps);
// with `dequantize` each tensor's values too (NoSpace when they would not fit
// in the memory available; Corruption for a NaN or infinite value). A type
// the engine does not read is an Unimplemented error naming it.
Result<std::vector<GgufTensor>> load_gguf_tensors(const std::string& path, bool dequantize);
Result<std::vector<GgufTensor>> parse_gguf_tensors(std::span<const std::byte> bytes, bool dequantize,
                                                   std::string_view what = "gguf");

struct GgufLoadOptions {
  // The most bytes the f32 weights may take; 0: the memory the system has
  // available now (MemAvailable). Checked before any weight is allocated, so
  // an 8B Q4_K_M file (~32 GB as f32) is refused with a message, not killed.
  uint64_t memory_limit_bytes = 0;
};

// Loads a GGUF file through mmap.
Result<std::shared_ptr<const Model>> load_gguf(const std::string& path, const GgufLoadOptions& options = {});
// Parses a GGUF image held in memory (the fuzzer's entry point). `what` names
// the source in error messages.
Result<std::shared_ptr<const Model>> parse_gguf(std::span<const std::byte> bytes, std::string_view what = "gguf",
                                                const GgufLoadOptions& options = {});
// The memory available to a new allocation now (MemAvailable of /proc/meminfo;
// physical memory when that cannot be read).
uint64_t available_memory_bytes();

// Reads only the tokenizer keys (tokenizer.ggml.*, tokenizer.chat_template) of
// a GGUF file of any architecture and tensor types, e.g. a vocab-only file.
// An unsupported tokenizer model or pre-tokenizer is an error naming it.
Result<Vocab> load_gguf_vocab(const std::string& path);
Result<Vocab> parse_gguf_vocab(std::span<const std::byte> bytes, std::string_view what = "gguf");

struct GgufWriteOptions {
  GgufType weight_type = GgufType::kF32;  // matrices; norm vectors are always F32
  std::string name;                       // general.name; defaults to the config name

  Status validate() const;
};

// Writes `model` as a GGUF v3 file llama.cpp can load.
Status write_gguf(const Model& model, const std::string& path, const GgufWriteOptions& options = {});

}  // namespace kvtier::engine
