// The router's decision cost behind `kvtier bench route`: backends' trackers
// filled with the page chains of many cached conversations, then requests that
// continue random conversations, each hashed into its page chain, matched on
// every backend, priced by a planner per backend and routed (router/pricing.h,
// router/policy.h: the router's own functions). Reported per request, beside
// hashing the prompt alone (what any KV-aware router must do). Single-threaded.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct RouteBenchOptions {
  uint32_t backends = 3;
  uint64_t conversations = 100000;  // cached, spread evenly over the backends
  uint32_t prompt_tokens = 1024;    // each conversation's cached prefix
  uint32_t page_tokens = 16;
  uint32_t requests = 20000;        // timed: a conversation's prefix plus one new page
  Status validate() const;
};

struct RouteBenchReport {
  RouteBenchOptions options;
  uint64_t tracked_pages = 0;
  double decision_p50_us = 0, decision_p99_us = 0;  // hash + match and price on every backend + choose
  double hash_p50_us = 0;                           // hashing the prompt's pages alone
  double decision_over_hash = 0;                    // p50s
  uint64_t cache_routed = 0;                        // requests routed to the backend holding their prefix
  std::string to_json() const;
  std::string to_table() const;
};

Result<RouteBenchReport> run_route_bench(const RouteBenchOptions& o);

}  // namespace kvtier
