#include "ttft_bench.h"

#include "scratch_dir.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/stats.h"
#include "engine/sampler.h"
#include "runtime/cached_prefill.h"
#include "runtime/calibration.h"
#include "runtime/runtime.h"
#include "tier_bench.h"

namespace kvtier {

namespace {
constexpr uint64_t kMaxPromptTokens = uint64_t(1) << 24;
}  // namespace

Status TtftBenchOptions::validate() const {
  if (prefixes.empty()) return Status::InvalidArgument("bench ttft: --prefix needs at least one length");
  for (uint32_t p : prefixes)
    if (p == 0) return Status::InvalidArgument("bench ttft: prefix lengths must be > 0");
  if (suffix == 0) return Status::InvalidArgument("bench ttft: suffix must be > 0");
  if (dir.empty()) return Status::InvalidArgument("bench ttft: a directory is required");
  for (uint32_t p : prefixes)
    if (uint64_t(p) + suffix > kMaxPromptTokens)
      return Status::InvalidArgument("bench ttft: a prompt (prefix + suffix) must be at most " +
                                     std::to_string(kMaxPromptTokens) + " tokens");
  return Status::Ok();
}

namespace {

using SteadyClock = std::chrono::steady_clock;
double ms_since(SteadyClock::time_point t0) { return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count(); }

struct Prompt {
  Namespace ns;
  std::vector<TokenId> tokens;
};

// One request through the cache; returns TTFT in ms and what the plan did.
Result<double> timed_request(ServingStack& s, const Prompt& p, bool layerwise, bool commit, LeaseReport* rep) {
  const auto t0 = SteadyClock::now();
  KVTIER_ASSIGN_OR_RETURN(CacheLookup look, s.cache->lookup(p.ns, p.tokens));
  const Plan plan = s.cache->plan(look);
  KVTIER_ASSIGN_OR_RETURN(CacheLease lease, s.cache->apply(std::move(look), plan));
  if (!layerwise) lease.wait_all();  // no overlap: every load lands before compute starts
  engine::SequenceKV kv;
  KVTIER_ASSIGN_OR_RETURN(auto logits, cached_prefill(*s.engine, *s.cache, lease, kv, p.tokens));
  (void)engine::argmax(logits.last());
  const double ms = ms_since(t0);
  if (rep) *rep = lease.report();
  if (commit) {
    KVTIER_RETURN_IF_ERROR(s.cache->commit(lease, std::span(p.tokens).first(kv.num_tokens)));
  } else {
    s.cache->release(lease);
  }
  return ms;
}

// The disk tier's files and the cost profile, in the bench's scratch directory.
struct BenchPaths {
  std::string disk_dir, profile;
};

// The serving stack's options for `o`: one sequence, the disk tier in
// `disk_dir`; tier sizes and profile still to set.
RuntimeOptions runtime_options(const TtftBenchOptions& o, const std::string& disk_dir) {
  RuntimeOptions ro;
  ro.model = o.model;
  ro.device = o.device;
  ro.kv_dtype = o.kv_dtype;
  ro.threads = o.threads;
  ro.disk_dir = disk_dir;
  ro.max_sequences = 1;
  return ro;
}

// Runs the full calibration (a longer disk sample than the start-up one),
// which drives the planner, on a small probe stack of `ro` and saves its
// profile; returns the model's KV bytes per token, which size the real stack.
Result<size_t> calibrate_probe(RuntimeOptions ro, const BenchPaths& paths) {
  ro.device_bytes = size_t(64) << 20;
  ro.host_bytes = 0;
  KVTIER_ASSIGN_OR_RETURN(ServingStack probe, build_stack(ro));
  CalibrationOptions cal;
  cal.quick = false;
  cal.disk_dir = paths.disk_dir;
  KVTIER_ASSIGN_OR_RETURN(CostProfile prof, calibrate(*probe.engine, probe.cache->pool(), cal));
  KVTIER_RETURN_IF_ERROR(prof.save(paths.profile));
  return probe.cache->geometry().bytes_per_token();
}

// Sizes ro's tiers to hold every prompt of `o` at `bpt` KV bytes per token,
// and points it at the saved profile.
void size_tiers(RuntimeOptions& ro, const TtftBenchOptions& o, size_t bpt, const std::string& profile) {
  uint64_t total_tokens = 0;
  uint32_t max_prompt = 0;
  for (uint32_t p : o.prefixes) {
    total_tokens += p + o.suffix;
    max_prompt = std::max(max_prompt, p + o.suffix);
  }
  ro.profile_path = profile;
  ro.device_bytes = (total_tokens + max_prompt + 1024) * bpt;
  ro.host_bytes = (total_tokens + 1024) * bpt;
  ro.disk_bytes = std::max<size_t>(size_t(2) * total_tokens * bpt, size_t(512) << 20);
}

// res's bandwidths behind the floors, measured in this run: raw O_DIRECT
// reads (a small tier bench under o.dir/raw), and host -> pool copies as
// loads from the host tier make them (memcpy, or pinned host -> GPU).
Status measure_bandwidths(const TtftBenchOptions& o, ServingStack& s, TtftBenchResult& res) {
  TierBenchOptions tb;
  tb.dir = (std::filesystem::path(o.dir) / "raw").string();
  tb.geometry = s.cache->geometry();
  tb.disk_bytes = size_t(256) << 20;
  tb.memory_bytes = size_t(64) << 20;
  tb.load_bytes = size_t(16) << 20;
  KVTIER_ASSIGN_OR_RETURN(TierBenchResult r, run_tier_bench(tb));
  res.raw_read_gbps = r.raw_read_gbps;
  res.memcpy_gbps = host_to_pool_bytes_per_s(s.cache->pool(), tb.memory_bytes) / 1e9;
  std::error_code ec;
  std::filesystem::remove_all(tb.dir, ec);
  return Status::Ok();
}

// One prompt per prefix length, and the TTFT of recomputing it.
struct Workload {
  std::vector<Prompt> prompts;
  std::vector<double> recompute_ms;
};

// For each prefix length n: a prompt of n + suffix random tokens under its
// own namespace, its recompute TTFT, and its prefix committed to the cache;
// then drains the cache.
Result<Workload> prepare_workload(ServingStack& s, const TtftBenchOptions& o, std::FILE* progress) {
  Workload w;
  std::mt19937 rng(17);
  const uint32_t vocab = s.model->config().vocab_size;
  for (uint32_t n : o.prefixes) {
    Prompt p;
    p.ns = Namespace{s.model->fingerprint(), "", "bench-" + std::to_string(n)};
    p.tokens.resize(n + o.suffix);
    for (auto& t : p.tokens) t = static_cast<TokenId>(300 + rng() % (vocab - 300));
    if (progress) std::fprintf(progress, "bench ttft: recompute %u + %u tokens (3 runs)...\n", n, o.suffix);
    // The baseline is measured as the cached rows are: the median of three
    // requests, so the first one's warm-up (scratch buffers, worker threads)
    // counts against neither side.
    std::vector<double> runs;
    for (int run = 0; run < 3; ++run) {
      KVTIER_ASSIGN_OR_RETURN(double ms, timed_request(s, p, true, /*commit=*/false, nullptr));
      runs.push_back(ms);
    }
    w.recompute_ms.push_back(median(runs));
    // Only the prefix is cached, so every tier's request computes the same
    // new suffix (caching the whole prompt would let device and host hits
    // reuse the suffix's full pages too).
    const Prompt prefix{p.ns, std::vector<TokenId>(p.tokens.begin(), p.tokens.begin() + n)};
    KVTIER_RETURN_IF_ERROR(timed_request(s, prefix, true, /*commit=*/true, nullptr).status());
    w.prompts.push_back(std::move(p));
  }
  KVTIER_RETURN_IF_ERROR(s.cache->drain());
  return w;
}

// One request's TTFT and what its plan did.
struct TimedRun {
  double ms = 0;
  LeaseReport report;
};

// Three requests of `p` (none committed), sorted by TTFT: [1] is the median.
// The first request after a (re)start also pays the engine's warm-up
// (scratch buffers, worker threads).
Result<std::vector<TimedRun>> three_requests(ServingStack& s, const Prompt& p, bool layerwise) {
  std::vector<TimedRun> runs(3);
  for (auto& run : runs) {
    KVTIER_ASSIGN_OR_RETURN(run.ms, timed_request(s, p, layerwise, /*commit=*/false, &run.report));
  }
  std::sort(runs.begin(), runs.end(), [](const TimedRun& a, const TimedRun& b) { return a.ms < b.ms; });
  return runs;
}

// The rows of res, tier by tier, each with its prompt's prefix cached on
// that tier, layer-wise overlap on and off.
struct TierRows {
  const TtftBenchOptions& o;
  const Workload& w;
  size_t bpt;  // KV bytes per token
  std::FILE* progress;
  TtftBenchResult& res;
  // Every device-hit TTFT, per prefix.
  std::vector<std::vector<double>> device_runs = std::vector<std::vector<double>>(o.prefixes.size());

