#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <unordered_set>

#include "common/page_hash.h"

#include "sim/mooncake_trace.h"
#include "sim/replay_cache.h"
#include "tiers/disk_tier.h"

namespace kvtier {

Result<EvictionOrder> parse_chunk_reclaim(std::string_view name) {
  if (name == "fifo") return EvictionOrder::kFifo;
  if (name == "lru") return EvictionOrder::kLru;
  return Status::InvalidArgument("unknown chunk reclaim policy '" + std::string(name) + "' (expected fifo or lru)");
}

std::string_view chunk_reclaim_name(EvictionOrder r) { return r == EvictionOrder::kFifo ? "fifo" : "lru"; }

ReplayOptions default_replay_options() {
  ReplayOptions o;
  o.model = replay_model_preset("llama-3-8b", DType::kBF16, 16).value();
  o.profile = hardware_preset("h100-pcie5").value();
  return o;
}

Status ReplayOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(CacheConfig::validate());
  KVTIER_RETURN_IF_ERROR(model.geometry.validate());
  if (device.zero()) return Status::InvalidArgument("replay: the device tier needs a non-zero capacity");
  if (disk.unlimited || remote.unlimited)
    return Status::InvalidArgument("replay: disk and remote capacities must be finite");
  if (disk_region_bytes == 0 || disk_region_bytes % 4096)
    return Status::InvalidArgument("replay: disk_region_bytes must be a positive multiple of 4096");
  for (KvCodec c : {host_codec, disk_codec, remote_codec}) KVTIER_RETURN_IF_ERROR(kv_codec_check(c, model.geometry));
  if (!(codec_decode_bytes_per_s > 0)) return Status::InvalidArgument("replay: codec_decode_bytes_per_s must be > 0");
  if (timing) {
    KVTIER_RETURN_IF_ERROR(model.cost.validate());
    KVTIER_RETURN_IF_ERROR(profile.validate());
    if (workers == 0) return Status::InvalidArgument("replay: workers must be >= 1");
    if (!(time_scale >= 0) || !std::isfinite(time_scale))
      return Status::InvalidArgument("replay: time_scale must be a finite number >= 0");
    if (plan_units == 0) return Status::InvalidArgument("replay: plan_units must be >= 1");
  }
  return Status::Ok();
}

namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr size_t kDev = static_cast<size_t>(TierKind::kDevice);

// A capacity in bytes, saturating (a token count past 2^64 bytes is as good as unlimited; it wrapped
// to a tiny cache).
uint64_t capacity_bytes(const Capacity& c, const KVGeometry& g) {
  uint64_t bytes = 0;
  if (c.bytes) return c.value;
  return __builtin_mul_overflow(c.value, uint64_t(g.bytes_per_token()), &bytes) ? UINT64_MAX : bytes;
}

// Pages of a capacity whose pages take `stored_page_bytes` each (UINT64_MAX = unlimited, 0 = absent).
uint64_t to_pages(const Capacity& c, const KVGeometry& g, size_t stored_page_bytes) {
  if (c.unlimited) return UINT64_MAX;
  return capacity_bytes(c, g) / stored_page_bytes;
}

// A tier's chunks as the server stores them, with its codec.
ChunkGeometry tier_chunks(const ReplayOptions& o, KvCodec codec) { return ChunkGeometry{o.model.geometry, o.chunk_pages, codec}; }

// Stored bytes per raw KV byte of a tier with `codec` (1 without one).
double stored_fraction(const ReplayOptions& o, KvCodec codec) {
  const ChunkGeometry g = tier_chunks(o, codec);
  return double(g.stored_layer_bytes(o.chunk_pages, codec)) / double(g.layer_bytes(o.chunk_pages));
}

// The index tokens of one prompt's whole pages. Prompts made of hash-id
// blocks whose size is a multiple of the page size are replayed with one
// index token per page: the first page of a block carries a token that is a
// bijection of the block id (the first token of expand_block), the others
// carry their position in the block. Two prompts then diverge at exactly the
// page where their expanded tokens diverge (ids differ only at block starts,
// and expanded blocks of different ids differ in their first token), so the
// radix tree has the same shape, the same matches and the same evictions as
// with the full tokens — at 1/page_tokens of the work.
class SequenceSource {
 public:
  SequenceSource(const ReplayTrace& t, uint32_t page_tokens)
      : t_(t), P_(page_tokens), compressed_(!t.any_tokens() && t.block_tokens % page_tokens == 0) {}

