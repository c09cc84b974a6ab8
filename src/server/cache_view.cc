#include "server/cache_view.h"

#include <nlohmann/json.hpp>

namespace kvtier::server {
namespace {

using nlohmann::json;

uint64_t number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

void read_by_tier(const json& doc, const char* key, uint64_t (&out)[kNumTiers]) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_object()) return;
  for (int t = 0; t < kNumTiers; ++t) out[t] = number(*it, std::string(tier_name(TierKind(t))).c_str());
}

// Disk and remote: present only when the document has their object.
void read_lower_tier(const json& doc, TierKind tier, TierSample& s) {
  const auto it = doc.find(std::string(tier_name(tier)));
  const int t = int(tier);
  s.present[t] = it != doc.end() && it->is_object();
  if (!s.present[t]) return;
  s.used_bytes[t] = number(*it, "bytes");
  s.capacity_bytes[t] = number(*it, "capacity_bytes");
  s.checksum_failures += number(*it, "checksum_failures");
  s.forged_entries += number(*it, "forged_entries");
}

}  // namespace

Result<TierSample> tier_sample_from_stats(std::string_view stats_json, double t_s) {
  const json doc = json::parse(stats_json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Status::InvalidArgument("cache statistics are not a JSON object");
  TierSample s;
  s.t_s = t_s;
  const json& device = doc.value("device", json::object());
  const uint64_t page_bytes = number(device, "page_bytes");
  s.used_bytes[0] = number(device, "used_pages") * page_bytes;
  s.capacity_bytes[0] = number(device, "pages") * page_bytes;
  s.cached_pages[0] = number(device, "cached_pages");
  const json& host = doc.value("host", json::object());
  const uint64_t slots = number(host, "slots");
  s.present[1] = slots > 0;
  s.used_bytes[1] = (slots - std::min(slots, number(host, "free_slots"))) * page_bytes;
  s.capacity_bytes[1] = slots * page_bytes;
  s.cached_pages[1] = number(host, "cached_pages");
  read_lower_tier(doc, TierKind::kDisk, s);
  read_lower_tier(doc, TierKind::kRemote, s);
  s.prompt_tokens = number(doc, "prompt_tokens");
  read_by_tier(doc, "cached_tokens_by_tier", s.cached_tokens);
  read_by_tier(doc, "bytes_loaded_by_tier", s.bytes_loaded);
  read_by_tier(doc, "bytes_stored_by_tier", s.bytes_stored);
  read_by_tier(doc, "evicted_pages_by_tier", s.evicted_pages);
  const json& moved = doc.value("moved_down", json::object());
  s.demoted_pages = number(moved, "demoted_pages");
  s.spilled_chunks = number(moved, "spilled_chunks");
  const json& prefetch = doc.value("prefetch", json::object());
  s.prefetched_pages = number(prefetch, "pages");
  s.prefetch_failures = number(prefetch, "failures");
  s.load_failures = number(doc, "load_failures");
  return s;
}

Status CacheViewOptions::validate() const {
  if (sample_every.count() <= 0) return Status::InvalidArgument("cache view: sample_every must be positive");
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

CacheView::CacheView(const CacheViewOptions& options, Post post) : options_(options), post_(std::move(post)) {}

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
  const auto asked = Clock::now();
  if (tree_ && asked - tree_->taken <= options_.max_age) return tree_;
  ask_locked(lk, true);
  cv_.wait_for(lk, options_.max_wait, [&] { return tree_ && tree_->taken >= asked; });
  return tree_;
}

std::vector<TierSample> CacheView::samples() {
  std::unique_lock lk(mu_);
  const auto asked = Clock::now();
  if (samples_.empty() || asked - last_sample_ > options_.max_age) {
    ask_locked(lk, false);
    cv_.wait_for(lk, options_.max_wait, [&] { return !samples_.empty() && last_sample_ >= asked; });
  }
  return {samples_.begin(), samples_.end()};
}

void CacheView::refresh(const Runtime& runtime, bool with_tree) {
  const auto began = Clock::now();
  auto sample = tier_sample_from_stats(runtime.stats_json(), std::chrono::duration<double>(began - started_).count());
  std::shared_ptr<PublishedTree> tree;
  if (with_tree) {
    tree = std::make_shared<PublishedTree>();
    tree->snapshot = runtime.cache_tree(options_.tree);
    tree->taken = began;
    tree->take_s = std::chrono::duration<double>(Clock::now() - began).count();
  }
  {
    std::lock_guard lk(mu_);
    if (sample.ok()) {
      samples_.push_back(*sample);
      while (samples_.size() > options_.history) samples_.pop_front();
      last_sample_ = began;
    }
    if (!with_tree) sample_pending_ = false;
    if (with_tree) {
      tree_ = std::move(tree);
      tree_pending_ = false;
    }
  }
  cv_.notify_all();
}

}  // namespace kvtier::server
