// The clock seam: code that decides something by elapsed time (request
// deadlines, cache-view ages) reads time from a Clock it was given, so tests
// drive that time with a ManualClock instead of sleeping and hoping a loaded
// machine keeps up. Waiting itself (condition variables) stays on real time;
// only the decisions read the Clock.
//
// Clock::system() is the steady clock. ManualClock moves only when told;
// both are safe from any thread. A Clock must outlive whoever holds it.
#pragma once

#include <atomic>
#include <chrono>

namespace kvtier {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point now() const = 0;
  // The process's steady clock.
  static const Clock& system();
};

class ManualClock final : public Clock {
 public:
  time_point now() const override { return time_point(duration(ticks_.load(std::memory_order_acquire))); }
  void advance(duration d) { ticks_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<duration::rep> ticks_{1};
};

}  // namespace kvtier
