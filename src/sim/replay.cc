#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>

#include "sim/mooncake_trace.h"
#include "sim/replay_cache.h"

namespace kvtier {

ReplayOptions default_replay_options() {
  ReplayOptions o;
  o.model = replay_model_preset("llama-3-8b", DType::kBF16, 16).value();
  o.profile = hardware_preset("h100-pcie5").value();
  return o;
}

Status ReplayOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(model.geometry.validate());
  if (chunk_pages == 0 || chunk_pages > 1024) return Status::InvalidArgument("replay: chunk_pages must be in [1, 1024]");
  if (device.zero()) return Status::InvalidArgument("replay: the device tier needs a non-zero capacity");
  if (disk.unlimited || remote.unlimited)
    return Status::InvalidArgument("replay: disk and remote capacities must be finite");
  if (selective_hits == 0) return Status::InvalidArgument("replay: selective_hits must be >= 1");
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

using Clock = std::chrono::steady_clock;
constexpr size_t kDev = static_cast<size_t>(TierKind::kDevice);

// Pages of a capacity (UINT64_MAX = unlimited, 0 = absent).
uint64_t to_pages(const Capacity& c, const KVGeometry& g) {
  if (c.unlimited) return UINT64_MAX;
  return c.bytes ? c.value / g.page_bytes() : c.value / g.page_tokens;
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

  void fill(const ReplayRequest& r, std::vector<TokenId>& seq) {
    const uint32_t W = r.input_length / P_;
    if (compressed_) {
      const uint32_t ppb = t_.block_tokens / P_;
      const auto ids = t_.ids(r);
      seq.resize(W);
      for (uint32_t i = 0; i < W; ++i) {
        const uint32_t k = i % ppb;
        if (k == 0) {
          expand_block(ids[i / ppb], std::span<TokenId>(&seq[i], 1));
        } else {
          seq[i] = static_cast<TokenId>(k);
        }
      }
      return;
    }
    if (r.has_tokens) {
      const auto p = t_.prompt(r);
      seq.assign(p.begin(), p.begin() + size_t(W) * P_);
      return;
    }
    const uint32_t B = t_.block_tokens;
    const auto ids = t_.ids(r);
    const size_t blocks = (size_t(W) * P_ + B - 1) / B;
    seq.resize(blocks * B);
    for (size_t b = 0; b < blocks; ++b) expand_block(ids[b], std::span<TokenId>(seq.data() + b * B, B));
    seq.resize(size_t(W) * P_);
  }

 private:
  const ReplayTrace& t_;
  uint32_t P_;
  bool compressed_;
};

sim_detail::CacheModelOptions cache_options(const ReplayOptions& o, uint32_t unit) {
  const KVGeometry& g = o.model.geometry;
  sim_detail::CacheModelOptions c;
  c.unit = unit;
  c.chunk_pages = o.chunk_pages;
  c.device_pages = to_pages(o.device, g);
  c.host_pages = to_pages(o.host, g);
  const uint64_t chunk_div = o.chunk_pages;
  c.disk_chunks = to_pages(o.disk, g) / chunk_div;
  c.remote_chunks = to_pages(o.remote, g) / chunk_div;
  c.disk_reclaim = o.disk_reclaim;
  c.remote_reclaim = o.remote_reclaim;
  c.write_policy = o.write_policy;
  c.selective_hits = o.selective_hits;
  c.eviction = o.eviction;
  c.hash = o.hash;
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
      KVTIER_ASSIGN_OR_RETURN(Planner p, Planner::create(po, o_.profile, o_.model.cost));
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
  const ReplayOptions& o_;
  std::map<uint32_t, Planner> planners_;
  std::vector<CachedRun> coarse_;
};

struct Pass {
  std::unique_ptr<sim_detail::CacheModel> cache;
  std::vector<NsKey> ns;  // per salt
};

Result<Pass> make_pass(const sim_detail::CacheModelOptions& co, const ReplayTrace& t) {
  Pass p;
  KVTIER_ASSIGN_OR_RETURN(p.cache, sim_detail::CacheModel::create(co));
  for (const std::string& s : t.salts) {
    Namespace ns;
    ns.cache_salt = s;
    p.ns.push_back(p.cache->ns_key(ns));
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

// Replays the trace; `with_max` adds the unlimited-cache pass in the same loop.
Result<ReplayReport> replay_once(const ReplayOptions& o, const ReplayTrace& t, bool with_max) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const auto t0 = Clock::now();
  const uint32_t P = o.page_tokens();
  SequenceSource src(t, P);
  const sim_detail::CacheModelOptions co = cache_options(o, src.unit());
  if (co.device_pages == 0) return Status::InvalidArgument("replay: the device capacity is below one page");
  KVTIER_ASSIGN_OR_RETURN(Pass main, make_pass(co, t));
  Pass max;
  if (with_max) {
    sim_detail::CacheModelOptions mo;
    mo.unit = src.unit();
    KVTIER_ASSIGN_OR_RETURN(max, make_pass(mo, t));
  }

  ReplayReport r;
  r.options = o;
  r.compressed = src.compressed();
  r.skipped_lines = t.skipped_lines;
  r.capacity_pages = {co.device_pages, co.host_pages, co.disk_chunks * o.chunk_pages,
                      co.remote_chunks * o.chunk_pages};
  const std::vector<size_t> order = arrival_order(t);
  const size_t bpt = o.model.geometry.bytes_per_token();
  TimingPlanner planner(o);
  std::vector<double> arrival, svc_cached, svc_uncached;
  if (o.timing) {
    arrival.reserve(order.size());
    svc_cached.reserve(order.size());
    svc_uncached.reserve(order.size());
  }
  std::vector<TokenId> seq;
  sim_detail::CacheModelLookup L, ML;
  uint64_t max_hits = 0;
  const double ts0 = order.empty() ? 0 : t.requests[order[0]].timestamp_ms;
  for (size_t i : order) {
    const ReplayRequest& q = t.requests[i];
    ++r.requests;
    r.tokens += q.input_length;
    const uint32_t lookup_pages = q.input_length == 0 ? 0 : (q.input_length - 1) / P;
    src.fill(q, seq);
    main.cache->lookup(main.ns[q.salt], seq, lookup_pages, L);
    for (int k = 0; k < kNumTiers; ++k) r.hit_tokens_by_tier[k] += uint64_t(L.pages_by_tier[k]) * P;
    const uint64_t cached_tokens = uint64_t(L.cached_pages()) * P;
    r.hit_tokens += cached_tokens;
    if (o.timing) {
      arrival.push_back((q.timestamp_ms - ts0) / 1e3 * o.time_scale);
      double with = 0, without = 0;
      if (q.input_length > 0) {
        uint32_t group = 1;
        KVTIER_ASSIGN_OR_RETURN(Plan plan, planner.plan(L.runs, L.cached_pages(), q.input_length, group));
        with = plan.predicted_s;
        without = plan.recompute_all_s;
        r.compute_s_cached += plan.predicted_compute_s;
        r.compute_s_uncached += plan.recompute_all_s;
        const uint64_t gtok = uint64_t(group) * P;
        r.reused_tokens += uint64_t(plan.reused_pages()) * gtok;
        r.recomputed_cached_tokens += cached_tokens - uint64_t(plan.reused_pages()) * gtok;
        for (const PlanSegment& s : plan.segments)
          if (s.action == PlanAction::kLoad) r.bytes_loaded[static_cast<size_t>(s.tier)] += s.pages * gtok * bpt;
      }
      svc_cached.push_back(with);
      svc_uncached.push_back(without);
    } else {
      r.reused_tokens += cached_tokens;
      for (int k = 1; k < kNumTiers; ++k) r.bytes_loaded[k] += uint64_t(L.pages_by_tier[k]) * P * bpt;
    }
    KVTIER_RETURN_IF_ERROR(main.cache->commit(main.ns[q.salt], seq, L));
    if (with_max) {
      max.cache->lookup(max.ns[q.salt], seq, lookup_pages, ML);
      max_hits += uint64_t(ML.cached_pages()) * P;
      KVTIER_RETURN_IF_ERROR(max.cache->commit(max.ns[q.salt], seq, ML));
    }
  }

  const sim_detail::CacheModelStats st = main.cache->stats();
  for (int k = 0; k < kNumTiers; ++k) {
    r.bytes_stored[k] = k == int(kDev) ? 0 : st.stored_pages[k] * P * bpt;
    r.evictions[k] = st.evictions[k];
    r.hit_ratio_by_tier[k] = r.tokens ? double(r.hit_tokens_by_tier[k]) / double(r.tokens) : 0;
  }
  r.token_hit_ratio = r.tokens ? double(r.hit_tokens) / double(r.tokens) : 0;
  if (with_max) r.max_token_hit_ratio = r.tokens ? double(max_hits) / double(r.tokens) : 0;
  if (o.timing) {
    r.ttft_cached_s = summarize_latency(simulate_prefill_queue(arrival, svc_cached, o.workers));
    r.ttft_uncached_s = summarize_latency(simulate_prefill_queue(arrival, svc_uncached, o.workers));
    r.prefill_compute_saved = r.compute_s_uncached > 0 ? 1.0 - r.compute_s_cached / r.compute_s_uncached : 0;
  }
  r.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
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
