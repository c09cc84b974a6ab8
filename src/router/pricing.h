// What the router believes a backend holds of a prompt, and what that is
// worth there: the rule behind the cache-aware policy's prices
// (docs/SCALING.md), as plain functions so that the router and `kvtier bench
// route` run the same code. Pure; safe from any thread on values it is given.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "router/backend.h"
#include "router/held_index.h"
#include "router/prefix_tracker.h"

namespace kvtier::router {

// A request's prompt as the backends would see it: its whole pages' hashes and its length.
struct RoutedPrompt {
  std::vector<PageHash> chain;
  size_t tokens = 0;
};

struct Belief {
  uint32_t pages = 0;         // leading pages held, in any tier
  uint32_t reused_pages = 0;  // of those, the ones its planner would use (all, unpriced)
  double price_s = -1;        // predicted time to first token, its queue aside (< 0: no planner)
  double full_s = 0;          // the same with nothing cached
};

// What a backend holds of `p`: its event view (`held`, with `store`, the
// index of the shared remote store it uses, or null), joined with what was
// routed there (`routed`: pages beyond the events' view are priced as device
// pages: just computed, they are most likely still there); priced by its
// planner where `config` has one.
Belief believe(const HeldIndex& held, const PrefixTracker& routed, const HeldIndex* store,
               const BackendCacheConfig* config, const RoutedPrompt& p);

// Each backend prices with its own calibration, and instances of one
// deployment on the same hardware calibrate a few to tens of percent apart:
// taken as they are, the one that measured fastest would take every request
// its cache does not decide. So a price is kept as the share of the prompt's
// full prefill it leaves to wait for (what the cache and the tiers decide),
// on one scale for all: the mean full prefill over the backends.
void normalize_prices(std::span<Belief> beliefs);

}  // namespace kvtier::router
