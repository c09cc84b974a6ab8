// cached_prefill: runs the engine over a prompt whose KV is partly provided
// by a CacheLease (KVCache::apply or KVCache::fresh).
//
// It follows the lease's plan: first the front recompute range (layer l
// waits only for the loads before it), then the rest of the prompt from the
// end of the cached pages, layer l waiting for layer l of every load — so
// loading overlaps compute. If a load fails (corrupt or unreadable KV, which
// the tiers detect and never deliver as valid), it falls back to recomputing
// everything that was not shared in place: the output is the same either way.
// Called on the thread that owns the cache and the engine.
#pragma once

#include <span>

#include "cache/kv_cache.h"
#include "engine/engine.h"
#include "engine/sampler.h"

namespace kvtier {

// The front recompute range of the lease's plan (nothing when it has none):
// positions [recompute_begin, recompute_end), layer l waiting for the loads
// before it. `kv` receives the lease's page table.
Status prefill_front(engine::Forward& engine, CacheLease& lease, engine::SequenceKV& kv, std::span<const TokenId> prompt);

// What a prefill over a lease computes besides the last position's logits.
struct CachedPrefillOptions {
  bool all_logits = false;  // the logits of every computed position
};

// After a load of the lease failed: recomputes everything that was not shared in place
// (KVCache::fall_back counts the failure, and gives the lease pages of its own where it used
// shared pages in place past the leading run), no layer waiting for a load.
Result<engine::Logits> recompute_after_failed_load(engine::Forward& engine, KVCache& cache, CacheLease& lease,
                                                   engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                                   const CachedPrefillOptions& options = {});

// `kv` receives the lease's page table; on success kv.num_tokens == prompt.size().
Result<engine::Logits> cached_prefill(engine::Forward& engine, KVCache& cache, CacheLease& lease,
                                      engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                      const CachedPrefillOptions& options = {});

// Positions [kv.num_tokens, end) of `prompt` computed with every token's log-probability
// (appended to `prompt_logprobs`: the one of token i + 1 for each position i < prompt.size() - 1,
// with `top` alternatives), no cached KV used (`kv` holds its pages; a prompt is computed by one
// call or by several in order). The logits come in slices of rows (at most `max_logit_bytes` of
// them at once, at least a row; all of a 16k-token prompt's took 2 GB with a 32k vocabulary) and
// are kept only for the last slice, whose last row is position end - 1.
Result<engine::Logits> prefill_with_prompt_logprobs(engine::Forward& engine, engine::SequenceKV& kv,
                                                    std::span<const TokenId> prompt, size_t end, uint32_t top,
                                                    std::vector<engine::TokenLogprobs>& prompt_logprobs,
                                                    size_t max_logit_bytes = size_t(64) << 20);

}  // namespace kvtier
