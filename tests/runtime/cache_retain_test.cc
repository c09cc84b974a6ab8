// Retention hints (KVCache::retain): a retained prefix survives host
// pressure that evicts it without the hint, until its time is up; the
// retained share is capped and the oldest hint yields past it.
#include <gtest/gtest.h>

#include "cache_rig.h"

namespace kvtier::testing {
namespace {

using std::chrono::seconds;

// Device 12 pages, host 8 (retention cap 4), no disk: each 65-token prompt
// commits 4 whole pages (plus a decoded one), so three more prompts push
// every earlier page out of both tiers.
RigOptions small_tiers(const Clock* clock) {
  RigOptions o;
  o.device_pages = 12;
  o.host_pages = 8;
  o.disk = false;
  o.clock = clock;
  return o;
}

uint32_t cached_pages(CacheRig& rig, std::span<const TokenId> prompt) {
  auto look = rig.cache->lookup(rig.ns, prompt);
  EXPECT_TRUE(look.ok());
  return look.ok() ? look->cached_pages() : 0;
}

void pressure(CacheRig& rig, uint32_t seed) {
  for (uint32_t i = 0; i < 3; ++i) rig.cached(CacheRig::random_tokens(65, seed + i), 2);
}

TEST(CacheRetain, RetainedPrefixSurvivesPressureUntilItExpires) {
  ManualClock clock;
  for (bool hint : {false, true}) {
    CacheRig rig(small_tiers(&clock));
    const auto a = CacheRig::random_tokens(65, 1);
    rig.cached(a, 2);
    if (hint) {
      auto r = rig.cache->retain(rig.ns, a, seconds(60));
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(*r, 64u);
    }
    pressure(rig, 100);
    EXPECT_EQ(cached_pages(rig, a), hint ? 4u : 0u) << "hint " << hint;
    ASSERT_TRUE(rig.cache->index().check_invariants().ok());
    if (!hint) continue;
    EXPECT_EQ(rig.cache->stats().index.retained_host_pages, 4u);
    EXPECT_EQ(rig.cache->stats().retain_active, 1u);
    // Its time runs out: the next pressure takes it like any other prefix.
    clock.advance(seconds(61));
    pressure(rig, 200);
    EXPECT_EQ(cached_pages(rig, a), 0u);
    const KVCacheStats s = rig.cache->stats();
    EXPECT_EQ(s.retain_expiries, 1u);
    EXPECT_EQ(s.retain_active, 0u);
    EXPECT_EQ(s.index.retained_host_pages, 0u);
  }
}

TEST(CacheRetain, OldestHintYieldsPastTheCap) {
  ManualClock clock;
  CacheRig rig(small_tiers(&clock));
  const auto a = CacheRig::random_tokens(65, 1), b = CacheRig::random_tokens(65, 2);
  rig.cached(a, 2);
  ASSERT_EQ(*rig.cache->retain(rig.ns, a, seconds(60)), 64u);
  rig.cached(b, 2);
  ASSERT_EQ(*rig.cache->retain(rig.ns, b, seconds(60)), 64u);  // 8 retained pages > the cap of 4: a yields
  pressure(rig, 100);
  EXPECT_EQ(cached_pages(rig, a), 0u);
  EXPECT_EQ(cached_pages(rig, b), 4u);
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.retain_yields, 1u);
  EXPECT_EQ(s.retain_hints, 2u);
  // A hint on what is not cached retains nothing; without a host share, nothing either.
  EXPECT_EQ(*rig.cache->retain(rig.ns, CacheRig::random_tokens(65, 9), seconds(60)), 0u);
  RigOptions none = small_tiers(&clock);
  none.max_retained_share = 0;
  CacheRig off(none);
  off.cached(a, 2);
  EXPECT_EQ(*off.cache->retain(off.ns, a, seconds(60)), 0u);
}

// Pages of the prompt cached on the device or the host (the index), not below.
uint32_t local_pages(CacheRig& rig, std::span<const TokenId> prompt) {
  auto look = rig.cache->lookup(rig.ns, prompt);
  EXPECT_TRUE(look.ok());
  uint32_t n = 0;
  if (look.ok())
    for (const CachedRun& r : look->runs) n += r.tier == TierKind::kDevice || r.tier == TierKind::kHost ? r.pages : 0;
  return n;
}

// Device 12 pages, host 8 and a disk; `prompt` computed, committed, then on the disk only.
RigOptions with_disk(const Clock* clock) {
  RigOptions o = small_tiers(clock);
  o.disk = true;
  return o;
}
void on_disk_only(CacheRig& rig, std::span<const TokenId> prompt) {
  rig.cached(prompt, 2);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());
}

