// Counters kept by the Runtime and their two renderings: JSON for
// GET /v1/cache/stats and Prometheus text for GET /metrics. Plain values;
// owned by the runtime's thread.
#pragma once

#include <string>

#include "cache/kv_cache.h"
#include "runtime/runtime.h"

namespace kvtier {

struct RuntimeCounters {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t cached_tokens_by_tier[kNumTiers] = {};
  uint64_t decode_tokens = 0;
  double ttft_seconds_sum = 0;
  // Non-prefix reuse (BlendReport), apart from exact cache hits.
  uint64_t blended_requests = 0;
  uint64_t blended_tokens = 0;          // segment KV kept (approximate)
  uint64_t blend_recomputed_tokens = 0; // segment positions recomputed by the selection
  uint64_t blend_stored_tokens = 0;     // computed to store first-seen segments
  uint64_t blend_failed_segments = 0;   // segment loads that failed verification (never used)

  void record(const PrefillReport& r);
};

std::string runtime_stats_json(const KVCacheStats& s, const RuntimeCounters& c, const CostProfile& profile,
                               const RuntimeOptions& o, size_t running);
std::string runtime_metrics_text(const KVCacheStats& s, const RuntimeCounters& c, size_t running);

}  // namespace kvtier
