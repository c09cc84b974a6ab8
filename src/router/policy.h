// Routing policies: which backend takes a request, as a pure function of
// what the router knows of each backend now (docs/SCALING.md).
//
// cache-aware: where every healthy backend has a predicted time to first
//   token (its planner's price of the prompt given what it holds in each
//   tier, plus its prefill queue), the least loaded of those within kPriceTie of
//   the lowest (the first in rotation among equals, so equal backends share
//   new conversations): ties and cold prompts go to the least loaded.
//   Where a price is missing (a backend that does not publish its planner),
//   the longest held prefix instead, unless its load exceeds the least
//   loaded one's by more than `balance_slack`.
// least-loaded: the healthy backend with the fewest requests in flight and
//   waiting. round-robin: the next healthy backend in turn.
// Pure; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::router {

enum class RoutePolicy : uint8_t { kCacheAware, kRoundRobin, kLeastLoaded };
std::string_view policy_name(RoutePolicy p);
Result<RoutePolicy> parse_policy(std::string_view name);  // "cache-aware" | "round-robin" | "least-loaded"

struct BackendView {
  bool healthy = false;
  uint32_t load = 0;           // requests in flight through this router plus the backend's waiting queue
  uint32_t matched_pages = 0;  // leading pages of the request it is believed to hold
  double predicted_s = -1;     // predicted time to first token there, queue included (< 0: not known)
};

// Prices within this share of the lowest are a tie.
inline constexpr double kPriceTie = 0.02;

enum class RouteReason : uint8_t { kCache, kLoad, kRotation };
std::string_view reason_name(RouteReason r);

struct RouteChoice {
  size_t backend = 0;
  RouteReason reason = RouteReason::kLoad;
};

// nullopt when no backend is healthy. `rotation` advances on every choice.
std::optional<RouteChoice> choose_backend(RoutePolicy policy, std::span<const BackendView> backends,
                                          uint64_t& rotation, uint32_t balance_slack);

}  // namespace kvtier::router
