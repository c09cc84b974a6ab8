// Model: a Llama-family model (engine/model_config.h: llama or qwen2), plus its
// vocabulary and fingerprint. Built from deterministic synthetic weights (a
// preset and a seed: f32) or loaded from a GGUF file (engine/gguf.h): matrices
// stay in the file's type (engine/weights.h); norms and biases are f32.
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

#include "model/model_config.h"
#include "engine/weights.h"
#include "text/vocab.h"

namespace kvtier::engine {

// The tokenizer data travels with the model (text/vocab.h).
using text::TokenType;
using text::Vocab;

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  Linear wqkv;                   // [q_dim + 2 kv_dim][hidden]: the Q rows, then K, then V
  std::vector<float> bqkv;       // [q_dim + 2 kv_dim] added to the Q, K, V rows; empty unless has_qkv_bias()
  Linear wo;                     // [hidden][q_dim]
  std::vector<float> ffn_norm;   // [hidden]
  Linear w_gate_up;              // [2 ffn][hidden]: the gate rows, then the up rows
  Linear w_down;                 // [hidden][ffn]
};

struct ModelWeights {
  Linear token_embd;               // [vocab][hidden]
  std::vector<float> output_norm;  // [hidden]
  Linear output;                   // [vocab][hidden]; empty when embeddings are tied
  std::vector<LayerWeights> layers;

  // Checks every tensor has the shape `config` implies.
  Status validate(const ModelConfig& config) const;
  // Bytes the weights take in memory.
  uint64_t bytes() const;
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
  const Linear& output_matrix() const { return config_.tied_embeddings ? weights_.token_embd : weights_.output; }
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

// The values of synthetic tensor number `tensor_id` (Model::synthetic numbers them: token_embd 0,
// output_norm 1, output 2 when untied, then per layer attn_norm, wqkv, wo, ffn_norm, w_gate_up,
// w_down, then every layer's bqkv): n uniform values with standard deviation `sigma` around
// `mean`, rounded to bf16-representable numbers; the stream depends only on (seed, tensor_id).
void synthetic_fill(std::vector<float>& v, size_t n, uint64_t seed, uint64_t tensor_id, float mean, float sigma);

// Fingerprint of a config and weights (what Model::fingerprint() returns): a hash of the
// config and of every tensor's f32 values, dequantized a few rows at a time as they stream
// past, so a file's fingerprint does not depend on the type its weights are held in.
PageHash model_fingerprint(const ModelConfig& config, const ModelWeights& weights);

}  // namespace kvtier::engine