  // A row per prompt and layer-wise setting, each the median of three
  // requests through `s`, whose cache holds the prefixes on `tier`.
  Status measure(ServingStack& s, TierKind tier) {
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      for (bool lw : {true, false}) {
        KVTIER_ASSIGN_OR_RETURN(const std::vector<TimedRun> runs, three_requests(s, w.prompts[i], lw));
        if (tier == TierKind::kDevice)
          for (const TimedRun& run : runs) device_runs[i].push_back(run.ms);
        res.rows.push_back(make_row(tier, i, lw, runs[1]));
        if (progress) print(res.rows.back());
      }
    }
    return Status::Ok();
  }

  // The row of prompt i on `tier` from its median run; floor_ms is final once all device runs are in.
  TtftRow make_row(TierKind tier, size_t i, bool lw, const TimedRun& median_run) const {
    const LeaseReport& rep = median_run.report;
    TtftRow row;
    row.tier = tier;
    row.prefix = o.prefixes[i];
    row.layerwise = lw;
    row.ttft_ms = median_run.ms;
    row.recompute_ms = w.recompute_ms[i];
    row.recomputed_tokens = rep.recomputed_cached_tokens;
    row.load_wait_ms = rep.load_wait_ns / 1e6;
    row.loaded_tokens = tier == TierKind::kDevice ? 0 : rep.reused_tokens_by_tier[static_cast<size_t>(tier)];
    const double bw = tier == TierKind::kHost ? res.memcpy_gbps : res.raw_read_gbps;
    row.load_floor_ms = tier == TierKind::kDevice ? 0 : double(o.prefixes[i]) * bpt / (bw * 1e9) * 1e3;
    row.floor_ms = std::max(row.load_floor_ms, median(device_runs[i]));
    return row;
  }

