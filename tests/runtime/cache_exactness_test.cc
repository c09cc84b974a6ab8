// The heart of the suite: a prompt served from cached KV — from every tier
// and from mixtures — gives the same output as a full recompute.
#include "cache_rig.h"
#include "io/fault_file_system.h"
#include "model_variants.h"
#include "runtime/runtime.h"
#include "server/stats_render.h"

namespace kvtier::testing {
namespace {

constexpr int kSteps = 32;
constexpr uint32_t kDevice = 0, kHost = 1, kDisk = 2;

TEST(CacheExactness, FromDevice) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 1);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  Outcome hit = rig.cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDevice], 288u);  // (300-1)/16 whole pages
  expect_same(hit, ref, 1e-5);
}

TEST(CacheExactness, FromHost) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 2);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  Outcome hit = rig.cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDevice], 0u);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost], 288u);
  expect_same(hit, ref, 1e-5);
  // The host hit was promoted back to the device.
  Outcome again = rig.cached(prompt, kSteps);
  EXPECT_EQ(again.report.reused_tokens_by_tier[kDevice], 288u);
  expect_same(again, ref, 1e-5);
}

TEST(CacheExactness, FromDisk) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 3);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());  // device and host dropped; disk keeps whole chunks and the tails
  Outcome hit = rig.cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDisk], 288u);  // 4 whole chunks of 4 pages, the prompt's 2-page tail
  EXPECT_EQ(hit.report.reused_tokens(), 288u);
  expect_same(hit, ref, 1e-5);
  // The session's next turn, found on the disk alone: the prompt and more (an agent's client replays
  // its own tool call, not the reply). The sequence's fifth chunk holds the reply, so only the
  // prompt's tail continues the four whole chunks; without it the turn recomputed 2 pages.
  auto next = prompt;
  for (TokenId t : CacheRig::random_tokens(100, 30)) next.push_back(t);
  Outcome ref2 = rig.reference(next, kSteps);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  Outcome turn = rig.cached(next, kSteps);
  EXPECT_EQ(turn.report.reused_tokens_by_tier[kDisk], 288u);
  expect_same(turn, ref2, 1e-5);
}

// --no-store-tails: the disk keeps whole chunks only, and the prompt's last
// 2 pages are recomputed.
TEST(CacheExactness, WithoutTailsTheDiskServesWholeChunksOnly) {
  RigOptions o;
  o.store_tails = false;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 3);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  Outcome hit = rig.cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDisk], 256u);  // 4 whole chunks of 4 pages
  expect_same(hit, ref, 1e-5);
}

TEST(CacheExactness, MixtureOfTiers) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(16 * 40 + 5, 4);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  ASSERT_TRUE(rig.cache->drain().ok());
  // Tail pages lose their device copy (kept on host); the deepest lose both (disk only).
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 30).ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 12).ok());
  Outcome hit = rig.cached(prompt, kSteps);
  int tiers = 0;
  for (uint32_t t : {kDevice, kHost, kDisk}) tiers += hit.report.reused_tokens_by_tier[t] > 0;
  EXPECT_EQ(tiers, 3) << "device " << hit.report.reused_tokens_by_tier[kDevice] << " host "
                      << hit.report.reused_tokens_by_tier[kHost] << " disk " << hit.report.reused_tokens_by_tier[kDisk];
  EXPECT_EQ(hit.report.reused_tokens(), 16u * 40);
  expect_same(hit, ref, 1e-5);
}

// Slow links, and a disk that loads the 1,024-token prefix of the split tests
// in the time it takes to recompute it: the planner recomputes a front while
// the back loads.
RigOptions split_rig() {
  RigOptions o;
  o.fast_links = false;
  auto cfg = engine::model_preset("tiny");
  const KVGeometry g = cfg->kv_geometry(o.dtype, 16);
  CostProfile compute;
  compute.gemm_flops_per_s = compute.attn_flops_per_s = 1e12;  // as the rig's slow-links profile
  const size_t tokens = 16 * 64;
  o.disk_bytes_per_s = double(tokens * g.bytes_per_token()) / recompute_seconds(compute, model_cost(*cfg, g), tokens, 0);
  return o;
}

TEST(CacheExactness, SplitRecomputeAndLoad) {
  // Loading the prefix from disk takes as long as recomputing it: the planner
  // recomputes the front while the back loads (neither alone is as fast).
  RigOptions o = split_rig();
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(16 * 64 + 3, 5);
  Outcome ref = only_on_disk(rig, prompt);
  Outcome hit = rig.cached(prompt, 8);
  expect_same(hit, ref, 1e-5);
  // The plan split: a recomputed front, then the rest loaded; the lease and the report follow it.
  ASSERT_GE(hit.plan.segments.size(), 2u);
  EXPECT_EQ(hit.plan.segments.front().action, PlanAction::kRecompute);
  EXPECT_EQ(hit.plan.segments.back().action, PlanAction::kLoad);
  EXPECT_GT(hit.plan.recompute_pages, 0u);
  EXPECT_GT(hit.plan.load_pages, 0u);
  EXPECT_EQ(hit.plan.recompute_pages + hit.plan.load_pages, hit.plan.cached_pages);
  EXPECT_EQ(hit.report.recomputed_cached_tokens, hit.plan.recompute_pages * 16);
  EXPECT_EQ(hit.report.reused_tokens(), hit.plan.load_pages * 16);
}

