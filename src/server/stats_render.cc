#include "server/stats_render.h"

#include <sstream>

namespace kvtier::server {

namespace {

nlohmann::json tier_json(const TierStats& t, bool degraded) {
  return {{"capacity_bytes", t.capacity_bytes}, {"bytes", t.bytes},     {"entries", t.entries},
          {"hits", t.hits},                     {"misses", t.misses},   {"puts", t.puts},
          {"checksum_failures", t.checksum_failures}, {"evictions", t.evictions}, {"io_errors", t.io_errors},
          {"forged_entries", t.forged_entries}, {"lossy_refused", t.lossy_refused}, {"skipped_files", t.skipped_files},
          {"degraded", degraded}};
}

// A row's value as JSON: numbers and bools typed, the rest as the row prints it.
nlohmann::json option_json(const Option<RuntimeOptions>& row, const RuntimeOptions& o) {
  const std::string text = row.shown(o);
  switch (row.kind) {
    case OptionKind::kBool: return text == "true";
    case OptionKind::kUint: return std::stoull(text);
    case OptionKind::kNumber:
    case OptionKind::kDuration: return std::stod(text);
    default: return text;
  }
}

}  // namespace

nlohmann::json tenant_json(const KVCacheStats::Tenant& t) {
  return {{"tenant", t.name},
          {"device_bytes", t.device_bytes},
          {"host_bytes", t.host_bytes},
          {"disk_bytes", t.disk_bytes},
          {"quota", {{"device_bytes", t.quota.device}, {"host_bytes", t.quota.host}, {"disk_bytes", t.quota.disk}}}};
}

nlohmann::json runtime_stats_json(const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  const RuntimeCounters& c = stats.counters;
  const RuntimeOptions& o = stats.options;
  const size_t running = stats.running;
  nlohmann::json j;
  j["requests"] = c.requests;
  j["blend"] = {{"requests", c.blended_requests},
                {"reused_tokens", c.blended_tokens},
                {"recomputed_tokens", c.blend_recomputed_tokens},
                {"stored_tokens", c.blend_stored_tokens},
                {"failed_segments", c.blend_failed_segments}};
  j["running_sequences"] = running;
  j["prompt_tokens"] = c.prompt_tokens;
  j["cached_tokens"] = c.cached_tokens;
  j["hit_ratio"] = c.prompt_tokens ? double(c.cached_tokens) / double(c.prompt_tokens) : 0.0;
  for (int t = 0; t < kNumTiers; ++t) {
    const std::string n(tier_name(TierKind(t)));
    j["cached_tokens_by_tier"][n] = c.cached_tokens_by_tier[t];
    j["bytes_loaded_by_tier"][n] = s.bytes_loaded_by_tier[t];
    j["bytes_stored_by_tier"][n] = s.bytes_stored_by_tier[t];
    j["evicted_pages_by_tier"][n] = s.evicted_pages_by_tier[t];
  }
  j["planner_pages"] = {{"in_place", s.plan_pages[0]}, {"load", s.plan_pages[1]}, {"recompute", s.plan_pages[2]}};
  j["load_failures"] = s.load_failures;
  j["prefetch"] = {{"pages", s.prefetched_pages},
                   {"failures", s.prefetch_failures},
                   {"waits", s.prefetch_waits},
                   {"promoted_pages", s.promoted_pages}};
  j["retention"] = {{"active_hints", s.retain_active},
                    {"hints", s.retain_hints},
                    {"expiries", s.retain_expiries},
                    {"yields", s.retain_yields},
                    {"used", s.retain_used},
                    {"host_pages", s.index.retained_host_pages},
                    {"disk_bytes", s.disk.retained_bytes},
                    {"disk_yields", s.disk.retain_yields}};
  j["moved_down"] = {{"demoted_pages", s.demoted_pages}, {"spilled_chunks", s.spilled_chunks}};
  j["tenants"] = nlohmann::json::array();
  for (const KVCacheStats::Tenant& t : s.tenants) j["tenants"].push_back(tenant_json(t));
  j["quota_evicted_pages"] = s.quota_evicted_pages;
  j["cut_subtrees"] = s.cut_subtrees;
  j["device"] = {{"pages", s.pool.total_pages}, {"used_pages", s.pool.used_pages}, {"page_bytes", s.pool.page_bytes},
                 {"cached_pages", s.index.device_pages}};
  j["host"] = {{"slots", s.host_slots}, {"free_slots", s.host_free_slots}, {"cached_pages", s.index.host_pages}};
  j["index"] = {{"nodes", s.index.nodes}, {"pages", s.index.pages}, {"metadata_bytes", s.index.metadata_bytes}};
  if (s.disk_present) j["disk"] = tier_json(s.disk, s.disk_degraded);
  if (s.remote_present) j["remote"] = tier_json(s.remote, s.remote_degraded);
  // Every option, by TOML section and key; secrets shown as "<set>".
  for (const Option<RuntimeOptions>& row : runtime_option_table())
    j["config"][std::string(row.section())][std::string(row.name())] = option_json(row, o);
  j["profile"] = nlohmann::json::parse(stats.profile.to_json());
  return j;
}

namespace {

// Prometheus text exposition: each metric's HELP and TYPE lines, then its samples.
struct MetricsText {
  std::ostringstream m;
  void metric(const char* name, const char* type, const char* help) {
    m << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  template <class Value>
  void by_tier(const char* name, const char* type, const char* help, Value value) {
    metric(name, type, help);
    for (int t = 0; t < kNumTiers; ++t) m << name << "{tier=\"" << tier_name(TierKind(t)) << "\"} " << value(t) << '\n';
  }
};

// Prompt tokens, cache hits and the bytes each tier moved; the planner's decisions.
void traffic_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  const RuntimeCounters& c = stats.counters;
  w.metric("kvtier_prompt_tokens_total", "counter", "Prompt tokens received.");
  w.m << "kvtier_prompt_tokens_total " << c.prompt_tokens << '\n';
  w.by_tier("kvtier_cached_tokens_total", "counter", "Prompt tokens served from cached KV, by tier.",
          [&](int t) { return c.cached_tokens_by_tier[t]; });
  w.metric("kvtier_cache_hit_ratio", "gauge", "Cached prompt tokens / prompt tokens since start.");
  w.m << "kvtier_cache_hit_ratio " << (c.prompt_tokens ? double(c.cached_tokens) / double(c.prompt_tokens) : 0.0) << '\n';
  w.by_tier("kvtier_bytes_loaded_total", "counter", "KV bytes loaded from each tier into device memory.",
          [&](int t) { return s.bytes_loaded_by_tier[t]; });
  w.by_tier("kvtier_bytes_stored_total", "counter", "KV bytes written down to each tier.",
          [&](int t) { return s.bytes_stored_by_tier[t]; });
  w.by_tier("kvtier_evicted_pages_total", "counter", "Pages evicted from each tier.",
          [&](int t) { return s.evicted_pages_by_tier[t]; });
  w.metric("kvtier_planner_pages_total", "counter", "Cached pages by planner decision.");
  w.m << "kvtier_planner_pages_total{decision=\"in_place\"} " << s.plan_pages[0] << '\n'
    << "kvtier_planner_pages_total{decision=\"load\"} " << s.plan_pages[1] << '\n'
    << "kvtier_planner_pages_total{decision=\"recompute\"} " << s.plan_pages[2] << '\n';
}

// What was not served as stored: entries failing checksums or authentication, lossy entries; foreign files left alone.
void integrity_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  w.metric("kvtier_checksum_failures_total", "counter", "Cached entries dropped because their bytes did not verify.");
  w.m << "kvtier_checksum_failures_total " << (s.disk.checksum_failures + s.remote.checksum_failures) << '\n';
  w.metric("kvtier_forged_entries_total", "counter",
         "Cached entries dropped because they failed authentication with the tier secret (forged or foreign).");
  w.m << "kvtier_forged_entries_total " << (s.disk.forged_entries + s.remote.forged_entries) << '\n';
  w.metric("kvtier_lossy_tokens_total", "counter",
         "Reused prompt tokens whose KV came from lossy codec entries (every codec but none): approximate, labelled per request.");
  w.m << "kvtier_lossy_tokens_total " << s.lossy_tokens << '\n';
  w.metric("kvtier_lossy_entries_refused_total", "counter",
         "Lossy codec entries not served because every codec of this cache is none (exact only); the tokens recomputed.");
  w.m << "kvtier_lossy_entries_refused_total " << (s.disk.lossy_refused + s.remote.lossy_refused) << '\n';
  w.metric("kvtier_disk_skipped_files", "gauge",
         "Files in the disk directory left alone at open: not this cache's regions (other geometry, version, foreign).");
  w.m << "kvtier_disk_skipped_files " << s.disk.skipped_files << '\n';
}

// Loads that failed, read-ahead, retention hints and write-back moves.
void movement_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  w.metric("kvtier_load_failures_total", "counter", "Loads that failed; the request recomputed.");
  w.m << "kvtier_load_failures_total " << s.load_failures << '\n';
  w.metric("kvtier_prefetched_pages_total", "counter", "Pages read ahead from disk/remote into the host tier for queued requests.");
  w.m << "kvtier_prefetched_pages_total " << s.prefetched_pages << '\n';
  w.metric("kvtier_prefetch_failures_total", "counter", "Prefetched chunks dropped (failed or corrupt load).");
  w.m << "kvtier_prefetch_failures_total " << s.prefetch_failures << '\n';
  w.metric("kvtier_promoted_pages_total", "counter", "Prefetched host pages copied on into free device pages.");
  w.m << "kvtier_promoted_pages_total " << s.promoted_pages << '\n';
  w.metric("kvtier_retained_bytes", "gauge",
         "Bytes kept from eviction by retention hints (retain_s, cache_control), per tier (disk: whole regions).");
  w.m << "kvtier_retained_bytes{tier=\"host\"} " << s.index.retained_host_pages * s.pool.page_bytes << '\n'
    << "kvtier_retained_bytes{tier=\"disk\"} " << s.disk.retained_bytes << '\n';
  w.metric("kvtier_retention_hints_total", "counter",
         "Retention hints by outcome: taken, expired (ran their time), yielded (oldest let go past --max-retained-share), "
         "used (a prefetch's deadline hold, ended by the request it was for).");
  w.m << "kvtier_retention_hints_total{outcome=\"taken\"} " << s.retain_hints << '\n'
    << "kvtier_retention_hints_total{outcome=\"expired\"} " << s.retain_expiries << '\n'
    << "kvtier_retention_hints_total{outcome=\"yielded\"} " << s.retain_yields + s.disk.retain_yields << '\n'
    << "kvtier_retention_hints_total{outcome=\"used\"} " << s.retain_used << '\n';
  w.metric("kvtier_write_back_moves_total", "counter", "Write-back: device pages demoted to host, chunks spilled from host.");
  w.m << "kvtier_write_back_moves_total{kind=\"demoted_pages\"} " << s.demoted_pages << '\n'
    << "kvtier_write_back_moves_total{kind=\"spilled_chunks\"} " << s.spilled_chunks << '\n';
}

