// GGUF (version 3) files of the `llama` and `qwen2` architectures: reading into a Model
// and writing a Model out (DESIGN §11 conventions: tensors `ne = [in, out]`
// are row-major [out][in]; RoPE pairs as ModelConfig::rope_style says, i.e.
// llama.cpp's "normal" rope for llama, "neox" for qwen2; Llama 3.1 scaling as
// rope_freqs.weight, linear scaling as rope.scaling.*; qwen2's Q/K/V biases as
// blk.N.attn_{q,k,v}.bias; llama.cpp tokenizer metadata).
//
// The reader maps the file read-only, checks everything it relies on (magic,
// version, bounds, alignment, shapes, types, finite values or block scales,
// the hyper-parameters) and copies each matrix in its file type (F32/F16/BF16,
// the Q4_0..Q8_0 and Q2_K..Q6_K block types of engine/quant.h) into aligned
// memory (engine/weights.h), after checking that it fits in the memory
// available; norms and biases are read as f32. Anything else is refused with
// a message naming the problem; a malformed file never crashes the reader.
// Stateless free functions; safe to call from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/memory_budget.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/quantize.h"

namespace kvtier::engine {

// GgufType (engine/quant.h): the tensor element types we read.
// Lower-case ggml name: "f32", "q8_0", "q4_k", ...
std::string_view gguf_type_name(GgufType t);
// The writer's type names ("f32", ..., "q6_k", "q4_k_m"): parse_weight_format (engine/quantize.h).

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
  // The most bytes the weights (in their file types) and `also_needed` may take
  // together; 0: the memory available now (engine/memory_budget.h: MemAvailable
  // and the cgroup's room). Checked before any weight is allocated, so a model
  // that would not fit is refused with a message naming each part, not killed.
  uint64_t memory_limit_bytes = 0;
  // What the caller allocates beside the weights (KV pool, host tier, scratch).
  std::vector<MemoryPart> also_needed;
  // The bytes are a read-only private mapping of the file (load_gguf sets it): each tensor's
  // pages are released once copied. Never set it for bytes held in ordinary memory.
  bool mapped_file = false;
};

// Loads a GGUF file through mmap.
Result<std::shared_ptr<const Model>> load_gguf(const std::string& path, const GgufLoadOptions& options = {});
// Parses a GGUF image held in memory (the fuzzer's entry point). `what` names
// the source in error messages.
Result<std::shared_ptr<const Model>> parse_gguf(std::span<const std::byte> bytes, std::string_view what = "gguf",
                                                const GgufLoadOptions& options = {});

// Reads only the tokenizer keys (tokenizer.ggml.*, tokenizer.chat_template) of
// a GGUF file of any architecture and tensor types, e.g. a vocab-only file.
// An unsupported tokenizer model or pre-tokenizer is an error naming it.
Result<Vocab> load_gguf_vocab(const std::string& path);
Result<Vocab> parse_gguf_vocab(std::span<const std::byte> bytes, std::string_view what = "gguf");

// ---- Writing -------------------------------------------------------------------
// The writer streams: the header first (metadata, then the tensor table, whose
// offsets follow from each tensor's type and shape), then each tensor's data,
// produced a chunk of rows at a time as f32 and encoded to the tensor's type
// (engine/quantize.h) as it is written, so memory use is a few chunks whatever
// the model's size. Tensor data is aligned to 32 bytes.

struct GgufWriteOptions {
  // Matrices: one type, or llama.cpp's Q4_K_M mix (engine/quantize.h); norms,
  // biases and rope_freqs are always F32.
  WeightFormat weight_type = GgufType::kF32;
  std::string name;  // general.name; defaults to the config name
};

