// RemoteTier's health: the failure state that serving calls check (admit), its backoff windows,
// the prober thread that alone probes an unreachable Redis, and the planner's link measurement.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>

#include "tiers/remote/redis_wire.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier {

using redis_wire::reply_error;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int64_t RemoteTier::clock_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(options_.clock->now().time_since_epoch()).count();
}

bool RemoteTier::degraded() const {
  return unreachable() || clock_ns() < writes_paused_until_ns_.load(std::memory_order_relaxed);
}

Status RemoteTier::admit() {
  if (!unreachable()) return Status::Ok();
  ++counters_.fast_fails;
  return Status::Unavailable("remote tier degraded (Redis unreachable or failing; probed with backoff)");
}

Status RemoteTier::admit_write() {
  KVTIER_RETURN_IF_ERROR(admit());
  if (clock_ns() >= writes_paused_until_ns_.load(std::memory_order_relaxed)) return Status::Ok();
  ++counters_.fast_fails;
  return Status::NoSpace("remote tier: writes paused after Redis answered out of memory (retried with backoff)");
}

// Doubling, capped: a dead server costs one failed probe per window.
int64_t RemoteTier::backoff_ns(uint32_t failures) const {
  int64_t backoff = std::chrono::nanoseconds(options_.backoff_initial).count();
  const int64_t cap = std::chrono::nanoseconds(options_.backoff_max).count();
  for (uint32_t i = 1; i < failures && backoff < cap; ++i) backoff *= 2;
  return std::min(backoff, cap);
}

void RemoteTier::note_result(const Status& s) {
  if (s.ok()) {
    consecutive_failures_.store(0, std::memory_order_relaxed);
    down_.store(false, std::memory_order_release);
    return;
  }
  ++counters_.io_errors;
  const uint32_t n = ++consecutive_failures_;
  next_probe_ns_.store(clock_ns() + backoff_ns(n), std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    last_error_ = s.to_string();
    if (!down_.exchange(true, std::memory_order_acq_rel) && clock_ns() >= writes_paused_until_ns_.load()) ++counters_.episodes;
  }
  cv_.notify_all();
}

void RemoteTier::note_oom(bool oom) {
  if (!oom) {
    consecutive_ooms_.store(0, std::memory_order_relaxed);
    return;
  }
  const uint32_t n = ++consecutive_ooms_;
  if (n == 1 && !unreachable()) ++counters_.episodes;
  writes_paused_until_ns_.store(clock_ns() + backoff_ns(n), std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  last_error_ = "NoSpace: redis answered a SET out of memory (maxmemory with noeviction): writes paused";
}

// While the tier is unreachable: a PING at the end of each backoff window. The windows are on the
// tier's clock, read every 10 ms of real time (a test's ManualClock moves when told). Serving
// calls fail fast meanwhile, so a hung server's timeouts are paid here, not on the engine's thread.
void RemoteTier::probe_loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || unreachable(); });
    if (stop_) return;
    if (clock_ns() < next_probe_ns_.load(std::memory_order_relaxed)) {
      cv_.wait_for(lk, std::chrono::milliseconds(10));
      continue;
    }
    lk.unlock();
    auto r = client_->command({"PING"});
    Status st = r.status();
    if (r.ok() && (*r)->type == REDIS_REPLY_ERROR) st = Status::Unavailable("redis answered PING with " + reply_error(r->get()));
    // An answer brings the tier back but keeps its count of failures: the PING may reach a node
    // that answers while the one the serving calls need does not (a cluster's other master, a
    // server paused for writes), and the next failure's window must still be the longer one.
    if (st.ok()) {
      down_.store(false, std::memory_order_release);
    } else {
      note_result(st);
    }
    lk.lock();
  }
}

Result<RemoteTier::LinkFigures> RemoteTier::measure_link(size_t bytes) {
  using Clock = std::chrono::steady_clock;
  KVTIER_RETURN_IF_ERROR(admit());
  const size_t most = largest_value_bytes(options_);
  if (bytes == 0 || bytes > most)
    return Status::InvalidArgument("measure_link: bytes must be in (0, " + std::to_string(most) + "] (a chunk entry)");
  LinkFigures f;
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto r = client_->command({"PING"}, 99);
    note_result(r.status());
    KVTIER_RETURN_IF_ERROR(r.status());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  f.latency_s = best;
  // Several values on one connection, the way a load reads its chunks.
  const std::string key = "kvtier:probe:" + std::to_string(now_ns());
  std::string value(bytes, 'k');
  auto w = client_->command({"SET", key, value, "PX", "60000"});
  note_result(w.status());
  KVTIER_RETURN_IF_ERROR(w.status());
  std::vector<RedisCommand> gets;
  for (int i = 0; i < 4; ++i) gets.push_back(RedisCommand{{"GET", key}});
  const auto t0 = Clock::now();
  Status st = client_->run(gets);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  note_result(st);
  (void)client_->command({"DEL", key});
  KVTIER_RETURN_IF_ERROR(st);
  f.bytes_per_s = s > 0 ? double(bytes) * gets.size() / s : 0;
  return f;
}

}  // namespace kvtier
