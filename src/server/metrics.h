// ServerMetrics: the server's own counters and latency histograms, rendered
// as Prometheus text (exposition format 0.0.4) for GET /metrics.
//
// Requests by endpoint and status code, prompt / completion / cached tokens
// (cached by tier), bytes loaded by tier, the prompt-cache hit ratio, and
// histograms of TTFT, end-to-end latency and queueing time. The cache's own
// series (occupancy, evictions, checksum failures, planner decisions...) come
// from Runtime::metrics_text() and are appended by the HTTP layer.
// Thread-safe: any HTTP thread may record; render() takes a consistent copy.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/api.h"

namespace kvtier::server {

// A cumulative Prometheus histogram with fixed upper bounds (seconds).
class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds);
  void observe(double v);
  // "<name>_bucket{le=..}", "<name>_sum", "<name>_count" lines.
  void render(const std::string& name, std::string& out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;  // non-cumulative; rendered cumulatively
  uint64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One HTTP response, by endpoint ("/v1/completions") and status code.
  void record_response(const std::string& endpoint, int status);
  // One finished generation, by how it ended: `outcome` ok, cancelled (the
  // client went away, the deadline passed, the server stopped) or failed.
  void record_completion(const CompletionUsage& usage, const Status& outcome);
  // A generation cancelled because its client went away.
  void record_client_disconnect();
  // Top-level request fields kvtier does not read (CompletionRequest::ignored_fields).
  void record_ignored_fields(uint32_t n);

  struct Gauges {
    size_t waiting = 0;
    size_t running = 0;
    bool draining = false;
  };
  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> responses_;
  uint64_t completions_ok_ = 0, completions_cancelled_ = 0, completions_failed_ = 0, client_disconnects_ = 0;
  uint64_t ignored_fields_ = 0;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0, recomputed_cached_tokens_ = 0;
  std::array<uint64_t, kNumTiers> cached_by_tier_{};
  std::array<uint64_t, kNumTiers> bytes_by_tier_{};
  LatencyHistogram ttft_, e2e_, queue_, prefill_;
};

// Appends `extra` (another component's Prometheus text) to `out`, dropping
// any family `out` already declares (by its TYPE line), so the combined text
// never has a family twice. Ensures a trailing newline.
void append_prometheus_text(std::string& out, std::string_view extra);

}  // namespace kvtier::server