// Each tier's bytes held, capacity and health.
void tiers_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  w.metric("kvtier_tier_used_bytes", "gauge", "Bytes held by each tier.");
  w.m << "kvtier_tier_used_bytes{tier=\"device\"} " << uint64_t(s.pool.used_pages) * s.pool.page_bytes << '\n'
    << "kvtier_tier_used_bytes{tier=\"host\"} " << uint64_t(s.host_slots - s.host_free_slots) * s.pool.page_bytes << '\n'
    << "kvtier_tier_used_bytes{tier=\"disk\"} " << s.disk.bytes << '\n'
    << "kvtier_tier_used_bytes{tier=\"remote\"} " << s.remote.bytes << '\n';
  w.metric("kvtier_tier_capacity_bytes", "gauge", "Capacity of each tier.");
  w.m << "kvtier_tier_capacity_bytes{tier=\"device\"} " << uint64_t(s.pool.total_pages) * s.pool.page_bytes << '\n'
    << "kvtier_tier_capacity_bytes{tier=\"host\"} " << uint64_t(s.host_slots) * s.pool.page_bytes << '\n'
    << "kvtier_tier_capacity_bytes{tier=\"disk\"} " << s.disk.capacity_bytes << '\n'
    << "kvtier_tier_capacity_bytes{tier=\"remote\"} " << s.remote.capacity_bytes << '\n';
  w.metric("kvtier_tier_degraded", "gauge", "1 when a tier is degraded (requests recompute instead).");
  w.m << "kvtier_tier_degraded{tier=\"disk\"} " << (s.disk_degraded ? 1 : 0) << '\n'
    << "kvtier_tier_degraded{tier=\"remote\"} " << (s.remote_degraded ? 1 : 0) << '\n';
}

