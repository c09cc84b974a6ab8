// The index benchmark behind `kvtier bench index`: replays prompts in order
// through match → insert → evict-to-capacity on one PrefixIndex and reports
// hit ratio, throughput, match latency and metadata cost, with a plain
// memcmp over the same prompt bytes (measured in the same run) as the floor
// any matcher is compared against. Single-threaded; the caller owns the
// prompt source. The trace reading and token expansion live in src/sim.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "index/eviction_policy.h"
#include "kvtier/types.h"

namespace kvtier {

struct IndexBenchOptions {
  uint32_t page_tokens = 16;
  uint64_t capacity_tokens = 0;  // device capacity; 0 = unlimited
  EvictionPolicyKind policy = EvictionPolicyKind::kLru;
  bool store_hashes = true;
  Status validate() const;
};

// Fills `out` with the tokens of prompt i (0 <= i < count). Not timed.
struct PromptSource {
  size_t count = 0;
  std::function<Status(size_t i, std::vector<TokenId>& out)> fill;
};

struct IndexBenchReport {
  uint64_t requests = 0;
  uint64_t tokens = 0;      // prompt tokens replayed
  uint64_t hit_tokens = 0;  // tokens served from the index (whole matched pages)
  double token_hit_ratio = 0;
  double seconds = 0;  // time inside match + insert + evict
  double tokens_per_s = 0;
  double cpu_seconds = 0;       // thread CPU time of the same work (robust on a busy machine)
  double tokens_per_cpu_s = 0;
  double match_p50_us = 0;
  double match_p99_us = 0;
  uint64_t evicted_pages = 0;
  uint64_t cached_tokens = 0;  // at the end of the replay
  uint64_t nodes = 0;
  uint64_t metadata_bytes = 0;
  double bytes_per_cached_token = 0;
  double memcmp_seconds = 0;
  double memcmp_tokens_per_s = 0;  // floor: memcmp of every prompt against a copy of itself
  double ratio_to_memcmp = 0;      // tokens_per_s / memcmp_tokens_per_s
  IndexBenchOptions options;
  std::string policy_name;
};

Result<IndexBenchReport> run_index_bench(const IndexBenchOptions& options, const PromptSource& prompts);

std::string format_table(const IndexBenchReport& r);
std::string format_json(const IndexBenchReport& r);  // one JSON object

}  // namespace kvtier