// A prefetch with a hold (a read-ahead timed by the client's deadline) keeps
// what it read onto the host through pressure that evicts it without one,
// until the hold ends: the traffic between the read-ahead and the request
// cannot undo it.
TEST(CacheRetain, APrefetchHoldKeepsWhatItReadAheadOnTheHost) {
  ManualClock clock;
  for (bool hold : {false, true}) {
    CacheRig rig(with_disk(&clock));
    const auto a = CacheRig::random_tokens(65, 1);
    on_disk_only(rig, a);
    ASSERT_EQ(local_pages(rig, a), 0u);
    auto started = rig.cache->prefetch(rig.ns, a, hold ? seconds(60) : seconds(0));
    ASSERT_TRUE(started.ok()) << started.status().to_string();
    EXPECT_EQ(started->loading_pages, 4u);
    ASSERT_TRUE(rig.cache->drain().ok());
    ASSERT_EQ(local_pages(rig, a), 4u);
    pressure(rig, 100);
    EXPECT_EQ(local_pages(rig, a), hold ? 4u : 0u) << "hold " << hold;
    EXPECT_EQ(rig.cache->stats().index.retained_host_pages, hold ? 4u : 0u);
    ASSERT_TRUE(rig.cache->index().check_invariants().ok());
    if (!hold) continue;
    clock.advance(seconds(61));
    pressure(rig, 200);
    EXPECT_EQ(local_pages(rig, a), 0u);
    EXPECT_EQ(rig.cache->stats().retain_expiries, 1u);
  }
}

// A held read-ahead whose landed prefix would be over the retention cap by itself holds nothing
// and makes no other hint yield: it made every other hint yield up front, then retain_on_host
// refused its own hold once it landed (another tenant's hour-long hold was gone for nothing).
TEST(CacheRetain, AHoldOverTheCapByItselfMakesNoOtherHintYield) {
  ManualClock clock;
  CacheRig rig(with_disk(&clock));  // host 8 pages: a cap of 4 retained
  const auto a = CacheRig::random_tokens(129, 1), b = CacheRig::random_tokens(33, 2);
  on_disk_only(rig, a);
  rig.cached(b, 2);
  ASSERT_EQ(*rig.cache->retain(rig.ns, b, seconds(3600)), 32u);
  rig.cached(std::span(a).first(65), 2);  // a's first chunk cached again, its second on disk only
  auto started = rig.cache->prefetch(rig.ns, a, seconds(60));
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  EXPECT_EQ(started->loading_pages, 4u);  // it still reads ahead
  ASSERT_TRUE(rig.cache->drain().ok());
  (void)cached_pages(rig, CacheRig::random_tokens(17, 3));  // any call lands it
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.retain_yields, 0u);
  EXPECT_EQ(s.retain_active, 1u);
  EXPECT_EQ(s.index.retained_host_pages, 2u);  // b's
}

// A prefetch's hold covers `hold_tokens` (a message's cache_control: through that message), not
// the whole prompt it reads ahead (a mark on the first of two messages held all of the prompt).
TEST(CacheRetain, APrefetchHoldsOnlyTheMarkedPrefix) {
  ManualClock clock;
  CacheRig rig(with_disk(&clock));
  const auto a = CacheRig::random_tokens(65, 1);
  on_disk_only(rig, a);
  auto started = rig.cache->prefetch(rig.ns, a, seconds(60), KVCache::HoldEnd::kTime, /*hold_tokens=*/33);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  EXPECT_EQ(started->loading_pages, 4u);
  ASSERT_TRUE(rig.cache->drain().ok());
  (void)cached_pages(rig, CacheRig::random_tokens(17, 3));
  EXPECT_EQ(rig.cache->stats().index.retained_host_pages, 2u);
  // Other hints yield only for the pages the marked prefix holds: one page of a cap of 4 beside
  // their 2 makes none yield (sized by the whole read-ahead, the 4 pages made them all yield).
  ManualClock clock2;
  CacheRig two(with_disk(&clock2));
  const auto b = CacheRig::random_tokens(33, 2);
  on_disk_only(two, a);
  two.cached(b, 2);
  ASSERT_EQ(*two.cache->retain(two.ns, b, seconds(3600)), 32u);
  ASSERT_TRUE(two.cache->prefetch(two.ns, a, seconds(60), KVCache::HoldEnd::kTime, /*hold_tokens=*/17).ok());
  ASSERT_TRUE(two.cache->drain().ok());
  (void)cached_pages(two, CacheRig::random_tokens(17, 3));
  EXPECT_EQ(two.cache->stats().retain_yields, 0u);
  EXPECT_EQ(two.cache->stats().index.retained_host_pages, 3u);
}

