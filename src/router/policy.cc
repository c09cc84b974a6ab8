#include "router/policy.h"

#include <string>

namespace kvtier::router {

std::string_view policy_name(RoutePolicy p) {
  switch (p) {
    case RoutePolicy::kCacheAware: return "cache-aware";
    case RoutePolicy::kRoundRobin: return "round-robin";
    case RoutePolicy::kLeastLoaded: return "least-loaded";
  }
  return "?";
}

Result<RoutePolicy> parse_policy(std::string_view name) {
  for (RoutePolicy p : {RoutePolicy::kCacheAware, RoutePolicy::kRoundRobin, RoutePolicy::kLeastLoaded})
    if (name == policy_name(p)) return p;
  return Status::InvalidArgument("unknown routing policy '" + std::string(name) +
                                 "' (expected cache-aware, round-robin or least-loaded)");
}

std::string_view reason_name(RouteReason r) {
  switch (r) {
    case RouteReason::kCache: return "cache";
    case RouteReason::kLoad: return "load";
    case RouteReason::kRotation: return "rotation";
  }
  return "?";
}

namespace {

// The healthy backend that `better` prefers, scanning from the rotation's position so ties rotate.
template <class Better>
std::optional<size_t> best_of(std::span<const BackendView> b, uint64_t start, Better better) {
  std::optional<size_t> best;
  for (size_t k = 0; k < b.size(); ++k) {
    const size_t i = size_t((start + k) % b.size());
    if (b[i].healthy && (!best || better(b[i], b[*best]))) best = i;
  }
  return best;
}

}  // namespace

std::optional<RouteChoice> choose_backend(RoutePolicy policy, std::span<const BackendView> backends,
                                          uint64_t& rotation, uint32_t balance_slack) {
  if (backends.empty()) return std::nullopt;
  const uint64_t start = rotation++;
  const auto least = best_of(backends, start, [](const BackendView& a, const BackendView& b) { return a.load < b.load; });
  if (!least) return std::nullopt;
  if (policy == RoutePolicy::kRoundRobin) return RouteChoice{*best_of(backends, start, [](auto&, auto&) { return false; }), RouteReason::kRotation};
  if (policy == RoutePolicy::kLeastLoaded) return RouteChoice{*least, RouteReason::kLoad};
  bool priced = true;
  for (const BackendView& v : backends) priced = priced && (!v.healthy || v.predicted_s >= 0);
  if (priced) {  // the least loaded of those within kPriceTie of the cheapest
    const auto cheapest = best_of(backends, start, [](const BackendView& a, const BackendView& b) { return a.predicted_s < b.predicted_s; });
    const double limit = backends[*cheapest].predicted_s / (1 - kPriceTie);
    const auto pick = best_of(backends, start, [&](const BackendView& a, const BackendView& b) {
      const bool a_in = a.predicted_s <= limit, b_in = b.predicted_s <= limit;
      return a_in != b_in ? a_in : a.load < b.load;
    });
    return RouteChoice{*pick, backends[*pick].matched_pages > 0 ? RouteReason::kCache : RouteReason::kLoad};
  }
  const auto cached = best_of(backends, start, [](const BackendView& a, const BackendView& b) {
    return a.matched_pages > b.matched_pages || (a.matched_pages == b.matched_pages && a.load < b.load);
  });
  const BackendView& c = backends[*cached];
  if (c.matched_pages > 0 && c.load <= backends[*least].load + balance_slack) return RouteChoice{*cached, RouteReason::kCache};
  return RouteChoice{*least, RouteReason::kLoad};
}

}  // namespace kvtier::router
