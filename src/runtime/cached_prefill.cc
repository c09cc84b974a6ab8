#include "runtime/cached_prefill.h"

#include <algorithm>

namespace kvtier {

Status prefill_front(engine::Forward& engine, CacheLease& lease, engine::SequenceKV& kv, std::span<const TokenId> prompt) {
  kv.pages = lease.pages();
  if (lease.recompute_end() <= lease.recompute_begin()) return Status::Ok();
  kv.num_tokens = lease.recompute_begin();
  engine::PrefillOptions po;
  po.layer_hook = [&](LayerIdx l) { return lease.wait_front_layer(l); };
  return engine.prefill(kv, prompt.first(lease.recompute_end()), lease.recompute_begin(), po).status();
}

Result<engine::Logits> cached_prefill(engine::Forward& engine, KVCache& cache, CacheLease& lease,
                                      engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                      const CachedPrefillOptions& options) {
  if (prefill_front(engine, lease, kv, prompt).ok()) {
    engine::PrefillOptions po;
    po.all_logits = options.all_logits;
    kv.num_tokens = lease.cached_end();
    po.layer_hook = [&](LayerIdx l) { return lease.wait_layer(l); };
    auto r = engine.prefill(kv, prompt, lease.cached_end(), po);
    if (r.ok() || lease.cached_end() == 0) return r;
  }
  // A load failed: recompute everything that was not shared in place.
  return recompute_after_failed_load(engine, cache, lease, kv, prompt, options);
}

Result<engine::Logits> recompute_after_failed_load(engine::Forward& engine, KVCache& cache, CacheLease& lease,
                                                   engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                                   const CachedPrefillOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(const uint32_t from, cache.fall_back(lease));
  kv.pages = lease.pages();  // fall_back may have given the lease pages of its own
  kv.num_tokens = from;
  engine::PrefillOptions po;
  po.all_logits = options.all_logits;
  return engine.prefill(kv, prompt, kv.num_tokens, po);
}

Result<engine::Logits> prefill_with_prompt_logprobs(engine::Forward& engine, engine::SequenceKV& kv,
                                                    std::span<const TokenId> prompt, size_t end, uint32_t top,
                                                    std::vector<engine::TokenLogprobs>& prompt_logprobs,
                                                    size_t max_logit_bytes) {
  if (end > prompt.size() || end <= kv.num_tokens)
    return Status::InvalidArgument("prompt logprobs: positions [" + std::to_string(kv.num_tokens) + ", " +
                                   std::to_string(end) + ") are not inside the prompt of " +
                                   std::to_string(prompt.size()));
  const size_t vocab = engine.model().config().vocab_size;
  const size_t slice = std::max<size_t>(1, max_logit_bytes / (vocab * sizeof(float)));
  engine::PrefillOptions po;
  po.all_logits = true;
  engine::Logits logits;
  for (size_t begin = kv.num_tokens, stop = 0; begin < end; begin = stop) {
    stop = std::min(end, begin + slice);
    KVTIER_ASSIGN_OR_RETURN(logits, engine.prefill(kv, prompt.first(stop), uint32_t(begin), po));
    for (uint32_t r = 0; r < logits.rows && begin + r + 1 < prompt.size(); ++r)
      prompt_logprobs.push_back(engine::token_logprobs(logits.row(r), prompt[begin + r + 1], top));
  }
  return logits;
}

}  // namespace kvtier
