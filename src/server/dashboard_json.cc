#include "server/dashboard_json.h"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/prefill_trace.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

std::string json_string(std::string_view text) {
  // Token text may hold half a UTF-8 character: replace it rather than fail.
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A node's first words: its label tokens decoded, control characters as
// spaces; without a codec (no --dashboard-labels), its size and hash prefix.
std::string label_of(const TreeSnapshot& s, const TreeNodeRecord& n, const TextCodec* codec) {
  if (n.is_namespace() && n.aggregate == 0) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "namespace %08llx", static_cast<unsigned long long>(n.namespace_id >> 32));
    return buf;
  }
  if (n.aggregate > 0) return std::to_string(n.aggregate) + " smaller branches";
  if (codec == nullptr) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%llu tokens #%08llx", static_cast<unsigned long long>(uint64_t(n.pages) * s.page_tokens),
                  static_cast<unsigned long long>(n.page_hash >> 32));
    return buf;
  }
  if (n.label_count == 0 || !codec->detokenize) return {};
  std::string text = codec->detokenize(std::span(s.label_tokens).subspan(n.label_begin, n.label_count));
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return text;
}

const char* kind_of(const TreeNodeRecord& n) {
  if (n.aggregate > 0) return "other";
  return n.is_namespace() ? "namespace" : "node";
}

