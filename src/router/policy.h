// Routing policies: which backend takes a request, as a pure function of
// what the router knows of each backend now (docs/SCALING.md).
//
// cache-aware: the healthy backend holding the longest prefix of the
//   request's pages (PrefixTracker), unless its load exceeds the least
//   loaded one's by more than `balance_slack` requests; then, or when no
//   backend holds any page, the least loaded (the first in rotation among
//   equals, so equal backends share new conversations).
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
};

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
