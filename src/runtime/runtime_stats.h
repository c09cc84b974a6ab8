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

  void record(const PrefillReport& r);
};

std::string runtime_stats_json(const KVCacheStats& s, const RuntimeCounters& c, const CostProfile& profile,
                               const RuntimeOptions& o, size_t running);
std::string runtime_metrics_text(const KVCacheStats& s, const RuntimeCounters& c, size_t running);

}  // namespace kvtier
