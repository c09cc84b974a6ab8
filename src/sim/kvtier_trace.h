// Replay traces: the request stream `kvtier replay` feeds through the cache.
//
// Two JSON-lines formats are read into one value type:
//  * mooncake — the Mooncake FAST'25 trace: `timestamp` (ms), `input_length`,
//    `output_length`, `hash_ids` (one id per block of block_tokens tokens;
//    equal ids at equal positions mean equal prefixes).
//  * kvtier   — `timestamp` (ms) and either `tokens` (the prompt's token ids)
//    or `hash_ids` (as in mooncake); optional `input_length`,
//    `output_length` and `cache_salt` (a tenant salt: requests with different
//    salts never share cache, exactly as in the server's namespaces).
// Both formats may carry hints, as an agent's client would send them:
// `retain_s` (seconds the request's prefix should stay: a retention hint,
// KVCache::retain, at most 86400) and `prefetch_at` (ms on the trace's own
// time base, at most `timestamp`: when the client asked for the prompt's
// prefix to be read ahead, POST /v1/cache/prefetch).
// A malformed line is an InvalidArgument naming its line number; with
// skip_bad_lines it is counted (and the first error kept) instead.
//
// A ReplayTrace is a plain value: requests in file order with their ids or
// tokens in flat arrays. Reading is single-threaded; a loaded trace is safe
// to share read-only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/types.h"

namespace kvtier {

enum class TraceFormat : uint8_t { kMooncake = 0, kKvtier = 1 };
Result<TraceFormat> parse_trace_format(std::string_view name);  // mooncake | kvtier
std::string_view trace_format_name(TraceFormat f);

struct ReplayRequest {
  double timestamp_ms = 0;
  uint32_t input_length = 0;   // prompt tokens
  uint32_t output_length = 0;  // generated tokens (informational)
  uint32_t salt = 0;           // index into ReplayTrace::salts (0 = no salt)
  uint32_t retain_s = 0;       // retention hint (0: none)
  double prefetch_at_ms = -1;  // read-ahead hint (< 0: none)
  bool has_tokens = false;     // tokens[offset, offset+count) rather than hash_ids[...]
  uint64_t offset = 0;
  uint32_t count = 0;
};

struct ReplayTrace {
  std::vector<ReplayRequest> requests;
  std::vector<uint64_t> hash_ids;  // block ids of every id-based request, back to back
  std::vector<TokenId> tokens;     // prompts of every token-based request, back to back
  std::vector<std::string> salts{std::string()};  // distinct cache_salt values; [0] is "no salt"
  uint32_t block_tokens = 512;     // tokens per hash id
  uint64_t skipped_lines = 0;      // malformed lines passed over (skip_bad_lines)
  std::string first_skipped;       // the first of those errors, for the report

  bool any_tokens() const { return !tokens.empty(); }
  std::span<const uint64_t> ids(const ReplayRequest& r) const { return {hash_ids.data() + r.offset, r.count}; }
  std::span<const TokenId> prompt(const ReplayRequest& r) const { return {tokens.data() + r.offset, r.count}; }
};

struct TraceReadOptions {
  TraceFormat format = TraceFormat::kMooncake;
  uint32_t block_tokens = 512;
  bool skip_bad_lines = false;
  Status validate() const;
};

// Blank lines are ignored. Hash ids must lie in [0, 2^31) (the range the
// deterministic block expansion keeps collision-free).
Result<ReplayTrace> parse_replay_trace(std::string_view text, const TraceReadOptions& options);
Result<ReplayTrace> read_replay_trace(const std::string& path, const TraceReadOptions& options);

// The prompt of a request of `trace`: its tokens, or its hash ids' blocks expanded (expand_block)
// and cut to input_length. InvalidArgument for a request the reader would refuse.
Status expand_request(const ReplayTrace& trace, const ReplayRequest& r, std::vector<TokenId>& out);

}  // namespace kvtier