// One tensor of a llama/qwen2 GGUF file, in the order the writer writes them
// (token_embd, output_norm, output, rope_freqs, then per block attn_norm,
// attn_q/k/v (+ biases), attn_output, ffn_norm, ffn_gate/up/down), and where
// its values live in ModelWeights.
struct GgufModelTensor {
  enum class Slot : uint8_t {
    kTokenEmbd, kOutputNorm, kOutput, kRopeFreqs,              // model-wide
    kAttnNorm, kWqkv, kBqkv, kWo, kFfnNorm, kWGateUp, kWDown,  // per layer
  };
  std::string name;
  uint64_t cols = 0;       // ne[0]
  uint64_t rows = 0;       // ne[1]; 0 for a vector (one dimension)
  Slot slot = Slot::kTokenEmbd;
  uint32_t layer = 0;
  uint64_t first_row = 0;  // rows of the slot before this tensor's (elements, for a vector: the Q/K/V biases)
};
std::vector<GgufModelTensor> gguf_model_tensors(const ModelConfig& config);

// Serialized metadata entries (key, value type, value), as the file stores them.
struct GgufMetadata {
  std::vector<char> bytes;
  uint64_t count = 0;
};
// general.*, the architecture's hyper-parameters and the tokenizer keys of a
// model of `config` with `vocab`: what llama.cpp needs to load it.
GgufMetadata gguf_model_metadata(const ModelConfig& config, const Vocab& vocab, const GgufWriteOptions& options);
// Every metadata entry of the GGUF image `file`, in order, except that
// general.file_type becomes `format`'s, general.alignment 32, and
// general.quantization_version 2 when `format` is not a float type (each
// added if absent). Corruption when the header is malformed.
Result<GgufMetadata> gguf_copy_metadata(std::span<const std::byte> file, const WeightFormat& format,
                                        std::string_view what = "gguf");

// One tensor of a file being written.
struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> shape;  // ggml ne: shape[0] is the row length (1 to 4 dimensions)
  GgufType type = GgufType::kF32;
  uint64_t rows() const;  // the product of shape[1..]: 1 for a vector
};

// The specs of `layout` (gguf_model_tensors(config)) with the types `format`
// stores them as: F32 for vectors, matrix_type for matrices (its errors).
Result<std::vector<GgufTensorSpec>> gguf_tensor_specs(const ModelConfig& config,
                                                      std::span<const GgufModelTensor> layout,
                                                      const WeightFormat& format);

// Fills out[rows][shape[0]] with rows [first_row, first_row + rows) of tensor
// `index` as f32. Called from several threads at once, on disjoint rows.
using GgufRowSource = std::function<Status(size_t index, uint64_t first_row, uint64_t rows, float* out)>;

struct GgufStreamOptions {
  unsigned threads = 0;                // threads filling and encoding rows; 0: the hardware's
  uint64_t chunk_elements = 1u << 22;  // f32 elements filled per chunk (16 MiB)
  // Called before each tensor is written (e.g. progress on stderr).
  std::function<void(size_t index, size_t count, const GgufTensorSpec& tensor)> on_tensor;
};

// Writes a GGUF v3 file: `metadata`, the table of `tensors`, then their data
// from `source`. InvalidArgument when a tensor's row length is not a multiple
// of its type's block; the source's errors and I/O errors are returned. A
// regular file (or none yet) is written as `<path>.partial-<pid>` beside it
// (through symbolic links: beside their target) and renamed over it once whole
// and synced, keeping its mode and owner, so a failure leaves whatever was
// there and removes the partial file. Anything else (a device, a pipe such as
// /dev/stdout), or a file in a directory that takes no new file, is written in
// place.
Status write_gguf_stream(const std::string& path, const GgufMetadata& metadata, std::span<const GgufTensorSpec> tensors,
                         const GgufRowSource& source, const GgufStreamOptions& options = {});

// Writes `model` as a GGUF v3 file llama.cpp can load (write_gguf_stream over its weights).
Status write_gguf(const Model& model, const std::string& path, const GgufWriteOptions& options = {},
                  const GgufStreamOptions& stream = {});

// Converts the GGUF file `in` (F32, F16 or BF16 matrices; any architecture the
// tensor reader reads) to `out` with its matrices in `format`: every metadata
// entry carried over (gguf_copy_metadata), vectors and 1-D tensors kept F32,
// each matrix dequantised and quantised a chunk at a time from the mapped
// input. InvalidArgument naming the tensor when `in` holds a quantised matrix.
Status quantize_gguf(const std::string& in, const std::string& out, const WeightFormat& format,
                     const GgufStreamOptions& stream = {});

}  // namespace kvtier::engine