// A split plan loads the chunks its recompute range cuts whole, into scratch
// pages. For a prompt near the pool's size those pages could never all be had:
// apply() answered Busy for ever (a server's queue stalled behind it). The
// cache's plan loads every cached page instead, and serves it exactly.
TEST(CacheExactness, APlanWhoseScratchPagesCannotFitTheDeviceLoadsEverything) {
  RigOptions o = split_rig();
  o.chunk_pages = 16;
  o.device_pages = 66;  // the prompt's 65 pages, and one
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(16 * 64 + 3, 5);
  Outcome ref = only_on_disk(rig, prompt);
  auto look = rig.cache->lookup(rig.ns, prompt);
  ASSERT_TRUE(look.ok());
  const Plan split = rig.cache->planner().plan(look->runs, look->prompt_tokens);
  ASSERT_GT(split.recompute_pages, 0u);
  ASSERT_GT(split.recompute_pages % o.chunk_pages, 0u) << "the split must cut a chunk";
  auto refused = rig.cache->apply(std::move(*look), split);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().is(StatusCode::kBusy)) << refused.status().to_string();
  Outcome hit = rig.cached(prompt, 8);  // lookup → KVCache::plan → apply
  EXPECT_EQ(hit.plan.recompute_pages, 0u);
  EXPECT_EQ(hit.report.reused_tokens(), 16u * 64);
  expect_same(hit, ref, 1e-5);
}

// The scratch pages a split plan's chunk loads landed in go back once the
// sequence decodes (its first grow), not when it ends.
TEST(CacheExactness, ScratchPagesGoBackWhenTheSequenceDecodes) {
  RigOptions o = split_rig();
  o.chunk_pages = 16;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(16 * 64 + 3, 5);
  only_on_disk(rig, prompt);
  auto look = rig.cache->lookup(rig.ns, prompt);
  ASSERT_TRUE(look.ok());
  const Plan split = rig.cache->plan(*look);
  ASSERT_GT(split.recompute_pages % o.chunk_pages, 0u) << "the split must cut a chunk";
  auto lease = rig.cache->apply(std::move(*look), split);
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  engine::SequenceKV kv;
  ASSERT_TRUE(cached_prefill(*rig.engine, *rig.cache, *lease, kv, prompt).ok());
  const uint32_t before = rig.cache->pool().free_pages();
  ASSERT_TRUE(rig.cache->grow(*lease, kv.num_tokens + 1).ok());  // still inside the last page
  ASSERT_EQ(split.segments.front().action, PlanAction::kRecompute);  // the front, then the rest loaded
  EXPECT_EQ(rig.cache->pool().free_pages() - before, split.recompute_pages % o.chunk_pages);  // its cut chunk
  rig.cache->release(*lease);
}

// A lease locks the index path only as far as its plan reads it: matched
// device pages it recomputes stay evictable (locked, they held pool pages the
// request itself might need, and a prompt near the pool's size waited for
// ever). Here the plan recomputes the cached prefix, or all but 12 pages.
TEST(CacheExactness, ALeaseLocksOnlyThePagesItsPlanReads) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(16 * 20 + 5, 8);
  Outcome ref = rig.reference(prompt, 4);
  rig.cached(prompt, 4);
  ASSERT_TRUE(rig.cache->drain().ok());
  auto look = rig.cache->lookup(rig.ns, prompt);
  ASSERT_TRUE(look.ok());
  const uint32_t M = look->cached_pages();
  ASSERT_EQ(M, 20u);
  for (uint32_t read : {0u, 12u}) {  // pages used in place, the rest recomputed
    auto again = rig.cache->lookup(rig.ns, prompt);
    ASSERT_TRUE(again.ok());
    Plan plan;
    plan.cached_pages = M;
    if (read > 0) plan.segments.push_back({0, read, TierKind::kDevice, PlanAction::kInPlace});
    plan.segments.push_back({read, M - read, TierKind::kDevice, PlanAction::kRecompute});
    auto lease = rig.cache->apply(std::move(*again), plan);
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    EXPECT_EQ(rig.cache->stats().index.protected_pages, read);
    EXPECT_EQ(rig.cache->stats().index.evictable_device_pages, M - read);
    Outcome hit = rig.drive(*lease, prompt, 4, /*commit=*/false);
    expect_same(hit, ref, 1e-5);
  }
  EXPECT_TRUE(rig.cache->index().check_invariants().ok());
}

