// `kvtier bench weights`: one model file against another holding the same
// weights in another type (q8_0 or Q4_K_M against f16): on prompts drawn
// from a text (bench/prompt_text.h), the next-token distributions at every
// prompt position — KL(reference ‖ model) and top-1 agreement — and greedy
// continuations compared position by position. Both run on kvtier's engine.
#pragma once

#include <string>

#include "kvtier/status.h"

namespace kvtier::bench {

struct WeightsBenchOptions {
  std::string model;      // the .gguf under test
  std::string reference;  // the .gguf it is compared with (same shape and vocabulary)
  std::string text;       // prompt text; empty: the default for the model
  uint32_t prompts = 8;
  uint32_t prompt_tokens = 256;
  uint32_t greedy_tokens = 64;
  uint32_t threads = 0;
  uint64_t seed = 1;

  Status validate() const;
};

struct WeightsBenchResult {
  std::string model, reference, text;
  uint32_t positions = 0;        // prompt positions compared
  double kl_mean = 0;            // nats, over every prompt position
  double top1 = 0;               // share of positions whose argmax agrees
  double greedy_agreement = 0;   // share of greedy tokens that agree, position by position
  double reference_top1_prob = 0;  // the reference's mean top probability: how peaked it is

  std::string to_json() const;
  std::string to_table() const;
};

Result<WeightsBenchResult> run_weights_bench(const WeightsBenchOptions& options, std::FILE* progress);

}  // namespace kvtier::bench
