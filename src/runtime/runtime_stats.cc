#include "runtime/runtime.h"

namespace kvtier {

void RuntimeCounters::record(const PrefillReport& r) {
  ++requests;
  prompt_tokens += r.prompt_tokens;
  cached_tokens += r.cached_tokens;
  for (int t = 0; t < kNumTiers; ++t) cached_tokens_by_tier[t] += r.cached_tokens_by_tier[t];
  ttft_seconds_sum += r.ttft_s;
  blended_requests += r.blend.blended;
  blended_tokens += r.blend.blended_tokens;
  blend_recomputed_tokens += r.blend.recomputed_tokens;
  blend_stored_tokens += r.blend.stored_segment_tokens;
  blend_failed_segments += r.blend.failed_segments;
}

}  // namespace kvtier
