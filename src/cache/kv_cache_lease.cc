// KVCache: the lease a request holds (CacheLease, CacheLeaseState): its waits for the loads, and
// the report of what it reused.
#include <chrono>

#include "cache/kv_cache.h"

namespace kvtier {

CacheLease::CacheLease(KVCache* cache) : s_(new CacheLeaseState) {
  s_->cache_ = cache;
  s_->layerwise_ = cache->options().layerwise;
}

void CacheLease::drop(CacheLeaseState* s) noexcept {
  if (s->cache_) s->cache_->release_state(*s);
  delete s;
}

const CacheLeaseState& CacheLease::state() const {
  static const CacheLeaseState kEmpty;
  return s_ ? *s_ : kEmpty;
}

const LeaseReport& CacheLease::report() {
  // After the last wait_layer the handle may not be marked done yet: the
  // lossy label needs every load's outcome, so wait for them (at once, after prefill).
  if (!s_) return state().report_;
  s_->wait_all();
  s_->fold_load_codecs();
  return s_->report_;
}

namespace {

// Runs `wait` and adds the time it blocked to `waited_ns`.
template <class Fn>
Status timed_wait(uint64_t& waited_ns, Fn&& wait) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = wait();
  waited_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return st;
}

// Layer l of one handle, or all of it when layers are not published one by one.
Status wait_loads(TransferHandle& h, LayerIdx l, bool layerwise) {
  if (!h.valid()) return Status::Ok();
  return layerwise ? h.wait_layer(l) : h.wait_all();
}

}  // namespace

Status CacheLeaseState::wait_front_layer(LayerIdx l) {
  if (!front_.valid()) return Status::Ok();
  return timed_wait(report_.load_wait_ns, [&] { return wait_loads(front_, l, layerwise_); });
}

Status CacheLeaseState::wait_layer(LayerIdx l) {
  if (!front_.valid() && !back_.valid()) return Status::Ok();
  return timed_wait(report_.load_wait_ns, [&] {
    KVTIER_RETURN_IF_ERROR(wait_loads(front_, l, layerwise_));
    return wait_loads(back_, l, layerwise_);
  });
}

void CacheLeaseState::fold_load_codecs() {
  if (codecs_folded_ || !cache_ || !loads_done()) return;
  codecs_folded_ = true;
  const uint32_t P = cache_->options_.geometry.page_tokens, C = cache_->options_.chunk_pages;
  const uint32_t rb = recompute_begin_ / P, re = recompute_end_ / P;
  for (auto [handle, firsts] : {std::pair{&front_, &front_load_pages_}, std::pair{&back_, &back_load_pages_}}) {
    if (!handle->valid()) continue;
    const TransferResult r = handle->result();
    for (size_t i = 0; i < firsts->size() && i < r.load_codecs.size(); ++i) {
      if (!r.loads[i].ok() || !kv_codec_lossy(r.load_codecs[i])) continue;
      for (uint32_t p = (*firsts)[i]; p < (*firsts)[i] + C && p < lossy_.size(); ++p)
        if (p < rb || p >= re) lossy_[p] = true;  // pages of the chunk the plan recomputes are not its
    }
  }
  recount_lossy();
}

void CacheLeaseState::recount_lossy() {
  const uint32_t P = cache_->options_.geometry.page_tokens;
  const uint32_t tokens = static_cast<uint32_t>(std::count(lossy_.begin(), lossy_.end(), true)) * P;
  cache_->stats_.lossy_tokens += tokens;
  cache_->stats_.lossy_tokens -= report_.lossy_tokens;
  report_.lossy_tokens = tokens;
}

uint32_t CacheLeaseState::lossy_from() const {
  auto it = std::find(lossy_.begin(), lossy_.end(), true);
  return it == lossy_.end() ? UINT32_MAX : static_cast<uint32_t>(it - lossy_.begin());
}

void CacheLeaseState::wait_all() {
  if (!front_.valid() && !back_.valid()) return;
  (void)timed_wait(report_.load_wait_ns, [&] {
    if (front_.valid()) (void)front_.wait_all();
    if (back_.valid()) (void)back_.wait_all();
    return Status::Ok();
  });
}

}  // namespace kvtier
