// Quantisation of f32 rows into the GGUF tensor types (the inverse of
// engine/quant.h) with ggml's reference algorithms, the ones llama-quantize
// runs when it has no importance matrix: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 per
// 32-element block; Q2_K .. Q6_K per 256-element super-block with ggml's
// searches for the sub-block scales (make_qx_quants, make_q3_quants,
// make_qkx2_quants); F16/BF16 round to nearest even. Every step is ggml's f32
// arithmetic in ggml's order (quantize.cc is compiled with -ffp-contract=off, as
// ggml-base is built without FMA), so a row quantised here is bit-identical to
// the same row quantised by llama.cpp.
//
// Also the per-tensor type choice of llama.cpp's Q4_K_M mix
// (llama_tensor_get_type) and the fallbacks it takes for rows that are not a
// multiple of the block size. Stateless free functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/model_config.h"
#include "engine/quant.h"
#include "kvtier/status.h"

namespace kvtier::engine {

// Encodes the `n` elements at `x` (a multiple of the type's block size) as
// `type` into `out`, which must hold quant::row_bytes(type, n) bytes. Any type
// of quant.h (F32 is a copy). InvalidArgument when n is not a multiple of the
// block size. Values must be finite (a NaN gives unspecified blocks).
Status quantize_row(GgufType type, const float* x, size_t n, std::byte* out);

// How a GGUF writer stores the model's matrices (norms, biases and
// rope_freqs stay F32): every matrix as `type`, or, with `q4_k_m`, the type
// llama.cpp's Q4_K_M mix picks per tensor (`type` is then Q4_K, its base).
struct WeightFormat {
  GgufType type = GgufType::kF32;
  bool q4_k_m = false;

  WeightFormat() = default;
  WeightFormat(GgufType t) : type(t) {}  // NOLINT(google-explicit-constructor): a plain type is a format
  static WeightFormat Q4_K_M() {
    WeightFormat f(GgufType::kQ4_K);
    f.q4_k_m = true;
    return f;
  }
  // "q4_k_m", or the type's lower-case ggml name ("f32", "q8_0", "q6_k", ...).
  std::string name() const;
  // llama.cpp's llama_ftype for general.file_type: the mix, or the "mostly T" file type
  // (Q4_K as Q4_K_S, Q3_K as Q3_K_S, ...).
  uint32_t file_type() const;
  bool operator==(const WeightFormat&) const = default;
};

// "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k",
// "q4_k", "q5_k", "q6_k" or "q4_k_m"; anything else is InvalidArgument listing them.
Result<WeightFormat> parse_weight_format(std::string_view name);

// One matrix of a model as llama.cpp's quantizer sees it.
struct MatrixRole {
  std::string_view name;    // GGUF tensor name: "token_embd.weight", "blk.3.attn_v.weight", ...
  uint32_t layer = 0;       // the block index of a blk.N tensor (the count of attn_v / ffn_down before it)
  uint32_t n_layers = 0;    // blocks in the model
  uint64_t row_length = 0;  // ne[0]
  bool has_output = true;   // the file has output.weight (false: token_embd is also the output)
  bool model_70b = false;   // llama.cpp classes the model as 70B (see is_llama_cpp_70b)
};

// llama.cpp's 70B class, which gives attn_v more bits: 80 layers, with grouped-query
// attention for llama (65B without), any qwen2.
bool is_llama_cpp_70b(const ModelConfig& config);

// The type llama.cpp's Q4_K_M picks for `role` (llama_tensor_get_type without an
// importance matrix or overrides): Q6_K for the output projection (Q8_0 when its
// rows are not a multiple of 256), Q6_K for attn_v and ffn_down in the layers
// use_more_bits selects (the first and last eighth, and every third between),
// Q5_K for a 70B's other attn_v, Q4_K for everything else; then llama.cpp's
// fallback for rows that are not a multiple of 256 (Q4_K → Q5_0, Q5_K → Q5_1,
// Q6_K → Q8_0, F16 when not a multiple of 32 either).
GgufType q4_k_m_type(const MatrixRole& role);

// The type `format` stores the matrix `role` as: q4_k_m_type for the mix; else
// format.type with the same fallback for rows that are not a multiple of its
// block. InvalidArgument where llama.cpp has no fallback kvtier writes (Q2_K,
// Q3_K: IQ4_NL; legacy types: none).
Result<GgufType> matrix_type(const WeightFormat& format, const MatrixRole& role);

}  // namespace kvtier::engine
