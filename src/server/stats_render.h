// A Runtime's statistics (RuntimeStats, runtime/runtime.h) rendered for the
// edge: one JSON document for GET /v1/cache/stats and Prometheus text for
// GET /metrics. Rendering happens here, on the HTTP thread, from values the
// scheduler thread copied; pure functions, safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/runtime.h"
#include "server/config.h"

namespace kvtier::server {

// Occupancy, hits, bytes moved, evictions, failures by tier; planner
// decisions; the profile.
nlohmann::json runtime_stats_json(const RuntimeStats& stats);
// Every option of the server (server_option_table(): server, model, cache, limits, ...) as
// `config` holds it, by TOML section and key; numbers and bools typed, secrets as "<set>".
nlohmann::json config_json(const ServerConfig& config);
// Prometheus text lines for the cache and the runtime (HELP and TYPE once each).
std::string runtime_metrics_text(const RuntimeStats& stats);
// One tenant's bytes per tier and quota (the stats' `tenants` list, a response's usage.kvtier.tenant).
nlohmann::json tenant_json(const KVCacheStats::Tenant& t);

}  // namespace kvtier::server