  bool compressed() const { return compressed_; }
  uint32_t unit() const { return compressed_ ? 1 : P_; }

  // The index tokens of a prompt (input_length > 0) as the cache takes it:
  // its whole pages, then its partial last page (compressed: one token
  // standing for it, never looked up nor cached).
  void fill(const ReplayRequest& r, std::vector<TokenId>& seq) {
    const uint32_t W = r.input_length / P_;
    const bool partial = r.input_length % P_ != 0;
    if (compressed_) {
      const uint32_t ppb = t_.block_tokens / P_;
      const auto ids = t_.ids(r);
      seq.resize(W + (partial ? 1 : 0));
      for (uint32_t i = 0; i < W; ++i) {
        const uint32_t k = i % ppb;
        if (k == 0) {
          expand_block(ids[i / ppb], std::span<TokenId>(&seq[i], 1));
        } else {
          seq[i] = static_cast<TokenId>(k);
        }
      }
      if (partial) seq[W] = 0;
      return;
    }
    (void)expand_request(t_, r, seq);  // cannot fail: the reader checked every request
  }

 private:
  const ReplayTrace& t_;
  uint32_t P_;
  bool compressed_;
};

// Bounds on the pages the trace's prompts could ever occupy, for "unlimited" tiers that never
// evict: `sum` over requests (each repeat of a prompt counted again: a trace of repeated long
// prompts asked for a pool of every repeat's pages), `distinct` pages (each counted once, plus the
// running request's partial page and two spares).
struct TracePages {
  uint64_t sum = 2;
  uint64_t distinct = 0;
  // A device tier holds pages one by one; a host tier by chunks, which a prompt's tail fills in part.
  uint64_t device() const { return std::min(sum, distinct); }
  uint64_t host(uint32_t chunk_pages) const { return std::min(sum, distinct * chunk_pages); }
};

TracePages trace_pages(const ReplayTrace& t, SequenceSource& src, uint32_t page_tokens) {
  TracePages n;
  std::unordered_set<PageHash, PageHashHasher> pages;
  std::vector<TokenId> seq;
  std::vector<PageHash> hashes;
  for (const ReplayRequest& r : t.requests) {
    n.sum += (uint64_t(r.input_length) + page_tokens - 1) / page_tokens;
    if (r.input_length == 0) continue;
    src.fill(r, seq);
    hashes.clear();
    hash_pages(HashAlgo::kXXH3_128, PageHash{.lo = r.salt}, seq, src.unit(), hashes);  // salts never share
    pages.insert(hashes.begin(), hashes.end());
  }
  n.distinct = pages.size() + 3;
  return n;
}

// The payload-less cache of `o`: device and host in pages (unlimited: every
// page of the trace), disk as the DiskTier of the model's chunks that the
// server would build, remote in chunks.
Result<sim_detail::ReplayCacheOptions> cache_options(const ReplayOptions& o, uint32_t unit, const TracePages& all) {
  const KVGeometry& g = o.model.geometry;
  sim_detail::ReplayCacheOptions c;
  c.unit = unit;
  c.chunk_pages = o.chunk_pages;
  c.device_pages = std::min(to_pages(o.device, g, g.page_bytes()), all.device());
  c.host_pages = std::min(to_pages(o.host, g, tier_chunks(o, o.host_codec).stored_payload_bytes(1, o.host_codec)),
                          all.host(o.chunk_pages));
  if (c.device_pages < 2) return Status::InvalidArgument("replay: the device capacity is below two pages");
  if (!o.disk.zero()) {
    DiskTierOptions d;
    d.geometry = tier_chunks(o, o.disk_codec);
    d.region_bytes = o.disk_region_bytes;
    d.capacity_bytes = capacity_bytes(o.disk, g);
    if (d.chunks_per_region() == 0) return Status::InvalidArgument("replay: " + d.region_too_small());
    c.disk_regions = d.max_regions();
    c.disk_chunks_per_region = d.chunks_per_region();
    if (c.disk_regions < 2) return Status::InvalidArgument("replay: the disk tier must hold at least 2 regions");
  }
  const ChunkGeometry remote = tier_chunks(o, o.remote_codec);
  c.remote_chunks = static_cast<uint32_t>(std::min<uint64_t>(
      to_pages(o.remote, g, remote.stored_payload_bytes(o.chunk_pages, o.remote_codec)), UINT32_MAX));
  c.disk_reclaim = o.disk_reclaim;
  c.remote_reclaim = o.remote_reclaim;
  c.write_policy = o.write_policy;
  c.selective_hits = o.selective_hits;
  c.eviction = o.eviction;
  c.hash = o.hash;
  c.max_retained_share = o.max_retained_share;
  return c;
}

