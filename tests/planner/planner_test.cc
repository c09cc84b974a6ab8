#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "planner/planner.h"

namespace kvtier {
namespace {

// A synthetic machine: 1 TFLOP/s compute, host at 20 GB/s, disk at 2 GB/s with 2 ms latency.
CostProfile synthetic_profile() {
  CostProfile p;
  p.gemm_flops_per_s = 1e12;
  p.attn_flops_per_s = 1e12;
  p.link(TierKind::kDevice) = {0, 1e18};
  p.link(TierKind::kHost) = {20e-6, 20e9};
  p.link(TierKind::kDisk) = {2e-3, 2e9};
  p.link(TierKind::kRemote) = {5e-3, 1e9};
  return p;
}

// About an 8B-class model: 16 GFLOP per token, 128 KiB of KV per token.
ModelCost synthetic_model() {
  return ModelCost{.dense_flops_per_token = 16e9, .attn_flops_per_pair = 4.0 * 32 * 128 * 32, .num_layers = 32,
                   .kv_bytes_per_token = 128 * 1024};
}

Planner make(bool layerwise = true, CostProfile p = synthetic_profile(), ModelCost m = synthetic_model()) {
  return Planner::create(PlannerOptions{.page_tokens = 16, .layerwise = layerwise}, p, m).value();
}

uint32_t pages_with(const Plan& plan, PlanAction a) {
  uint32_t n = 0;
  for (const auto& s : plan.segments) n += s.action == a ? s.pages : 0;
  return n;
}

// Inputs that would make a predicted time infinite or NaN are refused: a subnormal compute rate
// priced every prefill at inf, an infinite cost per token at NaN.
TEST(Planner, InputsThatMakeNoFiniteTimeAreRefused) {
  EXPECT_TRUE(synthetic_profile().validate().ok());
  CostProfile p = synthetic_profile();
  p.gemm_flops_per_s = 1e-300;
  EXPECT_FALSE(p.validate().ok());
  p = synthetic_profile();
  p.attn_flops_per_s = 0.5;
  EXPECT_FALSE(p.validate().ok());
  ModelCost m = synthetic_model();
  EXPECT_TRUE(m.validate().ok());
  m.dense_flops_per_token = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(m.validate().ok());
  m = synthetic_model();
  m.attn_flops_per_pair = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(m.validate().ok());
}

TEST(Planner, FastTierLongPrefixLoads) {
  Planner pl = make();
  CachedRun runs[] = {{TierKind::kHost, 256}};  // 4096 tokens on host
  Plan plan = pl.plan(runs, 4096 + 64);
  EXPECT_EQ(plan.load_pages, 256u);
  EXPECT_EQ(plan.recompute_pages, 0u);
  EXPECT_LT(plan.predicted_s, plan.recompute_all_s / 10);
}

TEST(Planner, DeviceIsAlwaysInPlace) {
  Planner pl = make();
  CachedRun runs[] = {{TierKind::kDevice, 10}, {TierKind::kHost, 5}};
  Plan plan = pl.plan(runs, 15 * 16 + 3);
  ASSERT_FALSE(plan.segments.empty());
  EXPECT_EQ(plan.segments[0].action, PlanAction::kInPlace);
  EXPECT_EQ(plan.segments[0].pages, 10u);
  EXPECT_EQ(plan.suffix_tokens, 3u);
}

// A model small enough that one page recomputes in ~1.6 ms.
ModelCost small_model() {
  return ModelCost{.dense_flops_per_token = 1e8, .attn_flops_per_pair = 4.0 * 8 * 64 * 8, .num_layers = 8,
                   .kv_bytes_per_token = 32 * 1024};
}

TEST(Planner, SlowTierShortPrefixRecomputes) {
  Planner pl = make(true, synthetic_profile(), small_model());
  CachedRun runs[] = {{TierKind::kDisk, 1}};  // 16 tokens behind a 2 ms seek
  Plan plan = pl.plan(runs, 16 + 16);
  EXPECT_EQ(plan.recompute_pages, 1u);
  EXPECT_EQ(plan.load_pages, 0u);
}

// A read-ahead is priced as a load of every token from the slowest lower tier present.
TEST(Planner, ReadAheadIsTheSlowestLowerTiersLoad) {
  const size_t n = 4096;
  EXPECT_DOUBLE_EQ(make().read_ahead_seconds(n), load_seconds(synthetic_profile(), synthetic_model(), TierKind::kRemote, n));
  CostProfile p = synthetic_profile();
  p.link(TierKind::kRemote) = {};
  EXPECT_DOUBLE_EQ(make(true, p).read_ahead_seconds(n), load_seconds(p, synthetic_model(), TierKind::kDisk, n));
  EXPECT_NEAR(make(true, p).read_ahead_seconds(n), 2e-3 + n * 128.0 * 1024 / 2e9, 1e-12);
  p.link(TierKind::kDisk) = {};
  EXPECT_EQ(make(true, p).read_ahead_seconds(n), 0);  // nothing below the host: nothing to read ahead
}

TEST(Planner, MissingTierIsRecomputed) {
  CostProfile p = synthetic_profile();
  p.link(TierKind::kRemote) = {};
  Planner pl = make(true, p);
  CachedRun runs[] = {{TierKind::kRemote, 64}};
  EXPECT_EQ(pl.plan(runs, 64 * 16 + 1).recompute_pages, 64u);
}

// A disk codec halves the bytes on the link and adds a decode: the cost
// model counts both, and the planner loads more of a prefix from it.
TEST(Planner, DiskCodecCountsStoredBytesAndDecodeTime) {
  ModelCost raw = synthetic_model(), q8 = synthetic_model();
  q8.encoding[static_cast<size_t>(TierKind::kDisk)] = TierEncoding{.stored_fraction = 0.5, .decode_bytes_per_s = 8e9};
  const CostProfile p = synthetic_profile();
  const size_t n = 4096;
  const double bytes = double(n) * 128 * 1024;
  EXPECT_DOUBLE_EQ(load_seconds(p, raw, TierKind::kDisk, n), 2e-3 + bytes / 2e9);
  EXPECT_DOUBLE_EQ(load_seconds(p, q8, TierKind::kDisk, n), 2e-3 + bytes * 0.5 / 2e9 + bytes / 8e9);
  EXPECT_DOUBLE_EQ(load_seconds(p, q8, TierKind::kHost, n), load_seconds(p, raw, TierKind::kHost, n));
  // Compute just faster than the raw disk, slower than the encoded one.
  CostProfile tight = p;
  tight.gemm_flops_per_s = tight.attn_flops_per_s = 16e9 * double(n) / (0.8 * bytes / 2e9);
  CachedRun runs[] = {{TierKind::kDisk, uint32_t(n / 16)}};
  const Plan raw_plan = make(true, tight, raw).plan(runs, n + 16), q8_plan = make(true, tight, q8).plan(runs, n + 16);
  EXPECT_GT(q8_plan.load_pages, raw_plan.load_pages);  // a split either way: the encoded disk takes more of it
  EXPECT_LT(q8_plan.predicted_s, raw_plan.predicted_s);
}

// The threshold below which a disk read is not worth it comes from the profile:
// as the prefix grows, the decision flips from recompute to load once, never back.
TEST(Planner, BreakEvenIsMonotone) {
  Planner pl = make(false, synthetic_profile(), small_model());
  bool loaded_before = false;
  uint32_t flips = 0, first_load = 0;
  for (uint32_t pages = 1; pages <= 64; ++pages) {
    CachedRun runs[] = {{TierKind::kDisk, pages}};
    Plan plan = pl.plan(runs, pages * 16 + 16);
    bool loads = plan.load_pages > 0;
    if (loads != loaded_before) {
      ++flips;
      first_load = pages;
    }
    EXPECT_FALSE(loaded_before && !loads) << "flipped back to recompute at " << pages << " pages";
    loaded_before = loads;
  }
  EXPECT_EQ(flips, 1u);
  EXPECT_GT(first_load, 1u);  // a one-page prefix is not worth a 2 ms disk read
}

// Slow tier, long segment: recompute the front while loading the back; the two
// lanes finish together within one page's cost.
TEST(Planner, SplitBalancesLanesWithinAPage) {
  CostProfile p = synthetic_profile();
  p.link(TierKind::kDisk) = {0, 0.5e9};  // slow enough that loading everything loses to splitting
  ModelCost m = synthetic_model();
  m.attn_flops_per_pair = 0;  // linear compute cost keeps the balance point easy to state
  Planner pl = make(false, p, m);
  const uint32_t M = 512;
  CachedRun runs[] = {{TierKind::kDisk, M}};
  Plan plan = pl.plan(runs, M * 16);
  ASSERT_GT(plan.recompute_pages, 0u);
  ASSERT_GT(plan.load_pages, 0u);
  ASSERT_EQ(plan.segments.size(), 2u);
  EXPECT_EQ(plan.segments[0].action, PlanAction::kRecompute);  // the front is recomputed
  EXPECT_EQ(plan.segments[1].action, PlanAction::kLoad);       // the back is loaded
  const double front = recompute_seconds(p, m, plan.recompute_pages * 16, 0);
  const double back = load_seconds(p, m, TierKind::kDisk, plan.load_pages * 16);
  const double one_page = std::max(recompute_seconds(p, m, 16, 0), load_seconds(p, m, TierKind::kDisk, 16));
  EXPECT_LE(std::abs(front - back), one_page);
  EXPECT_LT(plan.predicted_s, load_seconds(p, m, TierKind::kDisk, M * 16));
  EXPECT_LT(plan.predicted_s, recompute_seconds(p, m, M * 16, 0));
}

// A recomputed segment that follows a load cannot start before that load has
// delivered its layers: causality is part of the timeline.
TEST(Planner, RecomputeWaitsForEarlierLoads) {
  Planner pl = make(false);
  std::vector<PlanSegment> segs = {{0, 100, TierKind::kDisk, PlanAction::kLoad},
                                   {100, 10, TierKind::kDisk, PlanAction::kRecompute}};
  const double load = load_seconds(pl.profile(), pl.model(), TierKind::kDisk, 1600);
  const double rc = recompute_seconds(pl.profile(), pl.model(), 160, 1600);
  EXPECT_NEAR(pl.evaluate(segs, 110 * 16), load + rc, 1e-12);
}

TEST(Planner, LayerwiseOverlapBeatsSerial) {
  CachedRun runs[] = {{TierKind::kDisk, 1024}};
  Plan serial = make(false).plan(runs, 1024 * 16 + 64);
  Plan overlap = make(true).plan(runs, 1024 * 16 + 64);
  EXPECT_LT(overlap.predicted_s, serial.predicted_s);
}

// Random matches: the plan covers every cached page once, in order; device
// pages stay in place; it is never worse than loading everything or recomputing
// everything that is not on device.
TEST(Planner, RandomMatchesAreWellFormedAndOptimalInFamily) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    Planner pl = make(rng() % 2);
    std::vector<CachedRun> runs;
    uint32_t total = 0;
    const TierKind tiers[] = {TierKind::kDevice, TierKind::kHost, TierKind::kDisk, TierKind::kRemote};
    for (int r = 0, n = 1 + rng() % 4; r < n; ++r) {
      runs.push_back({tiers[rng() % 4], 1 + uint32_t(rng() % 200)});
      total += runs.back().pages;
    }
    const size_t prompt = size_t(total) * 16 + rng() % 500;
    Plan plan = pl.plan(runs, prompt);
    uint32_t next = 0;
    for (const auto& s : plan.segments) {
      ASSERT_EQ(s.first_page, next);
      ASSERT_GT(s.pages, 0u);
      if (s.tier == TierKind::kDevice) {
        ASSERT_EQ(s.action, PlanAction::kInPlace);
      }
      next += s.pages;
    }
    ASSERT_EQ(next, total);
    std::vector<PlanSegment> all_load, all_recompute;
    uint32_t first = 0;
    for (const auto& r : runs) {
      PlanAction a = r.tier == TierKind::kDevice ? PlanAction::kInPlace : PlanAction::kLoad;
      all_load.push_back({first, r.pages, r.tier, a});
      all_recompute.push_back({first, r.pages, r.tier, a == PlanAction::kLoad ? PlanAction::kRecompute : a});
      first += r.pages;
    }
    EXPECT_LE(plan.predicted_s, pl.evaluate(all_load, prompt) * (1 + 1e-9));
    EXPECT_LE(plan.predicted_s, pl.evaluate(all_recompute, prompt) * (1 + 1e-9));
    EXPECT_EQ(pages_with(plan, PlanAction::kRecompute), plan.recompute_pages);
  }
}

