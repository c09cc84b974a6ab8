// KvEventLog: what an instance's cache gains and loses, as one numbered
// stream that a router (GET /v1/cache/events, docs/SCALING.md) follows to know
// what each instance holds in every tier.
//
// Two sources append to it: KVCache (the prefix index's page events: a page
// stored on the device or host, moved between them, removed; the index
// cleared) and the disk and remote tiers (chunk events: a chunk stored,
// removed by reclaim, trim or erase, or dropped as corrupt or forged). A
// page's hash names it and its whole prefix (the chain starts at the
// namespace seed), a chunk is named by the hash of its last page, so the
// events carry hashes alone.
//
// Cost: nothing is recorded while no one listens (active() is one relaxed
// atomic load, which every source checks before it builds an event). After
// the last listener leaves the log goes on recording for `linger`, so that a
// listener that reconnects at once (a router restarting its stream) resumes
// where it was. Each event gets the next sequence number; the log keeps the
// last `capacity` of them. A reader resumes after the last number it saw
// (read_since); when that number is no longer kept, or the log stopped
// recording in between, the answer is a gap and the reader needs a snapshot
// (KVCache::event_snapshot) before it can follow again.
//
// Thread-safe: appended to by the cache's control thread and the transfer
// workers (inside the tiers), read by any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "kvtier/types.h"

namespace kvtier {

enum class KvEventUnit : uint8_t { kPage, kChunk };  // the kind of event: KvEventKind (kvtier/types.h)
std::string_view kv_event_unit_name(KvEventUnit u);   // "page" | "chunk"

struct KvEvent {
  KvEventKind kind = KvEventKind::kStored;
  TierKind tier = TierKind::kDevice;
  TierKind from = TierKind::kDevice;  // kMoved: the tier it left
  KvEventUnit unit = KvEventUnit::kPage;
  PageHash hash;  // zero for kCleared
  bool operator==(const KvEvent&) const = default;
};

// What one instance holds when it is taken: the index's pages on the device
// and the host, and the disk tier's chunks; `seq` is the log's number then
// (events after it are what changed since).
struct KvSnapshot {
  uint64_t seq = 0;
  std::vector<PageHash> device, host, disk;
};

class KvEventLog {
 public:
  static constexpr size_t kCapacity = size_t(1) << 16;
  static constexpr std::chrono::milliseconds kLinger = std::chrono::seconds(60);
  // `clock`: the linger's time (tests: a ManualClock). Not owned; must outlive the log.
  explicit KvEventLog(size_t capacity = kCapacity, std::chrono::milliseconds linger = kLinger,
                      const Clock* clock = &Clock::system())
      : capacity_(capacity ? capacity : 1), linger_(linger), clock_(clock) {}
  KvEventLog(const KvEventLog&) = delete;
  KvEventLog& operator=(const KvEventLog&) = delete;

  // True while the log records: a listener is subscribed, or the last one left
  // less than `linger` ago (checked at the next append). Sources append nothing otherwise.
  bool active() const { return recording_.load(std::memory_order_relaxed); }

  // A listener, for as long as it lives. One that arrives after the log
  // stopped recording starts a new run of it: earlier numbers become gaps.
  class Subscription {
   public:
    explicit Subscription(KvEventLog& log);
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    KvEventLog& log_;
  };

  // Numbers and keeps `events` (nothing when inactive).
  void append(std::span<const KvEvent> events);
  void append(const KvEvent& e) { append(std::span<const KvEvent>(&e, 1)); }
  // The number of the last event appended (0: none yet).
  uint64_t seq() const;

  // The events numbered after `since`, at most `max`, appended to `out`;
  // `last` is the number of the last one returned (since itself when none).
  // False when the events after `since` are not all kept (a gap).
  bool read_since(uint64_t since, size_t max, std::vector<KvEvent>& out, uint64_t& last) const;
  // Waits until an event numbered after `since` exists, or `timeout`; true when one does.
  bool wait_past(uint64_t since, std::chrono::milliseconds timeout) const;

 private:
  void subscribe();
  void unsubscribe();
  // Under mu_, with no listener: true when the last one left more than `linger` ago.
  bool lingered_out_locked() const;
  void stop_locked();

  const size_t capacity_;
  const std::chrono::milliseconds linger_;
  const Clock* clock_;
  std::atomic<bool> recording_{false};
  uint32_t listeners_ = 0;
  Clock::time_point idle_since_;  // when the last listener left
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<KvEvent> kept_;  // numbered first_ .. seq_
  uint64_t first_ = 1;        // the number of kept_.front()
  uint64_t seq_ = 0;
};

}  // namespace kvtier