// Running sequences, blending and decode.
void requests_metrics(MetricsText& w, const RuntimeStats& stats) {
  const RuntimeCounters& c = stats.counters;
  w.metric("kvtier_running_sequences", "gauge", "Sequences holding KV pages.");
  w.m << "kvtier_running_sequences " << stats.running << '\n';
  w.metric("kvtier_blend_requests_total", "counter", "Requests whose prompt was blended from cached segments (approximate output).");
  w.m << "kvtier_blend_requests_total " << c.blended_requests << '\n';
  w.metric("kvtier_blend_tokens_total", "counter",
         "Segment tokens of blended prompts: kept from cached segment KV (reused, approximate), recomputed by the "
         "selection, or computed to store a first-seen segment (stored). Not counted in kvtier_cached_tokens_total.");
  w.m << "kvtier_blend_tokens_total{kind=\"reused\"} " << c.blended_tokens << '\n';
  w.m << "kvtier_blend_tokens_total{kind=\"recomputed\"} " << c.blend_recomputed_tokens << '\n';
  w.m << "kvtier_blend_tokens_total{kind=\"stored\"} " << c.blend_stored_tokens << '\n';
  w.metric("kvtier_blend_failed_segments_total", "counter", "Segments whose cached KV failed verification: recomputed, never used.");
  w.m << "kvtier_blend_failed_segments_total " << c.blend_failed_segments << '\n';
  w.metric("kvtier_decode_tokens_total", "counter", "Tokens generated by decode steps.");
  w.m << "kvtier_decode_tokens_total " << c.decode_tokens << '\n';
}

