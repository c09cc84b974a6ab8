#include "server/cache_view.h"

#include <algorithm>

namespace kvtier::server {
namespace {

// Disk and remote: present only when the cache has them.
void read_lower_tier(const TierStats& st, bool present, TierKind tier, TierSample& s) {
  const int t = int(tier);
  s.present[t] = present;
  if (!present) return;
  s.used_bytes[t] = st.bytes;
  s.capacity_bytes[t] = st.capacity_bytes;
  s.checksum_failures += st.checksum_failures;
  s.forged_entries += st.forged_entries;
}

}  // namespace

TierSample tier_sample_from_stats(const RuntimeStats& stats, double t_s) {
  const KVCacheStats& c = stats.cache;
  TierSample s;
  s.t_s = t_s;
  const uint64_t page_bytes = c.pool.page_bytes;
  s.used_bytes[0] = uint64_t(c.pool.used_pages) * page_bytes;
  s.capacity_bytes[0] = uint64_t(c.pool.total_pages) * page_bytes;
  s.cached_pages[0] = c.index.device_pages;
  s.present[1] = c.host_slots > 0;
  s.used_bytes[1] = uint64_t(c.host_slots - std::min(c.host_slots, c.host_free_slots)) * page_bytes;
  s.capacity_bytes[1] = uint64_t(c.host_slots) * page_bytes;
  s.cached_pages[1] = c.index.host_pages;
  read_lower_tier(c.disk, c.disk_present, TierKind::kDisk, s);
  read_lower_tier(c.remote, c.remote_present, TierKind::kRemote, s);
  s.prompt_tokens = stats.counters.prompt_tokens;
  for (int t = 0; t < kNumTiers; ++t) {
    s.cached_tokens[t] = stats.counters.cached_tokens_by_tier[t];
    s.bytes_loaded[t] = c.bytes_loaded_by_tier[t];
    s.bytes_stored[t] = c.bytes_stored_by_tier[t];
    s.evicted_pages[t] = c.evicted_pages_by_tier[t];
  }
  s.demoted_pages = c.demoted_pages;
  s.spilled_chunks = c.spilled_chunks;
  s.prefetched_pages = c.prefetched_pages;
  s.prefetch_failures = c.prefetch_failures;
  s.load_failures = c.load_failures;
  return s;
}

Status CacheViewOptions::validate() const {
  if (sample_every.count() <= 0) return Status::InvalidArgument("cache view: sample_every must be positive");
  if (clock == nullptr) return Status::InvalidArgument("cache view: clock must be set");
  if (history < 2) return Status::InvalidArgument("cache view: history must keep at least 2 samples");
  if (max_age.count() < 0 || max_wait.count() < 0) return Status::InvalidArgument("cache view: negative max_age or max_wait");
  return tree.validate();
}

Result<std::shared_ptr<CacheView>> CacheView::create(const CacheViewOptions& options, Post post) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  if (!post) return Status::InvalidArgument("cache view: no way to reach the scheduler");
  auto view = std::shared_ptr<CacheView>(new CacheView(options, std::move(post)));
  view->sampler_ = std::thread([raw = view.get()] { raw->sampler_loop(); });
  return view;
}

CacheView::CacheView(const CacheViewOptions& options, Post post)
    : options_(options), post_(std::move(post)), started_(options.clock->now()) {}

CacheView::~CacheView() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void CacheView::ask_locked(std::unique_lock<std::mutex>& lk, bool with_tree) {
  bool& pending = with_tree ? tree_pending_ : sample_pending_;
  if (pending) return;
  pending = true;
  std::weak_ptr<CacheView> weak = weak_from_this();
  lk.unlock();
  const bool posted = post_([weak, with_tree](Runtime& runtime) {
    if (auto view = weak.lock()) view->refresh(runtime, with_tree);
  });
  lk.lock();
  if (!posted) pending = false;
}

void CacheView::sampler_loop() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    ask_locked(lk, false);
    cv_.wait_for(lk, options_.sample_every, [&] { return stopping_; });
  }
}

std::shared_ptr<const PublishedTree> CacheView::tree() {
  std::unique_lock lk(mu_);
  const auto asked = options_.clock->now();
  if (tree_ && asked - tree_->taken <= options_.max_age) return tree_;
  ask_locked(lk, true);
  cv_.wait_for(lk, options_.max_wait, [&] { return tree_ && tree_->taken >= asked; });
  return tree_;
}

std::vector<TierSample> CacheView::samples() {
  std::unique_lock lk(mu_);
  const auto asked = options_.clock->now();
  if (samples_.empty() || asked - last_sample_ > options_.max_age) {
    ask_locked(lk, false);
    cv_.wait_for(lk, options_.max_wait, [&] { return !samples_.empty() && last_sample_ >= asked; });
  }
  return {samples_.begin(), samples_.end()};
}

void CacheView::refresh(const Runtime& runtime, bool with_tree) {
  const auto began = options_.clock->now();
  const TierSample sample = tier_sample_from_stats(runtime.stats(), std::chrono::duration<double>(began - started_).count());
  std::shared_ptr<PublishedTree> tree;
  if (with_tree) {
    tree = std::make_shared<PublishedTree>();
    const auto t0 = std::chrono::steady_clock::now();  // a measurement, not a decision: real time
    tree->snapshot = runtime.cache_tree(options_.tree);
    tree->taken = began;
    tree->take_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  {
    std::lock_guard lk(mu_);
    // The history spans history × sample_every of time, whatever else asks for samples (a
    // dashboard's polls): a sample within half a period of the last one kept replaces the newest
    // instead of adding one (at most two a period are kept), and samples older than the span go.
    // Kept by count, extra polls shrank the "5 minutes" to 85 s.
    const double period = std::chrono::duration<double>(options_.sample_every).count();
    if (!samples_.empty() && sample.t_s - kept_t_s_ < period / 2) {
      samples_.back() = sample;
    } else {
      samples_.push_back(sample);
      kept_t_s_ = sample.t_s;
    }
    while (samples_.front().t_s < sample.t_s - period * options_.history) samples_.pop_front();
    last_sample_ = began;
    if (!with_tree) sample_pending_ = false;
    if (with_tree) {
      tree_ = std::move(tree);
      tree_pending_ = false;
    }
  }
  cv_.notify_all();
}

}  // namespace kvtier::server