  // Once the device rows (the only rows yet) are in: the compute term of
  // their floors, the median of all six device-hit runs of each prompt
  // (layer-wise on and off do the same work there).
  void settle_device_floors() {
    for (size_t r = 0; r < res.rows.size(); ++r) res.rows[r].floor_ms = median(device_runs[r / 2]);
  }

  // One progress line for `row`.
  void print(const TtftRow& row) const {
    std::fprintf(progress,
                 "bench ttft: %-6s prefix %6u layerwise %-3s ttft %9.1f ms (floor %9.1f, recompute %9.1f; "
                 "loaded %u, recomputed %u cached tokens; waited %.1f ms for loads)\n",
                 std::string(tier_name(row.tier)).c_str(), row.prefix, row.layerwise ? "on" : "off", row.ttft_ms,
                 row.floor_ms, row.recompute_ms, row.loaded_tokens, row.recomputed_tokens, row.load_wait_ms);
  }
};

}  // namespace

Result<TtftBenchResult> run_ttft_bench(const TtftBenchOptions& o, std::FILE* progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const ScratchDir scratch(o.dir, "ttft");
  KVTIER_RETURN_IF_ERROR(scratch.create());
  const BenchPaths paths{(scratch.path() / "disk").string(), (scratch.path() / "profile.json").string()};
  RuntimeOptions ro = runtime_options(o, paths.disk_dir);
  KVTIER_ASSIGN_OR_RETURN(const size_t bpt, calibrate_probe(ro, paths));
  size_tiers(ro, o, bpt, paths.profile);
  KVTIER_ASSIGN_OR_RETURN(ServingStack s, build_stack(ro));
  for (uint32_t n : o.prefixes)
    if (n + o.suffix >= s.model->config().max_context)  // validate() bounded the sum
      return Status::InvalidArgument("bench ttft: a prompt of " + std::to_string(n) + " + " + std::to_string(o.suffix) +
                                     " tokens does not fit the model's context of " +
                                     std::to_string(s.model->config().max_context));
  TtftBenchResult res;
  res.model = o.model;
  res.device = o.device;
  KVTIER_RETURN_IF_ERROR(measure_bandwidths(o, s, res));
  KVTIER_ASSIGN_OR_RETURN(const Workload w, prepare_workload(s, o, progress));
  TierRows rows{o, w, bpt, progress, res};
  KVTIER_RETURN_IF_ERROR(rows.measure(s, TierKind::kDevice));
  rows.settle_device_floors();
  KVTIER_RETURN_IF_ERROR(s.cache->evict(TierKind::kDevice, UINT32_MAX));
  KVTIER_RETURN_IF_ERROR(rows.measure(s, TierKind::kHost));
  // Reopen: device and host start empty, and every disk chunk is read from its region file.
  s = ServingStack();
  ro.host_bytes = size_t(1) << 20;
  KVTIER_ASSIGN_OR_RETURN(s, build_stack(ro));
  KVTIER_RETURN_IF_ERROR(rows.measure(s, TierKind::kDisk));
  s = ServingStack();  // closed before `scratch` removes its files
  return res;
}