// Per tenant bytes and quotas; pages given up to quotas and cut subtrees; preemptions.
void tenants_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  const RuntimeCounters& c = stats.counters;
  w.metric("kvtier_tenant_bytes", "gauge",
         "Cached KV bytes of each tenant on the device, the host and disk (tenant \"\": requests without one).");
  for (const KVCacheStats::Tenant& t : s.tenants) {
    w.m << "kvtier_tenant_bytes{tenant=\"" << t.name << "\",tier=\"device\"} " << t.device_bytes << '\n';
    w.m << "kvtier_tenant_bytes{tenant=\"" << t.name << "\",tier=\"host\"} " << t.host_bytes << '\n';
    w.m << "kvtier_tenant_bytes{tenant=\"" << t.name << "\",tier=\"disk\"} " << t.disk_bytes << '\n';
  }
  w.metric("kvtier_tenant_quota_bytes", "gauge", "Each tenant's quota per tier, from the keys file (0: none).");
  for (const KVCacheStats::Tenant& t : s.tenants)
    for (const auto& [tier, bytes] : {std::pair{"device", t.quota.device}, {"host", t.quota.host}, {"disk", t.quota.disk}})
      w.m << "kvtier_tenant_quota_bytes{tenant=\"" << t.name << "\",tier=\"" << tier << "\"} " << bytes << '\n';
  w.metric("kvtier_quota_evicted_pages_total", "counter", "Cached pages tenants over their quota gave up.");
  w.m << "kvtier_quota_evicted_pages_total " << s.quota_evicted_pages << '\n';
  w.metric("kvtier_cut_subtrees_total", "counter",
         "Times host pages were dropped to free device pages stuck before them on a path.");
  w.m << "kvtier_cut_subtrees_total " << s.cut_subtrees << '\n';
  w.metric("kvtier_preemptions_total", "counter",
         "Running sequences paused because together they outgrew the device pool: KV kept raw in host memory, or "
         "dropped to be recomputed when they resume.");
  w.m << "kvtier_preemptions_total{kv=\"raw\"} " << c.preempted_raw << '\n';
  w.m << "kvtier_preemptions_total{kv=\"recompute\"} " << c.preempted_recompute << '\n';
}

}  // namespace

std::string runtime_metrics_text(const RuntimeStats& stats) {
  MetricsText w;
  traffic_metrics(w, stats);
  integrity_metrics(w, stats);
  movement_metrics(w, stats);
  tiers_metrics(w, stats);
  requests_metrics(w, stats);
  tenants_metrics(w, stats);
  return w.m.str();
}

}  // namespace kvtier::server