// A lease that loaded its prompt from the host keeps those pages locked in the index only while
// its loads run. Device copies of them that another sequence gives the index later (a commit of
// the same prompt) stay evictable: locked for the lease's life, they left it short of pages that
// nothing could free, and a sequence decoding alone failed with Busy (the server ended it) though
// its prompt and every token it asked for fit the pool.
TEST(CacheExactness, CopiesCommittedIntoTheHostPagesALeaseLoadedStayEvictable) {
  RigOptions o;
  o.device_pages = 12;
  o.disk = false;
  CacheRig rig(o);
  const auto prompt = CacheRig::random_tokens(4 * 16 + 1, 7);
  rig.cached(prompt, 0);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 100).ok());  // its pages on the host only
  auto a = rig.cache->acquire(rig.ns, prompt);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_EQ(a->report().reused_tokens_by_tier[int(TierKind::kHost)], 4u * 16);
  auto b = rig.cache->acquire(rig.ns, prompt);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  b->wait_all();
  ASSERT_TRUE(rig.cache->commit(*b, prompt).ok());  // b's pages: the index's device copies of a's
  ASSERT_TRUE(rig.cache->drain().ok());
  const Status grown = rig.cache->grow(*a, size_t(o.device_pages) * 16);  // a alone takes the whole pool
  EXPECT_TRUE(grown.ok()) << grown.to_string();
  EXPECT_EQ(rig.cache->stats().index.protected_pages, 0u);
  rig.cache->release(*a);
  EXPECT_TRUE(rig.cache->index().check_invariants().ok());
}

// A lookup kept while its device pages were evicted, and taken by another sequence, is refused
// (Retry) rather than applied over that sequence's pages (the Python API's lookup and load are
// two calls); acquire() looks the prompt up again, and is exact.
// A 20-page prompt cached (its pages on the device, with host copies) and looked up: the lookup
// goes stale once the device pages are evicted.
struct LookedUp {
  static RigOptions options() {
    RigOptions o;
    o.device_pages = 32;
    return o;
  }
  CacheRig rig{options()};
  std::vector<TokenId> prompt = CacheRig::random_tokens(16 * 20 + 5, 9);
  Outcome ref = rig.reference(prompt, 4);
  std::optional<CacheLookup> stale;
  LookedUp() {
    rig.cached(prompt, 4);
    EXPECT_TRUE(rig.cache->drain().ok());
    auto look = rig.cache->lookup(rig.ns, prompt);
    EXPECT_TRUE(look.ok());
    if (look.ok()) stale = std::move(look).value();
  }
};

TEST(CacheExactness, AStaleLookupIsRefusedNotAppliedOverAnotherSequencesPages) {
  LookedUp l;
  auto& [rig, prompt, ref, stale] = l;
  ASSERT_TRUE(stale);
  ASSERT_EQ(stale->index_pages, 20u);
  ASSERT_TRUE(stale->match.locations[0].on_device());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 32).ok());  // down to their host copies
  {
    auto other = rig.cache->fresh(rig.ns, 16 * 28);  // the freed pages, now another's (until the block ends)
    ASSERT_TRUE(other.ok()) << other.status().to_string();
    const Plan plan = rig.cache->plan(*stale);
    auto lease = rig.cache->apply(std::move(*stale), plan);
    ASSERT_FALSE(lease.ok());
    EXPECT_EQ(lease.status().code(), StatusCode::kRetry) << lease.status().to_string();
  }
  auto fresh_look = rig.cache->acquire(rig.ns, prompt);
  ASSERT_TRUE(fresh_look.ok()) << fresh_look.status().to_string();
  expect_same(rig.drive(*fresh_look, prompt, 4, /*commit=*/false), ref, 1e-5);
}

