// The JSON bodies behind the dashboard: GET /v1/cache/tree, GET
// /v1/cache/tiers and GET /v1/requests/recent (docs/SERVER.md documents the
// fields; docs/DASHBOARD.md how the page draws them). Every figure the page
// draws comes from one of these, so scripts see what the page sees.
// Pure functions of published values; safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "runtime/runtime.h"
#include "server/cache_view.h"
#include "server/request_log.h"

namespace kvtier::server {

inline constexpr uint32_t kDefaultTreeNodes = 2000;
inline constexpr uint32_t kMaxTreeNodes = 20000;
inline constexpr size_t kDefaultRecentRequests = 32;

// A query parameter as an integer in [min, max]; `fallback` when absent;
// nullopt when malformed or out of range.
std::optional<uint64_t> query_count(const std::string& value, uint64_t fallback, uint64_t min, uint64_t max);

// The tree reduced to `max_nodes` records, each labelled with its first
// words when `codec` decodes them; a null `codec` labels nodes with their
// token count and hash prefix only (no prompt text). `tree` may be null
// (nothing taken yet).
std::string tree_json(const PublishedTree* tree, uint32_t max_nodes, const TextCodec* codec,
                      std::chrono::steady_clock::time_point now);

// Occupancy and capacity per tier, hit ratio by tier over the last 1 and 5
// minutes, bytes per second on each link, move and failure counters, and the
// history those come from.
std::string tiers_json(std::span<const TierSample> samples);

// Newest first: each prefill's usage, the planner's decision and
// predictions, and its race (per-layer arrivals by tier, per-layer compute).
std::string recent_requests_json(std::span<const PrefillRecord> records);

}  // namespace kvtier::server