// The planner over at most `units` units of cached pages: when the cached
// prefix is longer, consecutive pages are grouped (a group is as slow as its
// slowest page) and the pages after the last whole group count as suffix.
class TimingPlanner {
 public:
  TimingPlanner(const ReplayOptions& o) : o_(o) {}

  Result<Plan> plan(const std::vector<CachedRun>& runs, uint32_t cached_pages, size_t prompt_tokens,
                    uint32_t& group) {
    group = cached_pages > o_.plan_units ? (cached_pages + o_.plan_units - 1) / o_.plan_units : 1;
    auto it = planners_.find(group);
    if (it == planners_.end()) {
      PlannerOptions po;
      po.page_tokens = o_.page_tokens() * group;
      po.layerwise = o_.layerwise;
      KVTIER_ASSIGN_OR_RETURN(Planner p, Planner::create(po, o_.profile, cost()));
      it = planners_.emplace(group, std::move(p)).first;
    }
    if (group == 1) return it->second.plan(runs, prompt_tokens);
    coarse_.clear();
    const uint32_t units = cached_pages / group;
    size_t r = 0;
    uint32_t run_end = runs.empty() ? 0 : runs[0].pages;
    for (uint32_t u = 0; u < units; ++u) {
      TierKind slowest = TierKind::kDevice;
      const uint32_t lo = u * group, hi = lo + group;
      // Runs overlapping [lo, hi): advance past those that end before hi.
      uint32_t run_start = run_end - runs[r].pages;
      while (true) {
        if (run_start < hi && run_end > lo) slowest = std::max(slowest, runs[r].tier);
        if (run_end >= hi || r + 1 == runs.size()) break;
        ++r;
        run_start = run_end;
        run_end += runs[r].pages;
      }
      if (!coarse_.empty() && coarse_.back().tier == slowest) {
        ++coarse_.back().pages;
      } else {
        coarse_.push_back({slowest, 1});
      }
    }
    return it->second.plan(coarse_, prompt_tokens);
  }

 private:
  // The model's cost with each tier's codec: fewer bytes on its link, then a decode.
  ModelCost cost() const {
    ModelCost m = o_.model.cost;
    for (auto [tier, codec] : {std::pair{TierKind::kHost, o_.host_codec}, std::pair{TierKind::kDisk, o_.disk_codec},
                               std::pair{TierKind::kRemote, o_.remote_codec}})
      if (kv_codec_lossy(codec))
        m.encoding[static_cast<size_t>(tier)] = TierEncoding{stored_fraction(o_, codec), o_.codec_decode_bytes_per_s};
    return m;
  }

  const ReplayOptions& o_;
  std::map<uint32_t, Planner> planners_;
  std::vector<CachedRun> coarse_;
};

struct Pass {
  std::unique_ptr<sim_detail::ReplayCache> cache;
  std::vector<Namespace> ns;  // per salt
};

Result<Pass> make_pass(const sim_detail::ReplayCacheOptions& co, const ReplayTrace& t) {
  Pass p;
  KVTIER_ASSIGN_OR_RETURN(p.cache, sim_detail::ReplayCache::create(co));
  for (const std::string& s : t.salts) {
    Namespace ns;
    ns.cache_salt = s;
    p.ns.push_back(ns);
  }
  return p;
}

std::vector<size_t> arrival_order(const ReplayTrace& t) {
  std::vector<size_t> order(t.requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return t.requests[a].timestamp_ms < t.requests[b].timestamp_ms;
  });
  return order;
}

// The requests with a read-ahead hint, by its time.
std::vector<size_t> prefetch_order(const ReplayTrace& t) {
  std::vector<size_t> order;
  for (size_t i = 0; i < t.requests.size(); ++i)
    if (t.requests[i].prefetch_at_ms >= 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return t.requests[a].prefetch_at_ms < t.requests[b].prefetch_at_ms;
  });
  return order;
}

// Per-request timing state: arrival times and prefill service times.
struct Queue {
  std::vector<double> arrival, svc_cached, svc_uncached;
};

// Stored bytes per raw KV byte on tier k's link (its codec's).
double link_fraction(const ReplayOptions& o, int k) {
  const KvCodec codec = k == int(TierKind::kHost)   ? o.host_codec
                        : k == int(TierKind::kDisk) ? o.disk_codec
                        : k == int(TierKind::kRemote) ? o.remote_codec
                                                      : KvCodec::kNone;
  return stored_fraction(o, codec);
}

