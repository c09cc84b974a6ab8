// Model: a Llama-family model (engine/model_config.h: llama or qwen2) held in memory as f32 weights, plus its
// vocabulary and fingerprint. Built from deterministic synthetic weights (a
// preset and a seed) or loaded from a GGUF file (engine/gguf.h); weights of
// other precisions are dequantised at load.
//
// Matrices are row-major [out][in] (the GGUF `ne = [in, out]` convention).
// Immutable once built and shared by const pointer: safe to read from any
// number of threads and engines.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "text/vocab.h"

namespace kvtier::engine {

// The tokenizer data travels with the model (text/vocab.h).
using text::TokenType;
using text::Vocab;

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> wqkv;       // [q_dim + 2 kv_dim][hidden]: the Q rows, then K, then V
  std::vector<float> bqkv;       // [q_dim + 2 kv_dim] added to the Q, K, V rows; empty unless has_qkv_bias()
  std::vector<float> wo;         // [hidden][q_dim]
  std::vector<float> ffn_norm;   // [hidden]
  std::vector<float> w_gate_up;  // [2 ffn][hidden]: the gate rows, then the up rows
  std::vector<float> w_down;     // [hidden][ffn]
};

struct ModelWeights {
  std::vector<float> token_embd;   // [vocab][hidden]
  std::vector<float> output_norm;  // [hidden]
  std::vector<float> output;       // [vocab][hidden]; empty when embeddings are tied
  std::vector<LayerWeights> layers;

  // Checks every tensor has the size `config` implies.
  Status validate(const ModelConfig& config) const;
};

class Model {
 public:
  // Deterministic weights from `seed`: the same config and seed give the same
  // bytes on every platform. Values are rounded to bf16-representable numbers
  // (and tiny ones flushed to zero) so F16/BF16 GGUF copies are exact.
  static Result<std::shared_ptr<const Model>> synthetic(const ModelConfig& config, uint64_t seed);
  // The same weights with another vocabulary (config.vocab_size must be its size).
  static Result<std::shared_ptr<const Model>> synthetic(const ModelConfig& config, uint64_t seed, Vocab vocab);
  // Takes ownership of loaded parts after validating them.
  static Result<std::shared_ptr<const Model>> from_parts(ModelConfig config, ModelWeights weights, Vocab vocab);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Vocab& vocab() const { return vocab_; }
  // The output projection [vocab][hidden] (the embedding when tied).
  const float* output_matrix() const {
    return config_.tied_embeddings ? weights_.token_embd.data() : weights_.output.data();
  }
  // Hash of the config (name excluded) and every weight: Namespace::model_fingerprint.
  const PageHash& fingerprint() const { return fingerprint_; }

 private:
  Model(ModelConfig c, ModelWeights w, Vocab v, PageHash fp)
      : config_(std::move(c)), weights_(std::move(w)), vocab_(std::move(v)), fingerprint_(fp) {}

  ModelConfig config_;
  ModelWeights weights_;
  Vocab vocab_;
  PageHash fingerprint_;
};

// Fingerprint of a config and weights (what Model::fingerprint() returns).
PageHash model_fingerprint(const ModelConfig& config, const ModelWeights& weights);

}  // namespace kvtier::engine
