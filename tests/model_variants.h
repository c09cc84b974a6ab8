// The architecture variants the engine runs (engine/model_config.h), each on
// the tiny preset's shape, for tests that must hold for every one of them:
// the double-precision oracle, GGUF round trips, cached == recomputed.
#pragma once

#include <string>
#include <vector>

#include "engine/model.h"

namespace kvtier::testing {

// "llama" (adjacent-pair RoPE, no biases: the tiny preset itself), "qwen2"
// (rotate-half RoPE, Q/K/V biases), "llama3-scaled" (Llama 3.1 per-pair
// factors, with an original context of 64 so that most pairs are slowed at
// test lengths), "linear-scaled" (positions multiplied by 1/4).
inline std::vector<std::string> model_variant_names() { return {"llama", "qwen2", "llama3-scaled", "linear-scaled"}; }

inline Result<engine::ModelConfig> model_variant_config(const std::string& variant) {
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig c, engine::model_preset("tiny"));
  if (variant == "qwen2") {
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
  return engine::Model::synthetic(c, seed);
}

}  // namespace kvtier::testing
