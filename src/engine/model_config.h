// ModelConfig: the hyper-parameters of a Llama-family decoder (vocab, widths,
// grouped-query attention, RoPE, RMSNorm) plus the named presets used by
// tests, benchmarks and the simulator. A plain value; thread-safe to copy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::engine {

struct ModelConfig {
  std::string name;             // informational ("tiny", "small", a GGUF general.name)
  uint32_t vocab_size = 0;
  uint32_t hidden_size = 0;
  uint32_t num_layers = 0;
  uint32_t num_heads = 0;       // query heads
  uint32_t num_kv_heads = 0;    // KV heads (GQA); divides num_heads
  uint32_t head_dim = 0;        // even (RoPE rotates pairs)
  uint32_t ffn_size = 0;        // SwiGLU intermediate width
  float rope_theta = 10000.0f;  // RoPE base
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // output projection reuses the token embedding
  uint32_t max_context = 0;      // positions [0, max_context) are valid

  Status validate() const;

  uint32_t q_dim() const { return num_heads * head_dim; }
  uint32_t kv_dim() const { return num_kv_heads * head_dim; }
  uint32_t group_size() const { return num_heads / num_kv_heads; }

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

// "tiny", "small" or "1b" (see the reference engine issue for the shapes).
Result<ModelConfig> model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace kvtier::engine
