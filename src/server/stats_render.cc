#include "server/stats_render.h"

#include <sstream>

namespace kvtier::server {

namespace {

nlohmann::json tier_json(const TierStats& t, bool degraded) {
  return {{"capacity_bytes", t.capacity_bytes},
          {"bytes", t.bytes},
          {"entries", t.entries},
          {"hits", t.hits},
          {"misses", t.misses},
          {"puts", t.puts},
          {"checksum_failures", t.checksum_failures},
          {"evictions", t.evictions},
          {"io_errors", t.io_errors},
          {"degraded_episodes", t.degraded_episodes},
          {"fast_fails", t.fast_fails},
          {"last_error", t.last_error},
          {"forged_entries", t.forged_entries},
          {"lossy_refused", t.lossy_refused},
          {"skipped_files", t.skipped_files},
          {"degraded", degraded}};
}

// A row's value as JSON: numbers and bools typed, the rest as the row prints it.
nlohmann::json option_json(const Option<ServerConfig>& row, const ServerConfig& o) {
  const std::string text = row.shown(o);
  switch (row.kind) {
    case OptionKind::kBool:
      return text == "true";
    case OptionKind::kUint:
      return std::stoull(text);
    case OptionKind::kNumber:
    case OptionKind::kDuration:
      return std::stod(text);
    default:
      return text;
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

nlohmann::json config_json(const ServerConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const Option<ServerConfig>& row : server_option_table())
    j[std::string(row.section())][std::string(row.name())] = option_json(row, config);
  return j;
}

nlohmann::json runtime_stats_json(const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  const RuntimeCounters& c = stats.counters;
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
  j["host_copy_failures"] = s.host_copy_failures;
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
  j["device"] = {{"pages", s.pool.total_pages},
                 {"used_pages", s.pool.used_pages},
                 {"page_bytes", s.pool.page_bytes},
                 {"cached_pages", s.index.device_pages}};
  j["host"] = {{"slots", s.host_slots}, {"free_slots", s.host_free_slots}, {"cached_pages", s.index.host_pages}};
  j["index"] = {{"nodes", s.index.nodes}, {"pages", s.index.pages}, {"metadata_bytes", s.index.metadata_bytes}};
  if (s.disk_present) j["disk"] = tier_json(s.disk, s.disk_degraded);
  if (s.remote_present) j["remote"] = tier_json(s.remote, s.remote_degraded);
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
  // A metric of one sample.
  template <class Value>
  void scalar(const char* name, const char* type, const char* help, Value value) {
    metric(name, type, help);
    m << name << ' ' << value << '\n';
  }
  // A metric of one sample per value of one label.
  void labelled(const char* name, const char* type, const char* help, const char* label,
                std::initializer_list<std::pair<const char*, uint64_t>> samples) {
    metric(name, type, help);
    for (const auto& [value, sample] : samples) m << name << '{' << label << "=\"" << value << "\"} " << sample << '\n';
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
  w.scalar("kvtier_prompt_tokens_total", "counter", "Prompt tokens received.", c.prompt_tokens);
  w.by_tier("kvtier_cached_tokens_total", "counter", "Prompt tokens served from cached KV, by tier.",
            [&](int t) { return c.cached_tokens_by_tier[t]; });
  w.scalar("kvtier_cache_hit_ratio", "gauge", "Cached prompt tokens / prompt tokens since start.",
           c.prompt_tokens ? double(c.cached_tokens) / double(c.prompt_tokens) : 0.0);
  w.by_tier("kvtier_bytes_loaded_total", "counter", "KV bytes loaded from each tier into device memory.",
            [&](int t) { return s.bytes_loaded_by_tier[t]; });
  w.by_tier("kvtier_bytes_stored_total", "counter", "KV bytes written down to each tier.",
            [&](int t) { return s.bytes_stored_by_tier[t]; });
  w.by_tier("kvtier_evicted_pages_total", "counter", "Pages evicted from each tier.",
            [&](int t) { return s.evicted_pages_by_tier[t]; });
  w.labelled("kvtier_planner_pages_total", "counter", "Cached pages by planner decision.", "decision",
             {{"in_place", s.plan_pages[0]}, {"load", s.plan_pages[1]}, {"recompute", s.plan_pages[2]}});
}

// What was not served as stored: entries failing checksums or authentication, lossy entries; foreign files left alone.
void integrity_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  w.scalar("kvtier_checksum_failures_total", "counter", "Cached entries dropped because their bytes did not verify.",
           s.disk.checksum_failures + s.remote.checksum_failures);
  w.scalar("kvtier_forged_entries_total", "counter",
           "Cached entries dropped because they failed authentication with the tier secret (forged or foreign).",
           s.disk.forged_entries + s.remote.forged_entries);
  w.scalar("kvtier_lossy_tokens_total", "counter",
           "Reused prompt tokens whose KV came from lossy codec entries (every codec but none): approximate, labelled "
           "per request.",
           s.lossy_tokens);
  w.scalar(
      "kvtier_lossy_entries_refused_total", "counter",
      "Lossy codec entries not served because every codec of this cache is none (exact only); the tokens recomputed.",
      s.disk.lossy_refused + s.remote.lossy_refused);
  w.scalar(
      "kvtier_disk_skipped_files", "gauge",
      "Files in the disk directory left alone at open: not this cache's regions (other geometry, version, foreign).",
      s.disk.skipped_files);
}

// Loads that failed, read-ahead, retention hints and write-back moves.
void movement_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  w.scalar("kvtier_load_failures_total", "counter", "Loads that failed; the request recomputed.", s.load_failures);
  w.scalar("kvtier_host_copy_failures_total", "counter",
           "Write-through host copies that failed (a value the host codec refuses); the page stays on the device only.",
           s.host_copy_failures);
  w.scalar("kvtier_prefetched_pages_total", "counter",
           "Pages read ahead from disk/remote into the host tier for queued requests.", s.prefetched_pages);
  w.scalar("kvtier_prefetch_failures_total", "counter", "Prefetched chunks dropped (failed or corrupt load).",
           s.prefetch_failures);
  w.scalar("kvtier_promoted_pages_total", "counter", "Prefetched host pages copied on into free device pages.",
           s.promoted_pages);
  w.labelled("kvtier_retained_bytes", "gauge",
             "Bytes kept from eviction by retention hints (retain_s, cache_control), per tier (disk: whole regions).",
             "tier",
             {{"host", uint64_t(s.index.retained_host_pages) * s.pool.page_bytes}, {"disk", s.disk.retained_bytes}});
  w.labelled("kvtier_retention_hints_total", "counter",
             "Retention hints by outcome: taken, expired (ran their time), yielded (oldest let go past "
             "--max-retained-share), used (a prefetch's deadline hold, ended by the request it was for).",
             "outcome",
             {{"taken", s.retain_hints},
              {"expired", s.retain_expiries},
              {"yielded", s.retain_yields + s.disk.retain_yields},
              {"used", s.retain_used}});
  w.labelled("kvtier_write_back_moves_total", "counter",
             "Write-back: device pages demoted to host, chunks spilled from host.", "kind",
             {{"demoted_pages", s.demoted_pages}, {"spilled_chunks", s.spilled_chunks}});
}

// Each tier's bytes held, capacity and health.
void tiers_metrics(MetricsText& w, const RuntimeStats& stats) {
  const KVCacheStats& s = stats.cache;
  const uint64_t page = s.pool.page_bytes;
  w.labelled("kvtier_tier_used_bytes", "gauge", "Bytes held by each tier.", "tier",
             {{"device", s.pool.used_pages * page},
              {"host", (s.host_slots - s.host_free_slots) * page},
              {"disk", s.disk.bytes},
              {"remote", s.remote.bytes}});
  w.labelled("kvtier_tier_capacity_bytes", "gauge", "Capacity of each tier.", "tier",
             {{"device", s.pool.total_pages * page},
              {"host", s.host_slots * page},
              {"disk", s.disk.capacity_bytes},
              {"remote", s.remote.capacity_bytes}});
  w.labelled("kvtier_tier_degraded", "gauge",
             "1 when a tier is degraded: nothing more is stored there until its backoff ends (a disk tier still "
             "serves what it holds, then tries writing again; a remote one fails fast until it answers again). "
             "/v1/cache/stats has its last_error.",
             "tier", {{"disk", uint64_t(s.disk_degraded)}, {"remote", uint64_t(s.remote_degraded)}});
  w.labelled("kvtier_tier_io_errors_total", "counter", "I/O failures of each lower tier (reads and writes).", "tier",
             {{"disk", s.disk.io_errors}, {"remote", s.remote.io_errors}});
  w.labelled("kvtier_tier_degraded_episodes_total", "counter", "Times each lower tier went from healthy to degraded.",
             "tier", {{"disk", s.disk.degraded_episodes}, {"remote", s.remote.degraded_episodes}});
}

// Running sequences, blending and decode.
void requests_metrics(MetricsText& w, const RuntimeStats& stats) {
  const RuntimeCounters& c = stats.counters;
  w.scalar("kvtier_running_sequences", "gauge", "Sequences holding KV pages.", stats.running);
  w.scalar("kvtier_blend_requests_total", "counter",
           "Requests whose prompt was blended from cached segments (approximate output).", c.blended_requests);
  w.labelled(
      "kvtier_blend_tokens_total", "counter",
      "Segment tokens of blended prompts: kept from cached segment KV (reused, approximate), recomputed by the "
      "selection, or computed to store a first-seen segment (stored). Not counted in kvtier_cached_tokens_total.",
      "kind",
      {{"reused", c.blended_tokens}, {"recomputed", c.blend_recomputed_tokens}, {"stored", c.blend_stored_tokens}});
  w.scalar("kvtier_blend_failed_segments_total", "counter",
           "Segments whose cached KV failed verification: recomputed, never used.", c.blend_failed_segments);
  w.scalar("kvtier_decode_tokens_total", "counter", "Tokens generated by decode steps.", c.decode_tokens);
  w.scalar("kvtier_decoded_tokens_prefilled_total", "counter",
           "Generated tokens computed again by prefill before their KV was cached, where decode rounds otherwise "
           "(F32 weights, CUDA).",
           c.decoded_tokens_prefilled);
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
    for (const auto& [tier, bytes] :
         {std::pair{"device", t.quota.device}, {"host", t.quota.host}, {"disk", t.quota.disk}})
      w.m << "kvtier_tenant_quota_bytes{tenant=\"" << t.name << "\",tier=\"" << tier << "\"} " << bytes << '\n';
  w.scalar("kvtier_quota_evicted_pages_total", "counter", "Cached pages tenants over their quota gave up.",
           s.quota_evicted_pages);
  w.scalar("kvtier_cut_subtrees_total", "counter",
           "Times host pages were dropped to free device pages stuck before them on a path.", s.cut_subtrees);
  w.labelled("kvtier_preemptions_total", "counter",
             "Running sequences paused because together they outgrew the device pool: KV kept raw in host memory, or "
             "dropped to be recomputed when they resume.",
             "kv", {{"raw", c.preempted_raw}, {"recompute", c.preempted_recompute}});
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
