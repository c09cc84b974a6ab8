// Comparing a model's outputs under approximate KV with its exact outputs:
// the next-token distributions of two logit rows, and two greedy
// continuations. Shared by `bench blend` and `bench codec`. Pure functions.
#pragma once

#include <cstddef>
#include <span>

#include "kvtier/types.h"

namespace kvtier::bench {

// KL(p ‖ q) of the softmax distributions of two logit rows of equal size, in nats (>= 0).
double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits);

// The largest softmax probability of a logit row (how peaked the next-token distribution is).
double top_probability(std::span<const float> logits);

// The gap between a logit row's two largest logits (0 for fewer than two):
// how near a tie the greedy choice at that position is.
double top2_margin(std::span<const float> logits);

// Positions where two token sequences agree, position by position over the shorter one.
size_t same_positions(std::span<const TokenId> a, std::span<const TokenId> b);

// Length of the common leading run of two token sequences.
size_t common_prefix_length(std::span<const TokenId> a, std::span<const TokenId> b);

}  // namespace kvtier::bench