// Adds one request's cache outcome (and, with timing, its plan) to the report.
Status account(const ReplayOptions& o, const ReplayRequest& q, const sim_detail::ReplayStep& S, double arrival_s,
               TimingPlanner& planner, Queue& queue, ReplayReport& r) {
  const uint32_t P = o.page_tokens();
  const size_t bpt = o.model.geometry.bytes_per_token();
  ++r.requests;
  r.tokens += q.input_length;
  if (!S.served) ++r.refused_requests;
  for (int k = 0; k < kNumTiers; ++k) r.hit_tokens_by_tier[k] += uint64_t(S.pages_by_tier[k]) * P;
  const uint64_t cached_tokens = uint64_t(S.cached_pages()) * P;
  r.hit_tokens += cached_tokens;
  if (!o.timing) {
    r.reused_tokens += cached_tokens;
    for (int k = 1; k < kNumTiers; ++k) r.bytes_loaded[k] += uint64_t(double(S.pages_by_tier[k]) * P * bpt * link_fraction(o, k));
    return Status::Ok();
  }
  queue.arrival.push_back(arrival_s);
  double with = 0, without = 0;
  if (q.input_length > 0) {
    uint32_t group = 1;
    KVTIER_ASSIGN_OR_RETURN(Plan plan, planner.plan(S.runs, S.cached_pages(), q.input_length, group));
    with = plan.predicted_s;
    without = plan.recompute_all_s;
    r.compute_s_cached += plan.predicted_compute_s;
    r.compute_s_uncached += plan.recompute_all_s;
    const uint64_t gtok = uint64_t(group) * P;
    r.reused_tokens += uint64_t(plan.reused_pages()) * gtok;
    r.recomputed_cached_tokens += cached_tokens - uint64_t(plan.reused_pages()) * gtok;
    for (const PlanSegment& seg : plan.segments)
      if (seg.action == PlanAction::kLoad)
        r.bytes_loaded[static_cast<size_t>(seg.tier)] += uint64_t(double(seg.pages * gtok * bpt) * link_fraction(o, int(seg.tier)));
  }
  queue.svc_cached.push_back(with);
  queue.svc_uncached.push_back(without);
  return Status::Ok();
}

// The report's totals: ratios, the cache's own counters, the queue's TTFTs.
void finish_report(const ReplayOptions& o, const sim_detail::ReplayCacheStats& st, uint64_t max_hits, bool with_max,
                   const Queue& queue, ReplayReport& r) {
  const size_t page_bytes = size_t(o.page_tokens()) * o.model.geometry.bytes_per_token();
  for (int k = 0; k < kNumTiers; ++k) {
    r.bytes_stored[k] = k == int(kDev) ? 0 : uint64_t(double(st.stored_pages[k] * page_bytes) * link_fraction(o, k));
    r.evictions[k] = st.evictions[k];
    r.hit_ratio_by_tier[k] = r.tokens ? double(r.hit_tokens_by_tier[k]) / double(r.tokens) : 0;
  }
  r.retain_hints = st.retain_hints;
  r.retain_expiries = st.retain_expiries;
  r.retain_yields = st.retain_yields;
  r.prefetched_pages = st.prefetched_pages;
  r.token_hit_ratio = r.tokens ? double(r.hit_tokens) / double(r.tokens) : 0;
  if (with_max) r.max_token_hit_ratio = r.tokens ? double(max_hits) / double(r.tokens) : 0;
  if (o.timing) {
    r.ttft_cached_s = summarize_latency(simulate_prefill_queue(queue.arrival, queue.svc_cached, o.workers));
    r.ttft_uncached_s = summarize_latency(simulate_prefill_queue(queue.arrival, queue.svc_uncached, o.workers));
    r.prefill_compute_saved = r.compute_s_uncached > 0 ? 1.0 - r.compute_s_cached / r.compute_s_uncached : 0;
  }
}