// A prompt's logprobs come from slices of rows, so that the logits held at once stay bounded; the
// slices agree with the whole prompt's logits row by row, and the last row is the same.
TEST(CacheExactness, PromptLogprobsInSlicesMatchTheWholePromptsLogits) {
  CacheRig rig;
  const auto prompt = CacheRig::random_tokens(16 * 5 + 3, 4);
  auto whole_lease = rig.cache->fresh(rig.ns, prompt.size());
  ASSERT_TRUE(whole_lease.ok());
  engine::SequenceKV kv;
  kv.pages = whole_lease->pages();
  engine::PrefillOptions all;
  all.all_logits = true;
  auto whole = rig.engine->prefill(kv, prompt, 0, all);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  *whole_lease = CacheLease();
  auto lease = rig.cache->fresh(rig.ns, prompt.size());
  ASSERT_TRUE(lease.ok());
  std::vector<engine::TokenLogprobs> lp;
  const size_t row_bytes = size_t(whole->vocab) * sizeof(float);
  kv = {};
  kv.pages = lease->pages();
  // In two calls, as a chunked prefill makes them (the second continues from kv.num_tokens).
  auto first = prefill_with_prompt_logprobs(*rig.engine, kv, prompt, 40, 2, lp, 7 * row_bytes);  // 7 rows a slice
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(kv.num_tokens, 40u);
  ASSERT_EQ(lp.size(), 40u);
  auto last = prefill_with_prompt_logprobs(*rig.engine, kv, prompt, prompt.size(), 2, lp, 7 * row_bytes);
  ASSERT_TRUE(last.ok()) << last.status().to_string();
  EXPECT_FALSE(prefill_with_prompt_logprobs(*rig.engine, kv, prompt, prompt.size(), 2, lp).ok());  // nothing left
  ASSERT_EQ(lp.size(), prompt.size() - 1);
  for (size_t i = 0; i < lp.size(); ++i) {
    const engine::TokenLogprobs expected = engine::token_logprobs(whole->row(uint32_t(i)), prompt[i + 1], 2);
    EXPECT_EQ(lp[i].token, prompt[i + 1]);
    EXPECT_NEAR(lp[i].logprob, expected.logprob, 1e-4) << i;
    ASSERT_EQ(lp[i].top.size(), 2u);
    EXPECT_EQ(lp[i].top[0].first, expected.top[0].first) << i;
  }
  EXPECT_LE(last->rows, 7u);  // never more logits at once than the bound
  ASSERT_EQ(last->last().size(), whole->last().size());
  for (size_t v = 0; v < whole->last().size(); ++v) ASSERT_NEAR(last->last()[v], whole->last()[v], 1e-4) << v;
}

// acquire() from a lookup gone stale looks the prompt up again and applies that: the caller's plan
// choice sees the second lookup, and the lookup statistics count the request once. (Blending and the
// replay take their leases this way; a stale lookup was their request's error.)
TEST(CacheExactness, AcquireFromAStaleLookupLooksAgainAndCountsOnce) {
  LookedUp l;
  auto& [rig, prompt, ref, stale] = l;
  ASSERT_TRUE(stale);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 32).ok());  // down to their host copies
  const uint64_t lookups = rig.cache->stats().lookups;
  std::vector<uint32_t> host_pages_seen;
  auto lease = rig.cache->acquire(std::move(*stale), rig.ns, prompt, [&](const CacheLookup& look) {
    uint32_t host = 0;
    for (const CachedRun& r : look.runs) host += r.tier == TierKind::kHost ? r.pages : 0;
    host_pages_seen.push_back(host);
    return rig.cache->plan(look);
  });
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_EQ(host_pages_seen, (std::vector<uint32_t>{0, 20}));  // the stale lookup's device pages, then the host's
  EXPECT_EQ(rig.cache->stats().lookups, lookups);
  expect_same(rig.drive(*lease, prompt, 4, /*commit=*/false), ref, 1e-5);
}

// A second lookup gone stale too (apply() lands read-aheads first, which may evict what it found)
// is looked up again: acquire() returned the second Retry, and the scheduler ended the request (or
// a paused sequence being resumed) with it. Here the second plan's host copies are evicted before
// it is applied; the third lookup finds nothing cached, and the lease is exact.
TEST(CacheExactness, AcquireLooksAgainWhileItsLookupsGoStale) {
  LookedUp l;
  auto& [rig, prompt, ref, stale] = l;
  ASSERT_TRUE(stale);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 32).ok());  // the first lookup's device pages: gone
  std::vector<uint32_t> host_pages_seen;
  auto lease = rig.cache->acquire(std::move(*stale), rig.ns, prompt, [&](const CacheLookup& look) {
    uint32_t host = 0;
    for (const CachedRun& r : look.runs) host += r.tier == TierKind::kHost ? r.pages : 0;
    host_pages_seen.push_back(host);
    const Plan plan = rig.cache->plan(look);
    if (host > 0) {
      EXPECT_TRUE(rig.cache->evict(TierKind::kHost, UINT32_MAX).ok());  // the plan's host copies: gone
    }
    return plan;
  });
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_EQ(host_pages_seen, (std::vector<uint32_t>{0, 20, 0}));
  expect_same(rig.drive(*lease, prompt, 4, /*commit=*/false), ref, 1e-5);
}

// A lease of more positions than the pool has pages for is refused: 2^64-1 tokens wrapped to no
// page at all, and the caller got an empty page table for them.
TEST(CacheExactness, ALeaseLargerThanThePoolIsRefused) {
  RigOptions o;
  o.device_pages = 32;
  CacheRig rig(o);
  EXPECT_EQ(rig.cache->fresh(rig.ns, SIZE_MAX).status().code(), StatusCode::kNoSpace);
  EXPECT_EQ(rig.cache->fresh(rig.ns, 16 * 32 + 1).status().code(), StatusCode::kNoSpace);
  auto whole = rig.cache->fresh(rig.ns, 16 * 32);  // exactly the pool
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(rig.cache->grow(*whole, SIZE_MAX - 1).code(), StatusCode::kNoSpace);
}