// A read-ahead's deadline hold (HoldEnd::kFirstUse) ends at the first lease
// of a prompt that extends the held prefix: the request it was for has started.
// Kept to its time, it counted against the cap that the next session's
// read-ahead needed (the agent bench: most deadline holds yielded). Another
// prompt's lookup leaves it in force, and so does the request's own attempt
// refused for want of pages (Busy): it ended the hold at its lookup, and the
// prefix could leave the host before the request started.
TEST(CacheRetain, ADeadlineHoldEndsAtTheRequestItWasFor) {
  ManualClock clock;
  CacheRig rig(with_disk(&clock));
  const auto a = CacheRig::random_tokens(65, 1);
  on_disk_only(rig, a);
  auto started = rig.cache->prefetch(rig.ns, a, seconds(60), KVCache::HoldEnd::kFirstUse);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_EQ(rig.cache->stats().index.retained_host_pages, 4u);
  EXPECT_EQ(cached_pages(rig, CacheRig::random_tokens(65, 7)), 0u);  // another prompt: still held
  EXPECT_EQ(rig.cache->stats().index.retained_host_pages, 4u);
  auto next_turn = a;  // the session's next request: the prefix and more
  for (TokenId t : CacheRig::random_tokens(40, 8)) next_turn.push_back(t);
  EXPECT_EQ(cached_pages(rig, next_turn), 4u);
  EXPECT_EQ(rig.cache->stats().index.retained_host_pages, 4u);  // looked up: not started yet
  {
    auto hog = rig.cache->fresh(rig.ns, 12 * 16);  // every device page
    ASSERT_TRUE(hog.ok()) << hog.status().to_string();
    auto refused = rig.cache->acquire(rig.ns, next_turn);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kBusy) << refused.status().to_string();
    EXPECT_EQ(rig.cache->stats().index.retained_host_pages, 4u);
  }
  auto started_turn = rig.cache->acquire(rig.ns, next_turn);
  ASSERT_TRUE(started_turn.ok()) << started_turn.status().to_string();
  EXPECT_EQ(started_turn->plan().cached_pages, 4u);
  *started_turn = CacheLease();  // released
  KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.index.retained_host_pages, 0u);
  EXPECT_EQ(s.retain_used, 1u);
  EXPECT_EQ(s.retain_active, 0u);
  EXPECT_EQ(s.retain_expiries + s.retain_yields, 0u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
}

// A retained page never leaves the host, so a page on the device alone would
// leave neither tier if retained as it is (the device could not evict it until
// the hint ended: a prompt near the pool's size then failed to grow, "device
// KV pool exhausted", in the agent bench with holds). The hint gives such
// pages a host copy first: a hot shared prefix, served from the device, loses
// its host copies, and a hint that stopped at it held nothing after it.
TEST(CacheRetain, AHintGivesDeviceOnlyPagesAHostCopyAndLeavesTheDeviceFree) {
  ManualClock clock;
  CacheRig rig(small_tiers(&clock));
  const auto a = CacheRig::random_tokens(65, 1);
  rig.cached(a, 2);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 1000).ok());  // on the device alone now
  ASSERT_EQ(rig.cache->stats().index.host_pages, 0u);
  ASSERT_EQ(rig.cache->stats().index.device_pages, 4u);
  EXPECT_EQ(*rig.cache->retain(rig.ns, a, seconds(60)), 64u);
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().index.retained_host_pages, 4u);
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 1000).ok());
  EXPECT_EQ(rig.cache->stats().index.device_pages, 0u);
  pressure(rig, 100);
  EXPECT_EQ(local_pages(rig, a), 4u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  expect_same(rig.cached(a, 2), rig.reference(a, 2), 1e-5);  // the host copies hold the device's bytes
}