// Replays the trace; `with_max` adds the unlimited-cache pass in the same loop.
Result<ReplayReport> replay_once(const ReplayOptions& o, const ReplayTrace& t, bool with_max) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const auto t0 = SteadyClock::now();
  SequenceSource src(t, o.page_tokens());
  const TracePages all_pages = trace_pages(t, src, o.page_tokens());
  KVTIER_ASSIGN_OR_RETURN(const sim_detail::ReplayCacheOptions co, cache_options(o, src.unit(), all_pages));
  KVTIER_ASSIGN_OR_RETURN(Pass main, make_pass(co, t));
  Pass max;
  if (with_max) {
    sim_detail::ReplayCacheOptions mo;
    mo.unit = src.unit();
    mo.device_pages = all_pages.device();
    KVTIER_ASSIGN_OR_RETURN(max, make_pass(mo, t));
  }

  ReplayReport r;
  r.options = o;
  r.compressed = src.compressed();
  r.skipped_lines = t.skipped_lines;
  auto unlimited = [&](const Capacity& c, uint64_t pages) { return c.unlimited ? UINT64_MAX : pages; };
  r.capacity_pages = {unlimited(o.device, co.device_pages), unlimited(o.host, co.host_pages),
                      uint64_t(co.disk_regions) * co.disk_chunks_per_region * o.chunk_pages,
                      uint64_t(co.remote_chunks) * o.chunk_pages};
  const std::vector<size_t> order = arrival_order(t);
  TimingPlanner planner(o);
  Queue queue;
  std::vector<TokenId> seq;
  sim_detail::ReplayStep step, max_step;
  uint64_t max_hits = 0;
  const double ts0 = order.empty() ? 0 : t.requests[order[0]].timestamp_ms;
  const std::vector<size_t> prefetches = prefetch_order(t);
  size_t next_prefetch = 0;
  for (size_t i : order) {
    const ReplayRequest& q = t.requests[i];
    // Read-ahead hints due by this arrival run first, at their own times.
    for (; next_prefetch < prefetches.size() &&
           t.requests[prefetches[next_prefetch]].prefetch_at_ms <= q.timestamp_ms;
         ++next_prefetch) {
      const ReplayRequest& p = t.requests[prefetches[next_prefetch]];
      if (p.input_length == 0) continue;
      main.cache->set_time_ms(p.prefetch_at_ms - ts0);
      src.fill(p, seq);
      KVTIER_RETURN_IF_ERROR(main.cache->prefetch(main.ns[p.salt], seq));
    }
    main.cache->set_time_ms(q.timestamp_ms - ts0);
    step = {};
    if (q.input_length > 0) {
      src.fill(q, seq);
      const uint32_t whole_pages = q.input_length / o.page_tokens();
      KVTIER_RETURN_IF_ERROR(main.cache->request(main.ns[q.salt], seq, whole_pages, step));
      if (q.retain_s > 0) KVTIER_RETURN_IF_ERROR(main.cache->retain(main.ns[q.salt], seq, whole_pages, q.retain_s));
      if (with_max) {
        KVTIER_RETURN_IF_ERROR(max.cache->request(max.ns[q.salt], seq, whole_pages, max_step));
        max_hits += uint64_t(max_step.cached_pages()) * o.page_tokens();
      }
    }
    const double arrival_s = (q.timestamp_ms - ts0) / 1e3 * o.time_scale;
    KVTIER_RETURN_IF_ERROR(account(o, q, step, arrival_s, planner, queue, r));
  }
  KVTIER_RETURN_IF_ERROR(main.cache->finish());
  finish_report(o, main.cache->stats(), max_hits, with_max, queue, r);
  r.elapsed_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  r.requests_per_s = r.elapsed_s > 0 ? double(r.requests) / r.elapsed_s : 0;
  return r;
}

}  // namespace

Result<ReplayReport> run_replay(const ReplayOptions& options, const ReplayTrace& trace) {
  return replay_once(options, trace, options.max_pass);
}

Result<std::vector<SweepPoint>> run_capacity_sweep(const ReplayOptions& options, const ReplayTrace& trace,
                                                   const std::vector<uint64_t>& capacities) {
  if (capacities.empty()) return Status::InvalidArgument("sweep: no capacities");
  double max_ratio = -1;
  if (options.max_pass) {
    ReplayOptions mo = options;
    mo.device = Capacity::infinite();
    mo.host = mo.disk = mo.remote = Capacity{};
    mo.timing = false;
    KVTIER_ASSIGN_OR_RETURN(ReplayReport m, replay_once(mo, trace, false));
    max_ratio = m.token_hit_ratio;
  }
  std::vector<SweepPoint> out;
  for (uint64_t cap : capacities) {
    ReplayOptions po = options;
    po.device = Capacity::tokens(cap);
    KVTIER_ASSIGN_OR_RETURN(ReplayReport rep, replay_once(po, trace, false));
    rep.max_token_hit_ratio = max_ratio;
    out.push_back(SweepPoint{cap, std::move(rep)});
  }
  return out;
}

}  // namespace kvtier