std::string TtftBenchResult::to_json() const {
  nlohmann::json j;
  j["bench"] = "ttft";
  j["model"] = model;
  j["device"] = device;
  j["memcpy_gbps"] = memcpy_gbps;
  j["raw_read_gbps"] = raw_read_gbps;
  j["results"] = nlohmann::json::array();
  for (const TtftRow& r : rows)
    j["results"].push_back({{"tier", tier_name(r.tier)},
                            {"prefix", r.prefix},
                            {"layerwise", r.layerwise},
                            {"ttft_ms", r.ttft_ms},
                            {"recompute_ms", r.recompute_ms},
                            {"floor_ms", r.floor_ms},
                            {"load_floor_ms", r.load_floor_ms},
                            {"load_wait_ms", r.load_wait_ms},
                            {"ttft_over_floor", r.floor_ms > 0 ? r.ttft_ms / r.floor_ms : 0.0},
                            {"speedup_vs_recompute", r.ttft_ms > 0 ? r.recompute_ms / r.ttft_ms : 0.0},
                            {"loaded_tokens", r.loaded_tokens},
                            {"recomputed_cached_tokens", r.recomputed_tokens}});
  return j.dump();
}

std::string TtftBenchResult::to_table() const {
  std::ostringstream s;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "model %s on %s; host->pool copy %.2f GB/s, raw O_DIRECT read %.2f GB/s (same run)\n",
                model.c_str(), device.c_str(), memcpy_gbps, raw_read_gbps);
  s << buf;
  std::snprintf(buf, sizeof(buf), "%-7s %7s %9s %11s %11s %11s %10s %10s\n", "tier", "prefix", "layerwise", "ttft_ms",
                "floor_ms", "recompute", "ttft/floor", "speed-up");
  s << buf;
  for (const TtftRow& r : rows) {
    std::snprintf(buf, sizeof(buf), "%-7s %7u %9s %11.1f %11.1f %11.1f %10.2f %9.1fx\n",
                  std::string(tier_name(r.tier)).c_str(), r.prefix, r.layerwise ? "on" : "off", r.ttft_ms, r.floor_ms,
                  r.recompute_ms, r.floor_ms > 0 ? r.ttft_ms / r.floor_ms : 0.0,
                  r.ttft_ms > 0 ? r.recompute_ms / r.ttft_ms : 0.0);
    s << buf;
  }
  return s.str();
}

}  // namespace kvtier
