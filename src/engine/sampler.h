// Sampler: picks the next token from a row of logits. Greedy when
// temperature is 0; otherwise softmax at `temperature`, restricted to the
// top_k most likely tokens and then to the smallest set whose probability
// reaches top_p, drawn with a seeded generator (same seed, same draws). A NaN
// logit is never drawn; where logits are +inf, one of those is, alike.
// One Sampler per sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::engine {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  uint32_t top_k = 0;        // 0: no limit
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;
  // OpenAI's adjustments of the logits before anything else (greedy too): a bias per token id
  // (each in [-100, 100]), and penalties on the tokens this sampler has drawn so far (each in
  // [-2, 2]): logit -= frequency_penalty · count + presence_penalty · (count > 0).
  std::vector<std::pair<TokenId, float>> logit_bias;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // vLLM's min_p in [0, 1]: tokens less likely than min_p times the most likely one are dropped.
  float min_p = 0.0f;

  Status validate() const;
};

class Sampler {
 public:
  static Result<Sampler> create(const SamplerOptions& options);
  TokenId sample(std::span<const float> logits);

 private:
  explicit Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}
  std::span<const float> adjusted(std::span<const float> logits);  // logit_bias and penalties applied
  size_t weigh(std::span<const float> logits);  // fills cand_; how many
  size_t nucleus(double total);                 // sorts cand_'s top; how many reach top_p of `total`
  TokenId draw();                               // one of cand_ (top_p applied)
  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> cand_;
  std::vector<float> adjusted_;                 // the logits with o_'s adjustments
  std::vector<std::pair<TokenId, uint32_t>> drawn_;  // tokens drawn and how often (with penalties)
};

// The log-probability of `token` under softmax(logits) (the model's own
// distribution, before temperature or truncation) and the `top` most likely
// tokens with theirs, most likely first (ties: lower id first).
struct TokenLogprobs {
  TokenId token = -1;
  float logprob = 0;
  std::vector<std::pair<TokenId, float>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, TokenId token, uint32_t top);

// Index of the largest logit (lowest index on ties; NaN never; 0 when every logit is NaN).
TokenId argmax(std::span<const float> logits);

}  // namespace kvtier::engine
