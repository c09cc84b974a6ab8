// ModelConfig: the hyper-parameters of a Llama-family decoder (architecture,
// vocab, widths, grouped-query attention, RoPE and its scaling, RMSNorm) plus
// the named presets used by tests, benchmarks and the simulator, and the one
// RoPE table both engines use. A plain value; thread-safe to copy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::engine {

// The decoder variants the engines run, as llama.cpp defines them (its GGUF
// `general.architecture`). They differ only in what ModelConfig's derived
// predicates below say.
enum class Arch : uint8_t {
  kLlama,  // Llama 2/3.x, Mistral: adjacent-pair RoPE, no biases
  kQwen2,  // Qwen2/2.5: rotate-half RoPE, biases on Q, K and V
};
std::string_view arch_name(Arch a);  // "llama" | "qwen2": the GGUF architecture and key prefix
Result<Arch> parse_arch(std::string_view name);

// Which coordinates of a head RoPE rotates together (pair i turns by angle
// pos * rope_rate(i)):
enum class RopeStyle : uint8_t {
  kAdjacentPairs,  // (x[2i], x[2i+1]): llama.cpp's "normal" rope, for GGUF llama weights
  kRotateHalf,     // (x[i], x[i + D/2]): llama.cpp's "neox" rope (qwen2)
};

// Llama 3.1's RoPE scaling (Hugging Face `rope_scaling` of type "llama3"):
// slow-turning pairs are slowed by `factor`, fast ones kept, a smooth blend
// between. llama.cpp's converter stores the result as rope_freqs.weight.
struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  uint32_t original_context = 8192;
};

struct ModelConfig {
  std::string name;             // informational ("tiny", "small", a GGUF general.name)
  Arch arch = Arch::kLlama;
  uint32_t vocab_size = 0;
  uint32_t hidden_size = 0;
  uint32_t num_layers = 0;
  uint32_t num_heads = 0;       // query heads
  uint32_t num_kv_heads = 0;    // KV heads (GQA); divides num_heads
  uint32_t head_dim = 0;        // even (RoPE rotates pairs)
  uint32_t ffn_size = 0;        // SwiGLU intermediate width
  float rope_theta = 10000.0f;  // RoPE base
  // Linear RoPE scaling (GGUF rope.scaling.type "linear"): positions are
  // multiplied by this, 1 / rope.scaling.factor. 1: none.
  float rope_freq_scale = 1.0f;
  // Per-pair divisors of the rotation rate (GGUF rope_freqs.weight, written
  // for Llama 3.1+); empty: all 1, else head_dim / 2 finite values > 0.
  std::vector<float> rope_freq_factors;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // output projection reuses the token embedding
  uint32_t max_context = 0;      // positions [0, max_context) are valid

  Status validate() const;

  uint32_t q_dim() const { return num_heads * head_dim; }
  uint32_t kv_dim() const { return num_kv_heads * head_dim; }
  uint32_t group_size() const { return num_heads / num_kv_heads; }
  RopeStyle rope_style() const { return arch == Arch::kQwen2 ? RopeStyle::kRotateHalf : RopeStyle::kAdjacentPairs; }
  bool has_qkv_bias() const { return arch == Arch::kQwen2; }
  // Radians per position of rotated pair i < head_dim / 2:
  // rope_freq_scale * rope_theta^(-2i/head_dim) / rope_freq_factors[i].
  double rope_rate(uint32_t pair) const;
  // Sets rope_freq_factors as Llama 3.1's scaling does for this head_dim and rope_theta.
  Status apply_llama3_rope_scaling(const Llama3RopeScaling& scaling);

  // The KV geometry of this model for a KV dtype and page size.
  KVGeometry kv_geometry(DType kv_dtype, uint32_t page_tokens = 16) const;

  // Parameter counts. Layer parameters are those multiplied per token.
  uint64_t layer_params() const;  // all layers, matrices only
  uint64_t num_params() const;    // everything, embeddings included once when tied
  // FLOPs of the matrix products of one token through all layers (2 per MAC).
  double layer_flops_per_token() const { return 2.0 * double(layer_params()); }
  // FLOPs of the output projection for one row of logits.
  double head_flops() const { return 2.0 * double(hidden_size) * vocab_size; }
  // FLOPs of causal attention (QK^T and PV) for queries at positions [begin, end).
  double attention_flops(uint64_t begin, uint64_t end) const;

  bool operator==(const ModelConfig&) const = default;
};

// (cos, sin) of every rotated pair at each of `n` positions: out[(r * D/2 + i) * 2 + {0, 1}]
// for position pos[r] and pair i. Angles in double precision, rounded once.
void rope_cos_sin(const ModelConfig& config, const uint32_t* pos, size_t n, std::vector<float>& out);

// "tiny", "small", "1b" (see the reference engine issue for the shapes) or "8b" (Llama-3.1-8B's
// shape: 32 layers of 4096, 32 heads, 8 KV heads of 128, FFN 14336, vocabulary 128256, RoPE
// theta 500000; 32 GB as f32, so it is written to a file with `kvtier model make`, a tensor at a time).
Result<ModelConfig> model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace kvtier::engine