TEST(CacheExactness, F16FromDiskAndHost) {
  RigOptions o;
  o.dtype = DType::kF16;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(16 * 20 + 7, 6);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  Outcome host = rig.cached(prompt, kSteps);
  EXPECT_GT(host.report.reused_tokens_by_tier[kHost], 0u);
  expect_same(host, ref, 1e-3);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  Outcome disk = rig.cached(prompt, kSteps);
  EXPECT_GT(disk.report.reused_tokens_by_tier[kDisk], 0u);
  expect_same(disk, ref, 1e-3);
}

class CacheExactnessVariant : public ::testing::TestWithParam<std::string> {};

// Every architecture variant served from each local tier, and from all three
// at once, gives the recompute's output (RoPE variants and biases change what
// the cached K holds; a tier path that assumed one layout would differ here).
TEST_P(CacheExactnessVariant, FromEveryTier) {
  RigOptions o;
  auto model = model_variant(GetParam(), 3);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  o.model = *model;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(16 * 40 + 5, 12);
  Outcome ref = rig.reference(prompt, kSteps);
  rig.cached(prompt, kSteps);
  Outcome device = rig.cached(prompt, kSteps);
  EXPECT_EQ(device.report.reused_tokens_by_tier[kDevice], 16u * 40);
  expect_same(device, ref, 1e-5);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  Outcome host = rig.cached(prompt, kSteps);
  EXPECT_EQ(host.report.reused_tokens_by_tier[kHost], 16u * 40);
  expect_same(host, ref, 1e-5);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  Outcome disk = rig.cached(prompt, kSteps);
  EXPECT_EQ(disk.report.reused_tokens_by_tier[kDisk], 16u * 40);
  expect_same(disk, ref, 1e-5);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 30).ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 12).ok());
  Outcome mixed = rig.cached(prompt, kSteps);
  for (uint32_t t : {kDevice, kHost, kDisk}) EXPECT_GT(mixed.report.reused_tokens_by_tier[t], 0u) << "tier " << t;
  expect_same(mixed, ref, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, CacheExactnessVariant, ::testing::ValuesIn(exactness_variant_names()));

// Write-back: the prompt served once (its recompute reference in `ref`) and
// the resulting stores drained; nothing has been evicted yet.
RigOptions write_back_options() {
  RigOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  return o;
}
void serve_once(CacheRig& rig, std::span<const TokenId> prompt, int steps, Outcome& ref) {
  ref = rig.reference(prompt, steps);
  rig.cached(prompt, steps);
  ASSERT_TRUE(rig.cache->drain().ok());
}

// Write-back: nothing goes down at commit; device eviction demotes to host.
TEST(CacheExactness, WriteBackDemotesOnEviction) {
  CacheRig rig(write_back_options());
  auto prompt = CacheRig::random_tokens(300, 8);
  Outcome ref;
  ASSERT_NO_FATAL_FAILURE(serve_once(rig, prompt, 16, ref));
  EXPECT_EQ(rig.cache->stats().index.host_pages, 0u);
  EXPECT_EQ(rig.cache->stats().disk.entries, 0u);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  EXPECT_GT(rig.cache->stats().demoted_pages, 0u);
  Outcome hit = rig.cached(prompt, 16);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost], 288u);
  expect_same(hit, ref, 1e-5);
}

// Write-back with a shared prefix: once the branches below it are demoted,
// the device-only prefix must be demotable too, or a request for an
// unrelated prompt finds the pool full of it while the host has room
// (it was refused as Busy before: replay found it, issue 23).
TEST(CacheExactness, WriteBackDemotesASharedPrefixAfterItsBranches) {
  RigOptions o = write_back_options();
  o.device_pages = 64;  // the prefix and both branches fit; with the unrelated prompt they do not
  o.disk = false;
  CacheRig rig(o);
  auto prefix = CacheRig::random_tokens(480, 30);  // 30 pages
  std::vector<std::vector<TokenId>> prompts;
  for (uint32_t branch = 0; branch < 2; ++branch) {
    prompts.push_back(prefix);
    auto tail = CacheRig::random_tokens(150, 31 + branch);
    prompts.back().insert(prompts.back().end(), tail.begin(), tail.end());
  }
  Outcome ref = rig.reference(prompts[0], 4);
  for (const auto& p : prompts) rig.cached(p, 4);
  Outcome other = rig.cached(CacheRig::random_tokens(600, 33), 4);  // needs 38 pages: the prefix must move down
  EXPECT_EQ(other.tokens.size(), 4u);
  EXPECT_GT(rig.cache->stats().demoted_pages, 18u);  // both branches, then pages of the prefix itself
  Outcome hit = rig.cached(prompts[0], 4);
  EXPECT_GT(hit.report.reused_tokens_by_tier[kHost], 144u);
  EXPECT_EQ(hit.report.reused_tokens(), 624u);  // every whole page of the prompt, from device and host
  expect_same(hit, ref, 1e-5);
  ASSERT_TRUE(rig.cache->flush().ok());
  EXPECT_EQ(rig.cache->stats().index.pages, 0u);  // flush leaves nothing behind, inner pages included
}