// A prefix longer than the retained share gets no host copies: its hint would
// yield at once, and the copies would only push other pages off the host.
TEST(CacheRetain, AHintOverTheCapCopiesNothingToTheHost) {
  ManualClock clock;
  CacheRig rig(small_tiers(&clock));  // cap 4 pages
  const auto a = CacheRig::random_tokens(97, 1);  // 6 whole pages
  rig.cached(a, 2);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 1000).ok());
  ASSERT_EQ(rig.cache->stats().index.host_pages, 0u);
  EXPECT_EQ(*rig.cache->retain(rig.ns, a, seconds(60)), 0u);
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(rig.cache->stats().index.host_pages, 0u);
  EXPECT_EQ(rig.cache->stats().retain_active, 0u);
}

// A hint over the cap alone yields alone: it made every other hint, any tenant's, yield first (it
// was retained, then the oldest hints went until the total fit), and then retained nothing itself.
TEST(CacheRetain, AHintOverTheCapLeavesTheOtherHintsInPlace) {
  ManualClock clock;
  RigOptions o;
  o.device_pages = 128;
  o.host_pages = 64;  // cap 32 pages
  o.disk = false;
  o.clock = &clock;
  CacheRig rig(o);
  rig.ns.tenant = "globex";
  const auto a = CacheRig::random_tokens(65, 1), b = CacheRig::random_tokens(65, 2);
  rig.cached(a, 2);
  rig.cached(b, 2);
  EXPECT_GT(*rig.cache->retain(rig.ns, a, seconds(3600)), 0u);
  EXPECT_GT(*rig.cache->retain(rig.ns, b, seconds(3600)), 0u);
  rig.ns.tenant = "acme";
  const auto big = CacheRig::random_tokens(40 * 16 + 1, 3);  // 40 whole pages
  rig.cached(big, 1);
  EXPECT_EQ(*rig.cache->retain(rig.ns, big, seconds(3600)), 0u);
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.retain_active, 2u) << "globex's hints yielded to one that retained nothing";
  EXPECT_EQ(s.retain_yields, 0u);
}

// Past the cap, the tenant whose hints hold the most pages yields first: another tenant's one hint
// stays however many hints the first adds (the oldest hint of all went first, so one tenant could
// empty another's hour-long hint with hints of its own, each inside its own quota).
TEST(CacheRetain, ATenantsHintsPushOutItsOwnNotAnothers) {
  ManualClock clock;
  CacheRig rig(small_tiers(&clock));  // cap 4 pages
  rig.ns.tenant = "globex";
  const auto g = CacheRig::random_tokens(33, 1);  // 2 pages
  rig.cached(g, 2);
  ASSERT_EQ(*rig.cache->retain(rig.ns, g, seconds(3600)), 32u);
  rig.ns.tenant = "acme";
  for (uint64_t seed = 10; seed < 14; ++seed) {  // 2 pages each: acme's own older hints yield
    const auto a = CacheRig::random_tokens(33, seed);
    rig.cached(a, 2);
    ASSERT_EQ(*rig.cache->retain(rig.ns, a, seconds(3600)), 32u);
  }
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.retain_active, 2u);
  EXPECT_EQ(s.retain_yields, 3u);
  rig.ns.tenant = "globex";
  pressure(rig, 100);
  EXPECT_EQ(cached_pages(rig, g), 2u) << "globex's hint yielded to acme's";
}

// A held read-ahead makes room for what it lifts: with the host full of held
// pages, the oldest hint yields before the read-ahead allocates, instead of
// the read-ahead finding no slot (it lifted nothing before).
TEST(CacheRetain, AHeldReadAheadMakesTheOldestHintYieldForWhatItLifts) {
  ManualClock clock;
  RigOptions o = with_disk(&clock);
  o.max_retained_share = 1.0;  // hints may hold the whole host: 8 pages
  CacheRig rig(o);
  const auto a = CacheRig::random_tokens(65, 1), b = CacheRig::random_tokens(65, 2),
             c = CacheRig::random_tokens(65, 3);
  on_disk_only(rig, c);
  rig.cached(a, 2);
  rig.cached(b, 2);
  ASSERT_EQ(*rig.cache->retain(rig.ns, a, seconds(60)), 64u);
  ASSERT_EQ(*rig.cache->retain(rig.ns, b, seconds(60)), 64u);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_EQ(rig.cache->stats().index.retained_host_pages, 8u);  // the host is all held
  auto started = rig.cache->prefetch(rig.ns, c, seconds(60));
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  EXPECT_EQ(started->loading_pages, 4u);
  ASSERT_TRUE(rig.cache->drain().ok());
  EXPECT_EQ(local_pages(rig, c), 4u);
  const KVCacheStats s = rig.cache->stats();
  EXPECT_EQ(s.retain_yields, 1u);  // a, the oldest
  EXPECT_EQ(s.index.retained_host_pages, 8u);  // b and c
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  expect_same(rig.cached(c, 2), rig.reference(c, 2), 1e-5);
}

