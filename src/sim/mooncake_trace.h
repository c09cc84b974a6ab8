// The deterministic expansion of a Mooncake trace's hash ids into token ids, and the bounds every
// trace reader applies. Traces (Mooncake's JSON lines and kvtier's) are read by one reader,
// sim/kvtier_trace.h, for the replay and the index benchmark alike.
#pragma once

#include <cstdint>
#include <span>

#include "kvtier/types.h"

namespace kvtier {

// Largest hash id the expansion accepts: every id below it gives a distinct
// first token, so two different ids never give the same block.
inline constexpr uint64_t kMaxExpandableHashId = (uint64_t{1} << 31) - 1;

// The most tokens one request of a trace may have (past any model's context): a replay or a bench
// holds a request's tokens and page hashes in memory, and input_length 2^32-1 aborted with bad_alloc.
inline constexpr uint64_t kMaxTraceInputTokens = uint64_t{1} << 24;

// Writes the block_tokens token ids of block `hash_id` to out (out.size() ==
// block_tokens). Deterministic: the same id always gives the same tokens;
// ids differ in their first token. Tokens lie in [0, 2^31).
void expand_block(uint64_t hash_id, std::span<TokenId> out);

}  // namespace kvtier