// Write-back all the way down: device eviction demotes to host, host
// eviction spills whole chunks to disk, and the prompt is then served from
// disk with the recompute's output. Nothing reaches the disk before that.
TEST(CacheExactness, WriteBackSpillsHostEvictionsToDisk) {
  CacheRig rig(write_back_options());
  auto prompt = CacheRig::random_tokens(300, 10);
  Outcome ref;
  ASSERT_NO_FATAL_FAILURE(serve_once(rig, prompt, 16, ref));
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().disk.entries, 0u);
  EXPECT_EQ(rig.cache->stats().index.host_pages, 19u);  // 300 prompt + 16 generated tokens: 19 whole pages, all demoted
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, UINT32_MAX).ok());
  ASSERT_TRUE(rig.cache->drain().ok());
  const KVCacheStats st = rig.cache->stats();
  EXPECT_EQ(st.spilled_chunks, 4u);  // 19 pages = 4 whole chunks of 4; the 3-page tail is dropped
  EXPECT_EQ(st.disk.entries, 4u);
  EXPECT_EQ(st.index.pages, 0u);
  EXPECT_EQ(st.host_free_slots, st.host_slots);  // every slot read by the spill came back
  Outcome hit = rig.cached(prompt, 16);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kDisk], 256u);
  expect_same(hit, ref, 1e-5);
}

// A partial host eviction spills only the chunks whose last page left; the
// rest stays cached on the host, and the prompt is served from both tiers.
TEST(CacheExactness, WriteBackPartialSpillServesHostAndDisk) {
  CacheRig rig(write_back_options());
  auto prompt = CacheRig::random_tokens(16 * 16 + 1, 11);  // 16 pages = 4 chunks
  Outcome ref;
  ASSERT_NO_FATAL_FAILURE(serve_once(rig, prompt, 8, ref));
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 6).ok());  // pages 15..10: chunk 3 whole, chunk 2 half
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().spilled_chunks, 2u);
  Outcome hit = rig.cached(prompt, 8);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kHost] + hit.report.reused_tokens_by_tier[kDisk], 256u);
  EXPECT_GT(hit.report.reused_tokens_by_tier[kDisk], 0u);
  expect_same(hit, ref, 1e-5);
}

// Selective: a chunk goes to disk only once its prefix has been hit enough times.
TEST(CacheExactness, SelectiveWritesHotChunksOnly) {
  RigOptions o;
  o.write_policy = WritePolicy::kSelective;
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 9);
  rig.cached(prompt, 4);
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().disk.entries, 0u);  // a one-off prompt stays off the disk
  rig.cached(prompt, 4);
  rig.cached(prompt, 4);
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_GT(rig.cache->stats().disk.entries, 0u);
}

// After a failed load, what users read (the lease's report, the cache's
// counters, the Prometheus series) counts the prompt's cached tokens as
// recomputed: nothing as reused beyond the pages shared in place, no bytes as loaded.
void expect_counted_as_recomputed(KVCache& cache, const Outcome& hit, const KVCacheStats& before) {
  const KVCacheStats after = cache.stats();
  EXPECT_GT(hit.report.recomputed_cached_tokens, 0u);
  for (int t = 0; t < kNumTiers; ++t) {
    if (t != int(kDevice)) {
      EXPECT_EQ(hit.report.reused_tokens_by_tier[t], 0u) << tier_name(TierKind(t));
    }
    EXPECT_EQ(hit.report.bytes_loaded_by_tier[t], 0u) << tier_name(TierKind(t));
    EXPECT_EQ(after.reused_tokens_by_tier[t] - before.reused_tokens_by_tier[t], hit.report.reused_tokens_by_tier[t])
        << tier_name(TierKind(t));
    EXPECT_EQ(after.bytes_loaded_by_tier[t], before.bytes_loaded_by_tier[t]) << tier_name(TierKind(t));
  }
  EXPECT_EQ(after.recomputed_cached_tokens - before.recomputed_cached_tokens, hit.report.recomputed_cached_tokens);
  RuntimeStats stats;  // not RuntimeStats{after}: GCC 12 misreports aggregate bases under -Wmaybe-uninitialized
  stats.cache = after;
  const std::string metrics = server::runtime_metrics_text(stats);
  const std::string disk_line = "kvtier_bytes_loaded_total{tier=\"disk\"} " + std::to_string(before.bytes_loaded_by_tier[kDisk]) + "\n";
  EXPECT_NE(metrics.find(disk_line), std::string::npos) << metrics;
}