void append_number(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// One record, written by hand: a 20000-node tree must render in a few milliseconds.
void append_node(std::string& out, const TreeSnapshot& s, size_t i, const TextCodec* codec) {
  const TreeNodeRecord& n = s.nodes[i];
  const uint64_t P = s.page_tokens;
  auto field = [&](const char* name, uint64_t v) {
    out += ",\"";
    out += name;
    out += "\":";
    append_number(out, v);
  };
  out += "{\"id\":";
  append_number(out, i);
  out += ",\"parent\":";
  if (n.parent == kNoTreeParent) out += "-1";
  else append_number(out, n.parent);
  out += ",\"kind\":\"";
  out += kind_of(n);
  out += '"';
  field("tokens", n.pages * P);
  field("subtree_tokens", n.subtree_pages * P);
  field("device_tokens", n.device_pages * P);
  field("host_tokens", n.host_pages * P);
  field("depth_tokens", n.depth_pages * P);
  field("hits", n.hits);
  field("last_access_ops_ago", s.tick >= n.last_access ? s.tick - n.last_access : 0);
  field("locks", n.locks);
  field("aggregated_nodes", n.aggregate);
  out += ",\"label\":";
  out += json_string(label_of(s, n, codec));
  out += '}';
}

// The index of the newest sample at least `seconds` older than the last one (the oldest when none is).
size_t window_start(std::span<const TierSample> s, double seconds) {
  const double from = s.back().t_s - seconds;
  size_t i = s.size() - 1;
  while (i > 0 && s[i].t_s > from) --i;
  return i;
}

json ratio_or_null(uint64_t part, uint64_t whole) { return whole == 0 ? json(nullptr) : json(double(part) / double(whole)); }

json hit_ratio(const TierSample& a, const TierSample& b, int tier) {
  return ratio_or_null(b.cached_tokens[tier] - a.cached_tokens[tier], b.prompt_tokens - a.prompt_tokens);
}

struct Link {
  const char* name;
  TierKind tier;  // the tier whose counter it reads
  bool load;      // bytes_loaded (into the device) or bytes_stored (into the tier)
};
constexpr Link kLinks[] = {{"host → device", TierKind::kHost, true},   {"device → host", TierKind::kHost, false},
                           {"disk → device", TierKind::kDisk, true},   {"→ disk", TierKind::kDisk, false},
                           {"remote → device", TierKind::kRemote, true}, {"→ remote", TierKind::kRemote, false}};

uint64_t link_bytes(const TierSample& s, const Link& l) {
  return l.load ? s.bytes_loaded[int(l.tier)] : s.bytes_stored[int(l.tier)];
}

double rate(const TierSample& a, const TierSample& b, const Link& l) {
  const double dt = b.t_s - a.t_s;
  return dt > 0 ? double(link_bytes(b, l) - link_bytes(a, l)) / dt : 0.0;
}

json tiers_now(std::span<const TierSample> s) {
  const TierSample& last = s.back();
  const TierSample& m1 = s[window_start(s, 60)];
  const TierSample& m5 = s[window_start(s, 300)];
  json tiers = json::array();
  for (int t = 0; t < kNumTiers; ++t) {
    json tier = {{"name", tier_name(TierKind(t))},        {"present", last.present[t]},
                 {"used_bytes", last.used_bytes[t]},      {"capacity_bytes", last.capacity_bytes[t]},
                 {"evicted_pages", last.evicted_pages[t]}, {"hit_ratio_1m", hit_ratio(m1, last, t)},
                 {"hit_ratio_5m", hit_ratio(m5, last, t)}, {"cached_tokens", last.cached_tokens[t]}};
    if (t < 2) tier["cached_pages"] = last.cached_pages[t];
    tiers.push_back(std::move(tier));
  }
  return tiers;
}

json links_now(std::span<const TierSample> s) {
  const TierSample& last = s.back();
  const TierSample& w = s[window_start(s, 10)];
  json links = json::array();
  for (const Link& l : kLinks) {
    if (!last.present[int(l.tier)]) continue;
    links.push_back({{"name", l.name}, {"bytes_total", link_bytes(last, l)}, {"bytes_per_s_10s", rate(w, last, l)}});
  }
  return links;
}

json history_of(std::span<const TierSample> s) {
  json t = json::array(), hits = json::object(), rates = json::object();
  for (int k = 0; k < kNumTiers; ++k) hits[std::string(tier_name(TierKind(k)))] = json::array();
  for (const Link& l : kLinks)
    if (s.back().present[int(l.tier)]) rates[l.name] = json::array();
  for (size_t i = 1; i < s.size(); ++i) {
    t.push_back(s[i].t_s);
    for (int k = 0; k < kNumTiers; ++k) hits[std::string(tier_name(TierKind(k)))].push_back(hit_ratio(s[i - 1], s[i], k));
    for (const Link& l : kLinks)
      if (rates.contains(l.name)) rates[l.name].push_back(rate(s[i - 1], s[i], l));
  }
  return {{"t_s", std::move(t)}, {"hit_ratio_by_tier", std::move(hits)}, {"link_bytes_per_s", std::move(rates)}};
}

const char* decision_of(const PrefillTrace& trace) {
  bool load = false, recompute = false, cached = false;
  for (const PlanSegment& seg : trace.plan) {
    cached |= seg.pages > 0;
    load |= seg.action == PlanAction::kLoad && seg.pages > 0;
    recompute |= seg.action == PlanAction::kRecompute && seg.pages > 0;
  }
  if (!cached) return "miss";
  if (load && recompute) return "split";
  if (load) return "load";
  return recompute ? "recompute" : "in_place";
}

json lanes_of(const PrefillTrace& trace) {
  json loads = json::array();
  for (int t = 0; t < kNumTiers; ++t)
    if (!trace.arrival_s[size_t(t)].empty())
      loads.push_back({{"tier", tier_name(TierKind(t))}, {"arrival_s", trace.arrival_s[size_t(t)]}});
  json passes = json::array();
  for (const PrefillPass& p : trace.passes) {
    json layers = json::array();
    for (size_t l = 0; l < p.hook_enter_s.size(); ++l) {
      const double end = l + 1 < p.hook_enter_s.size() ? p.hook_enter_s[l + 1] : p.end_s;
      layers.push_back({{"wait_from_s", p.hook_enter_s[l]}, {"begin_s", p.hook_return_s[l]}, {"end_s", end}});
    }
    passes.push_back({{"start_pos", p.start_pos}, {"end_pos", p.end_pos}, {"begin_s", p.begin_s},
                      {"end_s", p.end_s}, {"layers", std::move(layers)}});
  }
  return {{"loads", std::move(loads)}, {"compute", std::move(passes)}};
}

json plan_of(const PrefillTrace& trace) {
  json segs = json::array();
  for (const PlanSegment& seg : trace.plan)
    segs.push_back({{"first_token", uint64_t(seg.first_page) * trace.page_tokens},
                    {"tokens", uint64_t(seg.pages) * trace.page_tokens},
                    {"tier", tier_name(seg.tier)},
                    {"action", plan_action_name(seg.action)}});
  return segs;
}

json record_json(const PrefillRecord& r) {
  const PrefillReport& rep = r.report;
  json by_tier = json::object(), bytes = json::object();
  for (int t = 0; t < kNumTiers; ++t) {
    by_tier[std::string(tier_name(TierKind(t)))] = rep.cached_tokens_by_tier[t];
    bytes[std::string(tier_name(TierKind(t)))] = rep.bytes_loaded_by_tier[t];
  }
  json j = {{"id", r.id},
            {"arrival_unix_s", r.arrival_unix_s},
            {"queue_s", r.queue_s},
            {"ttft_s", r.ttft_s},
            {"prefill_s", rep.ttft_s},
            {"prompt_tokens", rep.prompt_tokens},
            {"cached_tokens", rep.cached_tokens},
            {"cached_tokens_by_tier", std::move(by_tier)},
            {"bytes_loaded_by_tier", std::move(bytes)},
            {"recomputed_cached_tokens", rep.recomputed_cached_tokens},
            {"blended", rep.blend.blended},
            {"computed_in_full_for_logprobs", rep.computed_in_full_for_logprobs}};
  if (!r.session.empty()) j["session"] = r.session;
  if (!rep.trace) return j;
  const PrefillTrace& trace = *rep.trace;
  j["decision"] = decision_of(trace);
  j["plan"] = plan_of(trace);
  j["predicted"] = {{"ttft_s", trace.predicted_s},
                    {"load_s", trace.predicted_load_s},
                    {"compute_s", trace.predicted_compute_s},
                    {"recompute_all_s", trace.recompute_all_s}};
  j["num_layers"] = trace.num_layers;
  j["loads_submitted_s"] = trace.loads_submitted_s;
  j["race"] = lanes_of(trace);
  return j;
}

}  // namespace

