// RequestLog: the last few prefills the scheduler ran, for GET
// /v1/requests/recent and the dashboard's per-request race.
//
// The scheduler appends one record per request it prefilled (its report
// carries the per-layer trace, runtime/prefill_trace.h); readers take a copy
// of the newest records. Bounded: the oldest record goes when the log is full.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "runtime/runtime.h"

namespace kvtier::server {

struct PrefillRecord {
  uint64_t id = 0;             // sequential, from 1
  double arrival_unix_s = 0;   // wall-clock arrival (seconds since the epoch)
  double queue_s = 0;          // arrival to the start of prefill
  double ttft_s = 0;           // arrival to the first token
  PrefillReport report;        // the runtime's account (report.trace: the race; may be null)
  std::string session;         // GenerationRequest::session
};

class RequestLog {
 public:
  explicit RequestLog(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
  // Assigns the record's id and keeps it; returns the id.
  uint64_t add(PrefillRecord record);
  // Up to `limit` records, newest first.
  std::vector<PrefillRecord> newest(size_t limit) const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<PrefillRecord> records_;
  uint64_t next_id_ = 1;
};

}  // namespace kvtier::server