// Corrupt KV on disk is detected, counted and recomputed: the output is unchanged.
TEST(CacheExactness, CorruptDiskEntryIsRecomputed) {
  RigOptions o;
  o.region_bytes = 64 << 10;  // one chunk per region: every region but the last is on disk, not in memory
  CacheRig rig(o);
  auto prompt = CacheRig::random_tokens(300, 7);
  Outcome ref = rig.reference(prompt, 8);
  rig.cached(prompt, 8);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  corrupt_region_files(rig.dir_);
  const KVCacheStats before = rig.cache->stats();
  Outcome hit = rig.cached(prompt, 8);
  expect_same(hit, ref, 1e-5);
  auto st = rig.cache->stats();
  EXPECT_GE(st.load_failures + st.disk.checksum_failures, 1u);
  expect_counted_as_recomputed(*rig.cache, hit, before);
}

// A disk read that fails (EIO) is recomputed and counted like a corrupt one.
// A rig whose disk tier writes 64 KiB regions through `faults`.
RigOptions small_regions_over(FaultFileSystem& faults) {
  RigOptions o;
  o.region_bytes = 64 << 10;
  o.disk_fs = &faults;
  return o;
}

TEST(CacheExactness, FailedDiskReadIsRecomputedNotCountedAsReused) {
  FaultFileSystem faults(FileSystem::posix());
  CacheRig rig(small_regions_over(faults));
  auto prompt = CacheRig::random_tokens(300, 8);
  Outcome ref = rig.reference(prompt, 8);
  rig.cached(prompt, 8);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
  faults.add_rule(FaultRule{.kind = FaultKind::kError, .op = FaultOp::kRead, .nth = 1, .times = 0});
  const KVCacheStats before = rig.cache->stats();
  Outcome hit = rig.cached(prompt, 8);
  expect_same(hit, ref, 1e-5);
  EXPECT_GT(faults.fired(), 0u);
  EXPECT_EQ(rig.cache->stats().load_failures, before.load_failures + 1);
  expect_counted_as_recomputed(*rig.cache, hit, before);
}

// A flush drops the device and host pages even when the disk tier has failed (a full disk): it
// returns the disk's error after doing so. It returned first, so POST /v1/cache/flush answered 503
// forever and dropped nothing, not even what an operator flushed to purge.
TEST(CacheExactness, AFlushDropsTheCachedPagesWhenTheDiskHasFailed) {
  FaultFileSystem faults(FileSystem::posix());
  CacheRig rig(small_regions_over(faults));
  faults.add_rule(FaultRule{.kind = FaultKind::kNoSpace, .op = FaultOp::kWrite, .nth = 1, .times = 0});
  rig.cached(CacheRig::random_tokens(300, 9), 0);
  ASSERT_GT(rig.cache->stats().index.device_pages, 0u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(rig.cache->flush().ok());  // the disk's failure, then its degraded state
    EXPECT_EQ(rig.cache->stats().index.device_pages, 0u);
    EXPECT_EQ(rig.cache->stats().index.host_pages, 0u);
  }
}

// A disk tier degraded by a failed write (a full disk) still serves what it wrote before: a
// degraded disk was skipped at lookup, so every verified entry on it went unused until a restart.
TEST(CacheExactness, ADiskDegradedByAFullDiskStillServesWhatItHolds) {
  FaultFileSystem faults(FileSystem::posix());
  CacheRig rig(small_regions_over(faults));
  auto kept = CacheRig::random_tokens(300, 31);
  const Outcome ref = rig.reference(kept, 4);
  rig.cached(kept, 4);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());  // on disk; device and host dropped
  faults.add_rule(FaultRule{.kind = FaultKind::kNoSpace, .op = FaultOp::kWrite, .nth = 1, .times = 0});
  for (uint32_t i = 0; i < 40 && !rig.cache->stats().disk_degraded; ++i) {  // new prompts' writes meet ENOSPC
    rig.cached(CacheRig::random_tokens(300, 100 + i), 0);
    (void)rig.cache->drain();
  }
  ASSERT_TRUE(rig.cache->stats().disk_degraded);
  (void)rig.cache->flush();
  const Outcome hit = rig.cached(kept, 4);
  expect_same(hit, ref, 1e-5);
  EXPECT_GE(hit.report.reused_tokens_by_tier[2], 256u);
}