std::optional<uint64_t> query_count(const std::string& value, uint64_t fallback, uint64_t min, uint64_t max) {
  if (value.empty()) return fallback;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < min || v > max) return std::nullopt;
  return v;
}

std::string tree_json(const PublishedTree* tree, uint32_t max_nodes, const TextCodec* codec,
                      std::chrono::steady_clock::time_point now) {
  if (tree == nullptr) return R"({"available":false,"nodes":[]})";
  const TreeSnapshot shown = summarize_tree(tree->snapshot, max_nodes);
  const uint64_t P = shown.page_tokens;
  std::string out = "{\"available\":true,\"page_tokens\":";
  append_number(out, P);
  out += ",\"total_nodes\":";
  append_number(out, shown.total_nodes);
  out += ",\"total_tokens\":";
  append_number(out, shown.total_pages * P);
  out += ",\"shown_nodes\":";
  append_number(out, shown.nodes.size());
  out += ",\"age_ms\":";
  append_number(out, uint64_t(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(now - tree->taken).count())));
  out += ",\"snapshot_us\":";
  append_number(out, uint64_t(tree->take_s * 1e6));
  out += ",\"nodes\":[";
  out.reserve(out.size() + shown.nodes.size() * 260);
  for (size_t i = 0; i < shown.nodes.size(); ++i) {
    if (i > 0) out += ',';
    append_node(out, shown, i, codec);
  }
  out += "]}";
  return out;
}

std::string tiers_json(std::span<const TierSample> samples) {
  if (samples.empty()) return R"({"available":false})";
  const TierSample& last = samples.back();
  json counters = {{"demoted_pages", last.demoted_pages},         {"spilled_chunks", last.spilled_chunks},
                   {"prefetched_pages", last.prefetched_pages},   {"prefetch_failures", last.prefetch_failures},
                   {"checksum_failures", last.checksum_failures}, {"forged_entries", last.forged_entries},
                   {"load_failures", last.load_failures},         {"prompt_tokens", last.prompt_tokens}};
  json j = {{"available", true},     {"t_s", last.t_s},        {"tiers", tiers_now(samples)},
            {"links", links_now(samples)}, {"counters", std::move(counters)}, {"history", history_of(samples)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string recent_requests_json(std::span<const PrefillRecord> records) {
  json list = json::array();
  for (const PrefillRecord& r : records) list.push_back(record_json(r));
  return json{{"requests", std::move(list)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvtier::server