// Two held read-aheads behind a shared prefix land together, after the
// prefix lost its host copies (its holds ended while the reads ran) and with
// the host full: the first to be indexed gives the prefix a host copy again,
// which makes room on the host, which polls the cache while that poll is
// finishing read-aheads. The inner poll used to erase from under the outer
// one, which then waited for ever on a transfer it had not finished (a
// server stalled in the agent bench). The remote tier holds the reads back
// until the stage is set.
TEST(CacheRetain, HeldReadAheadsThatLandTogetherGiveTheirPrefixAHostCopy) {
  ManualClock clock;
  const KVGeometry g = engine::model_preset("tiny")->kv_geometry(DType::kF32, 16);
  auto remote = std::make_shared<HeldUpperLayersTier>(ChunkGeometry{g, 4}, std::chrono::minutes(10));
  RigOptions o = small_tiers(&clock);
  o.disk = false;
  o.remote = remote;
  o.device_pages = 24;
  o.host_pages = 16;
  o.max_retained_share = 1.0;
  CacheRig rig(o);
  const std::unique_ptr<HeldUpperLayersTier, void (*)(HeldUpperLayersTier*)> open_on_exit(
      remote.get(), [](HeldUpperLayersTier* t) { t->open(); });
  const auto s = CacheRig::random_tokens(64, 1);
  auto with = [&](uint32_t seed, size_t n) {
    std::vector<TokenId> t = s;
    const auto more = CacheRig::random_tokens(n, seed);
    t.insert(t.end(), more.begin(), more.end());
    return t;
  };
  const auto l1 = with(2, 65), l2 = with(3, 65), s1 = with(4, 1);
  const Outcome ref1 = rig.reference(l1, 2), ref2 = rig.reference(l2, 2);
  remote->open();
  rig.cached(l1, 2);
  rig.cached(l2, 2);
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());  // in the remote store only
  rig.cached(s1, 2);                     // the shared prefix on the device and the host
  ASSERT_TRUE(rig.cache->drain().ok());
  remote->close();
  for (const auto* l : {&l1, &l2}) {
    auto started = rig.cache->prefetch(rig.ns, *l, seconds(60));
    ASSERT_TRUE(started.ok()) << started.status().to_string();
    ASSERT_EQ(started->loading_pages, 4u);
  }
  clock.advance(seconds(61));                                  // the holds taken at the start end
  ASSERT_TRUE(rig.cache->evict(TierKind::kHost, 1000).ok());  // the prefix on the device alone
  pressure(rig, 100);                                           // the host full of other prompts
  ASSERT_EQ(rig.cache->stats().prefetched_pages, 0u);          // nothing landed yet
  remote->open();
  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
  EXPECT_EQ(local_pages(rig, l1), 8u);
  EXPECT_EQ(local_pages(rig, l2), 8u);
  EXPECT_GE(rig.cache->stats().index.retained_host_pages, 8u);
  expect_same(rig.cached(l1, 2), ref1, 1e-5);
  expect_same(rig.cached(l2, 2), ref2, 1e-5);
}

TEST(CacheRetain, FlushDropsRetainedPages) {
  ManualClock clock;
  CacheRig rig(small_tiers(&clock));
  const auto a = CacheRig::random_tokens(65, 1);
  rig.cached(a, 2);
  ASSERT_EQ(*rig.cache->retain(rig.ns, a, seconds(60)), 64u);
  ASSERT_TRUE(rig.cache->flush().ok());
  EXPECT_EQ(cached_pages(rig, a), 0u);
  EXPECT_EQ(rig.cache->stats().retain_active, 0u);
  ASSERT_TRUE(rig.cache->index().check_invariants().ok());
}

}  // namespace
}  // namespace kvtier::testing
