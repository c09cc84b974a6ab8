// The architecture variants the engine runs (engine/model_config.h), each on
// the tiny preset's shape, for tests that must hold for every one of them:
// the double-precision oracle, GGUF round trips, cached == recomputed.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quantize.h"

namespace kvtier::testing {

// "llama" (adjacent-pair RoPE, no biases: the tiny preset itself), "qwen2"
// (rotate-half RoPE, Q/K/V biases), "llama3-scaled" (Llama 3.1 per-pair
// factors, with an original context of 64 so that most pairs are slowed at
// test lengths), "linear-scaled" (positions multiplied by 1/4).
inline std::vector<std::string> model_variant_names() { return {"llama", "qwen2", "llama3-scaled", "linear-scaled"}; }

// The variants the cache's exactness must hold for: the above, and "q4_k_m", the engine's
// quantized path (weights held as Q4_K/Q6_K blocks, activations quantized per block) on a
// tiny shape whose rows are multiples of 256 so the K-quants apply to every matrix.
inline std::vector<std::string> exactness_variant_names() {
  std::vector<std::string> v = model_variant_names();
  v.push_back("q4_k_m");
  return v;
}

inline Result<engine::ModelConfig> model_variant_config(const std::string& variant) {
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig c, engine::model_preset("tiny"));
  if (variant == "q4_k_m") {
    c.hidden_size = 256, c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 64, c.ffn_size = 512;
  } else if (variant == "qwen2") {
    c.arch = engine::Arch::kQwen2;
  } else if (variant == "llama3-scaled") {
    KVTIER_RETURN_IF_ERROR(c.apply_llama3_rope_scaling({.original_context = 64}));
  } else if (variant == "linear-scaled") {
    c.rope_freq_scale = 0.25f;
  } else if (variant != "llama") {
    return Status::InvalidArgument("unknown model variant " + variant);
  }
  return c;
}

inline Result<std::shared_ptr<const engine::Model>> model_variant(const std::string& variant, uint64_t seed) {
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig c, model_variant_config(variant));
  KVTIER_ASSIGN_OR_RETURN(auto model, engine::Model::synthetic(c, seed));
  if (variant != "q4_k_m") return model;
  // Quantized as a file would be: written as Q4_K_M and loaded back.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvtier-variant-" + std::to_string(::getpid()) + "-" + std::to_string(seed) + ".gguf"))
                               .string();
  KVTIER_ASSIGN_OR_RETURN(engine::WeightFormat format, engine::parse_weight_format(variant));
  Status written = engine::write_gguf(*model, path, {.weight_type = format});
  auto loaded = written.ok() ? engine::load_gguf(path) : Result<std::shared_ptr<const engine::Model>>(written);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  return loaded;
}

}  // namespace kvtier::testing
