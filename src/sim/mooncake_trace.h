// Mooncake trace reader (JSON lines: timestamp, input_length, output_length,
// hash_ids) and the deterministic expansion of hash ids into token ids that
// the index benchmark and the replay simulator share.
//
// A trace is a plain value (requests with their hash ids in one flat array);
// reading is single-threaded, a loaded trace is safe to share read-only.
// Malformed input is reported as InvalidArgument naming the line number.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/types.h"

namespace kvtier {

struct MooncakeRequest {
  double timestamp_ms = 0;   // arrival time (the trace's unit: milliseconds)
  uint32_t input_length = 0;   // prompt tokens
  uint32_t output_length = 0;  // generated tokens
  uint64_t hash_offset = 0;    // first of this request's ids in MooncakeTrace::hash_ids
  uint32_t hash_count = 0;
};

struct MooncakeTrace {
  std::vector<MooncakeRequest> requests;
  std::vector<uint64_t> hash_ids;  // every request's block ids, back to back

  std::span<const uint64_t> ids(size_t i) const {
    return {hash_ids.data() + requests[i].hash_offset, requests[i].hash_count};
  }
};

struct MooncakeReadOptions {
  // Tokens per hash id (Mooncake publishes 512). A request whose
  // input_length exceeds hash_ids.size() * block_tokens is malformed.
  uint32_t block_tokens = 512;
  Status validate() const;
};

// Parses JSON lines; blank lines are skipped.
Result<MooncakeTrace> parse_mooncake_trace(std::string_view text, const MooncakeReadOptions& options = {});
Result<MooncakeTrace> read_mooncake_trace(const std::string& path, const MooncakeReadOptions& options = {});

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

// The prompt of request i: its blocks expanded and truncated to input_length.
Status expand_prompt(const MooncakeTrace& trace, size_t i, uint32_t block_tokens, std::vector<TokenId>& out);

}  // namespace kvtier
