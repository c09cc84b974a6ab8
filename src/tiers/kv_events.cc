#include "tiers/kv_events.h"

#include <random>

namespace kvtier {

std::string_view kv_event_unit_name(KvEventUnit u) { return u == KvEventUnit::kPage ? "page" : "chunk"; }

KvEventLog::Subscription::Subscription(KvEventLog& log) : log_(log) { log_.subscribe(); }
KvEventLog::Subscription::~Subscription() { log_.unsubscribe(); }

namespace {

// Where a log's numbers start: at random in [2^40, 2^52), so that a number from another run of the
// server (a router that followed it before a restart) is never mistaken for one of this run's, and
// every number stays exact as a JSON number in any reader (below 2^53).
uint64_t random_first_seq() {
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) | rd();
  return (uint64_t(1) << 40) + r % ((uint64_t(1) << 52) - (uint64_t(1) << 40));
}

}  // namespace

void KvEventLog::subscribe() {
  std::lock_guard lock(mu_);
  if (seq_ == 0) seq_ = first_ = random_first_seq();  // the first listener ever: this run's numbers begin
  if (listeners_++ > 0) return;
  if (recording_.load(std::memory_order_relaxed) && !lingered_out_locked()) return;  // back in time: resumable
  if (recording_.load(std::memory_order_relaxed)) stop_locked();
  // Nothing was recorded for a while: skip a number so that every earlier one is a gap.
  ++seq_;
  first_ = seq_ + 1;
  recording_.store(true, std::memory_order_relaxed);
}

void KvEventLog::unsubscribe() {
  std::lock_guard lock(mu_);
  if (--listeners_ > 0) return;
  idle_since_ = clock_->now();
  if (linger_.count() == 0) stop_locked();
}

bool KvEventLog::lingered_out_locked() const { return clock_->now() - idle_since_ > linger_; }

void KvEventLog::stop_locked() {
  recording_.store(false, std::memory_order_relaxed);
  kept_.clear();
  first_ = seq_ + 1;
}

void KvEventLog::append(std::span<const KvEvent> events) {
  if (events.empty() || !active()) return;
  {
    std::lock_guard lock(mu_);
    if (!recording_.load(std::memory_order_relaxed)) return;  // stopped meanwhile
    if (listeners_ == 0 && lingered_out_locked()) return stop_locked();
    for (const KvEvent& e : events) {
      kept_.push_back(e);
      ++seq_;
    }
    while (kept_.size() > capacity_) kept_.pop_front(), ++first_;
  }
  cv_.notify_all();
}

uint64_t KvEventLog::seq() const {
  std::lock_guard lock(mu_);
  return seq_;
}

bool KvEventLog::read_since(uint64_t since, size_t max, std::vector<KvEvent>& out, uint64_t& last) const {
  std::lock_guard lock(mu_);
  last = since;
  if (since > seq_ || since + 1 < first_) return false;
  const uint64_t n = std::min<uint64_t>(seq_ - since, max);
  const size_t at = size_t(since + 1 - first_);
  out.insert(out.end(), kept_.begin() + ptrdiff_t(at), kept_.begin() + ptrdiff_t(at + n));
  last = since + n;
  return true;
}

bool KvEventLog::wait_past(uint64_t since, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return seq_ > since; });
}

}  // namespace kvtier