// A prompt that shares its first pages with a cached prompt whose pages fill
// the device: its lookup matches part of that prompt's index node, and the
// rest of the node must stay evictable for it. (Locking the whole node made
// apply() answer Busy forever with nothing running: `kvtier serve` kept such
// requests waiting for room only their own lock withheld.)
TEST(CacheExactness, ARequestEvictsThePagesPastItsMatchInTheNodeItShares) {
  RigOptions o;
  o.device_pages = 16;
  o.host_pages = 0;
  o.disk = false;
  CacheRig rig(o);
  auto a = CacheRig::random_tokens(16 * 13, 400);
  auto b = a;
  auto own = CacheRig::random_tokens(16 * 10 + 5, 500);
  b.resize(16 * 2);  // two pages shared, then its own
  b.insert(b.end(), own.begin(), own.end());
  const Outcome ref = rig.reference(b, 4);  // before anything is cached
  (void)rig.cached(a, 1);                   // its 13 pages: one index node
  ASSERT_GE(rig.cache->stats().index.device_pages, 12u);
  const Outcome hit = rig.cached(b, 4);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[0], 32u);
  EXPECT_EQ(hit.tokens, ref.tokens);
}

// Many sequences, interleaved, sharing prefixes, under eviction pressure (pool
// and host far smaller than the working set): every response equals its
// recompute reference.
TEST(CacheExactness, InterleavedUnderEvictionPressure) {
  RigOptions o;
  o.device_pages = 72;
  o.host_pages = 40;
  CacheRig rig(o);
  auto system = CacheRig::random_tokens(16 * 5 + 3, 100);
  std::mt19937 rng(9);
  std::vector<std::vector<TokenId>> prompts;
  for (int c = 0; c < 6; ++c) {
    auto p = system;
    auto conv = CacheRig::random_tokens(40 + rng() % 200, 200 + c);
    p.insert(p.end(), conv.begin(), conv.end());
    prompts.push_back(p);
    for (int turn = 0; turn < 2; ++turn) {
      auto more = CacheRig::random_tokens(20 + rng() % 60, 300 + c * 10 + turn);
      p.insert(p.end(), more.begin(), more.end());
      prompts.push_back(p);
    }
  }
  std::vector<Outcome> refs;
  for (auto& p : prompts) refs.push_back(rig.reference(p, 6));

  // Random order, up to three sequences in flight, decoded in an interleaved way.
  struct Live {
    size_t which;
    CacheLease lease;
    engine::SequenceKV kv;
    std::vector<TokenId> all, gen;
    Outcome out;
  };
  std::vector<size_t> order;
  for (int rep = 0; rep < 3; ++rep)
    for (size_t i = 0; i < prompts.size(); ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::unique_ptr<Live>> live;
  size_t next = 0, checked = 0;
  while (next < order.size() || !live.empty()) {
    if (next < order.size() && ((live.size() < 3 && rng() % 2 == 0) || live.empty())) {
      auto l = std::make_unique<Live>();
      l->which = order[next++];
      const auto& prompt = prompts[l->which];
      auto look = rig.cache->lookup(rig.ns, prompt);
      ASSERT_TRUE(look.ok());
      Plan plan = rig.cache->plan(*look);
      auto lease = rig.cache->apply(std::move(*look), plan);
      ASSERT_TRUE(lease.ok()) << lease.status().to_string();
      l->lease = std::move(*lease);
      auto lg = cached_prefill(*rig.engine, *rig.cache, l->lease, l->kv, prompt);
      ASSERT_TRUE(lg.ok()) << lg.status().to_string();
      l->out.logits.assign(lg->last().begin(), lg->last().end());
      l->all = prompt;
      l->gen.push_back(engine::argmax(lg->last()));
      live.push_back(std::move(l));
      continue;
    }
    // One batched decode step over every live sequence.
    std::vector<engine::SequenceKV*> kvs;
    std::vector<TokenId> feed;
    for (auto& l : live) {
      ASSERT_TRUE(rig.cache->grow(l->lease, l->kv.num_tokens + 1).ok());
      l->kv.pages = l->lease.pages();
      kvs.push_back(&l->kv);
      feed.push_back(l->gen.back());
    }
    auto d = rig.engine->decode(kvs, feed);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    for (size_t i = 0; i < live.size(); ++i) {
      live[i]->all.push_back(feed[i]);
      live[i]->gen.push_back(engine::argmax(d->row(static_cast<uint32_t>(i))));
    }
    for (size_t i = 0; i < live.size();) {
      Live& l = *live[i];
      if (l.gen.size() < 6) {
        ++i;
        continue;
      }
      l.out.tokens = l.gen;
      expect_same(l.out, refs[l.which], 1e-5);
      ++checked;
      ASSERT_TRUE(rig.cache->commit(l.lease, std::span(l.all).first(l.kv.num_tokens)).ok());
      live.erase(live.begin() + i);
    }
  }
  EXPECT_EQ(checked, order.size());
  auto st = rig.cache->stats();
  EXPECT_GT(st.evicted_pages_by_tier[0], 0u);  // the pressure was real
  EXPECT_GT(st.reused_tokens_by_tier[0] + st.reused_tokens_by_tier[1] + st.reused_tokens_by_tier[2], 0u);
}

}  // namespace
}  // namespace kvtier::testing
