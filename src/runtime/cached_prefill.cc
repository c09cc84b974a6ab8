#include "runtime/cached_prefill.h"

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
                                      engine::SequenceKV& kv, std::span<const TokenId> prompt, bool all_logits) {
  if (prefill_front(engine, lease, kv, prompt).ok()) {
    engine::PrefillOptions po;
    po.all_logits = all_logits;
    kv.num_tokens = lease.cached_end();
    po.layer_hook = [&](LayerIdx l) { return lease.wait_layer(l); };
    auto r = engine.prefill(kv, prompt, lease.cached_end(), po);
    if (r.ok() || lease.cached_end() == 0) return r;
  }
  // A load failed: recompute everything that was not shared in place.
  return recompute_after_failed_load(engine, cache, lease, kv, prompt, all_logits);
}

Result<engine::Logits> recompute_after_failed_load(engine::Forward& engine, KVCache& cache, CacheLease& lease,
                                                   engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                                   bool all_logits) {
  kv.num_tokens = cache.fall_back(lease);
  engine::PrefillOptions po;
  po.all_logits = all_logits;
  return engine.prefill(kv, prompt, kv.num_tokens, po);
}

}  // namespace kvtier