// What an instance publishes for a router: the same prices for every match, and garbage refused.
TEST(Planner, JsonRoundTripPricesAlike) {
  ModelCost m = synthetic_model();
  m.encoding[size_t(TierKind::kDisk)] = {0.53, 5e9};
  CostProfile p = synthetic_profile();
  p.link(TierKind::kRemote) = {};  // no remote tier: never loaded from
  const Planner pl = make(false, p, m);
  auto back = Planner::from_json(pl.to_json());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->options().page_tokens, 16u);
  EXPECT_FALSE(back->options().layerwise);
  std::mt19937 rng(3);
  for (int i = 0; i < 50; ++i) {
    std::vector<CachedRun> runs;
    uint32_t pages = 0;
    for (int r = rng() % 4; r >= 0; --r) {
      runs.push_back({TierKind(rng() % kNumTiers), 1 + uint32_t(rng() % 200)});
      pages += runs.back().pages;
    }
    const size_t tokens = pages * 16 + 1 + rng() % 500;
    EXPECT_DOUBLE_EQ(back->plan(runs, tokens).predicted_s, pl.plan(runs, tokens).predicted_s);
    EXPECT_EQ(back->plan(runs, tokens).reused_pages(), pl.plan(runs, tokens).reused_pages());
  }
  EXPECT_FALSE(Planner::from_json("{}").ok());
  EXPECT_FALSE(Planner::from_json("[1]").ok());
  std::string bad = pl.to_json();
  bad.replace(bad.find("\"num_layers\":32"), 16, "\"num_layers\":0");
  EXPECT_FALSE(Planner::from_json(bad).ok());
}

TEST(CostProfile, JsonRoundTripAndValidation) {
  CostProfile p = synthetic_profile();
  p.source = "test";
  auto q = CostProfile::from_json(p.to_json());
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_DOUBLE_EQ(q->gemm_flops_per_s, p.gemm_flops_per_s);
  EXPECT_DOUBLE_EQ(q->link(TierKind::kDisk).bytes_per_s, 2e9);
  EXPECT_DOUBLE_EQ(q->link(TierKind::kDisk).latency_s, 2e-3);
  EXPECT_FALSE(CostProfile::from_json("{").ok());
  EXPECT_FALSE(CostProfile::from_json(R"({"format":"kvtier-cost-profile-v1"})").ok());
  EXPECT_FALSE(CostProfile::from_json(R"({"format":"kvtier-cost-profile-v1","gemm_flops_per_s":-1,"attn_flops_per_s":1})").ok());
  EXPECT_FALSE(CostProfile::load("/nonexistent/profile.json").ok());
}

}  // namespace
}  // namespace kvtier
