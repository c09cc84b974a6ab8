// Behaviour cases of the PrefixIndex (issue 2), re-expressed for our API.
#include "index/prefix_index.h"

#include <gtest/gtest.h>

#include <numeric>

#include "common/page_hash.h"

namespace kvtier {
namespace {

std::unique_ptr<PrefixIndex> make(uint32_t P, bool events = false,
                                  EvictionPolicyKind policy = EvictionPolicyKind::kLru) {
  PrefixIndex::Options o;
  o.page_tokens = P;
  o.record_events = events;
  o.policy = policy;
  auto r = PrefixIndex::create(o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

NsKey ns_of(const std::string& salt) {
  Namespace ns;
  ns.cache_salt = salt;
  return NsKey{namespace_seed(ns, HashAlgo::kXXH3_128)};
}

std::vector<PageLocation> dev_locs(size_t n, uint32_t base = 0) {
  std::vector<PageLocation> v(n);
  for (size_t i = 0; i < n; ++i) v[i].device = PageId(base + uint32_t(i));
  return v;
}

InsertResult put(PrefixIndex& ix, NsKey ns, const std::vector<TokenId>& toks, uint32_t base = 0) {
  auto r = ix.insert(ns, toks, dev_locs(toks.size() / ix.page_tokens(), base));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(ix.check_invariants().ok()) << ix.check_invariants().to_string();
  return r.ok() ? r.value() : InsertResult{};
}

uint32_t matched(PrefixIndex& ix, NsKey ns, const std::vector<TokenId>& toks) {
  MatchResult m;
  ix.match(ns, toks, m);
  return m.matched_pages;
}

std::vector<TokenId> iota_tokens(size_t n, TokenId start = 1) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A namespace leaves the index with its last page: a client that sends a new cache_salt with
// every request left a root behind each (their count and memory grew without end).
TEST(PrefixIndex, ANamespaceGoesWithItsLastPage) {
  auto ix = make(4);
  const auto toks = iota_tokens(8);
  uint64_t bytes_after_first = 0;
  for (int round = 0; round < 4; ++round) {
    put(*ix, ns_of("kept"), toks);
    for (int i = 0; i < 1000; ++i) put(*ix, ns_of("salt-" + std::to_string(round * 1000 + i)), toks, 100);
    EXPECT_EQ(ix->stats().namespaces, 1001u);
    EvictResult ev;
    ASSERT_TRUE(ix->evict(100000, TierKind::kDevice, ev).ok());
    ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
    EXPECT_EQ(ix->stats().namespaces, 0u);
    EXPECT_EQ(matched(*ix, ns_of("kept"), toks), 0u);
    put(*ix, ns_of("kept"), toks);
    EXPECT_EQ(ix->stats().namespaces, 1u);
    EXPECT_EQ(matched(*ix, ns_of("kept"), toks), 2u);
    // The freed nodes are reused: later rounds hold no more than the first.
    if (round == 0) bytes_after_first = ix->stats().metadata_bytes;
    else EXPECT_LE(ix->stats().metadata_bytes, bytes_after_first) << "round " << round;
  }
}

// Tenants: each tenant's pages are counted where residency is counted, and an
// eviction for one tenant takes only its pages, even when another's are colder.
TEST(PrefixIndex, TenantPagesAndEvictionForOneTenant) {
  auto ix = make(4);
  Namespace acme, globex;
  acme.tenant = "acme";
  globex.tenant = "globex";
  const NsKey g = ix->namespace_key(globex), a = ix->namespace_key(acme);
  EXPECT_EQ(ix->namespace_key(Namespace{}).tenant, 0u);
  ASSERT_NE(a.tenant, g.tenant);
  EXPECT_EQ(ix->tenant_name(a.tenant), "acme");
  put(*ix, g, iota_tokens(16), 100);  // globex first: the coldest pages are its
  put(*ix, a, iota_tokens(16), 0);    // the same tokens, another tenant: a tree of its own
  EXPECT_EQ(ix->tenant_pages(a.tenant, TierKind::kDevice), 4u);
  EXPECT_EQ(ix->tenant_pages(g.tenant, TierKind::kDevice), 4u);
  EvictResult out;
  ASSERT_TRUE(ix->evict(3, TierKind::kDevice, out, {}, {}, a.tenant).ok());
  EXPECT_EQ(out.freed, 3u);
  for (const EvictedPage& e : out.pages) EXPECT_LT(e.location.device.value(), 100u) << "globex lost a page for acme";
  EXPECT_EQ(ix->tenant_pages(a.tenant, TierKind::kDevice), 1u);
  EXPECT_EQ(ix->tenant_pages(g.tenant, TierKind::kDevice), 4u);
  EXPECT_EQ(matched(*ix, g, iota_tokens(17)), 4u);
  ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
  ix->reset();
  EXPECT_EQ(ix->tenant_pages(g.tenant, TierKind::kDevice), 0u);
}

TEST(PrefixIndex, OptionsValidate) {
  PrefixIndex::Options o;
  o.page_tokens = 0;
  EXPECT_FALSE(PrefixIndex::create(o).ok());
}

TEST(PrefixIndex, MatchRoundsDownToWholePages) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(12));
  auto q = iota_tokens(12);
  q[6] = 999;  // divergence at token 6 → one whole page (4 tokens)
  EXPECT_EQ(matched(*ix, ns, q) * 4, 4u);
  q = iota_tokens(12);
  q[2] = 999;  // inside the first page → 0
  EXPECT_EQ(matched(*ix, ns, q), 0u);
  EXPECT_EQ(matched(*ix, ns, iota_tokens(3)), 0u);  // shorter than a page
  EXPECT_EQ(matched(*ix, ns, iota_tokens(11)), 2u);  // trailing partial page never matched
  // A trailing partial page is never cached either.
  auto ix2 = make(4);
  auto r = ix2->insert(ns, iota_tokens(7), dev_locs(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(ix2->stats().pages, 1u);
}

TEST(PrefixIndex, LongKeysDivergeAtManyPoints) {
  for (uint32_t P : {1u, 4u, 64u}) {
    auto ix = make(P);
    const NsKey ns = ns_of("");
    const auto base = iota_tokens(2000);
    put(*ix, ns, base);
    for (size_t d : {1, 2, 63, 64, 65, 127, 128, 511, 512, 513, 1234, 1999}) {
      auto q = base;
      q[d] = -7;
      EXPECT_EQ(matched(*ix, ns, q), d / P) << "P=" << P << " d=" << d;
      // Insert the divergent key: it shares exactly d/P pages, and the split keeps everything.
      const uint64_t pages_before = ix->stats().pages;
      auto r = ix->insert(ns, q, dev_locs(q.size() / P, 100000));
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->already_present, d / P);
      EXPECT_EQ(ix->stats().pages, pages_before + (2000 / P - d / P));
      EXPECT_EQ(matched(*ix, ns, q), 2000 / P);
      EXPECT_EQ(matched(*ix, ns, base), 2000 / P);
      ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
    }
  }
}

TEST(PrefixIndex, SplitKeepsTotalSizeAndLocations) {
  auto ix = make(2);
  const NsKey ns = ns_of("");
  put(*ix, ns, {1, 2, 3, 4, 5, 6, 7, 8}, 10);  // pages 10..13
  EXPECT_EQ(ix->stats().nodes, 1u);
  auto r = put(*ix, ns, {1, 2, 3, 4, 9, 9}, 20);  // splits after 2 pages
  EXPECT_EQ(r.already_present, 2u);
  EXPECT_EQ(r.inserted, 1u);
  const IndexStats s = ix->stats();
  EXPECT_EQ(s.nodes, 3u);
  EXPECT_EQ(s.pages, 5u);
  MatchResult m;
  ix->match(ns, std::vector<TokenId>{1, 2, 3, 4, 5, 6, 7, 8}, m);
  ASSERT_EQ(m.matched_pages, 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(m.locations[i].device, PageId(10 + i));
  ix->match(ns, std::vector<TokenId>{1, 2, 3, 4, 9, 9}, m);
  ASSERT_EQ(m.matched_pages, 3u);
  EXPECT_EQ(m.locations[2].device, PageId(22));  // the duplicates' ids were ignored
}

TEST(PrefixIndex, InsertReturnsAlreadyPresentLength) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  EXPECT_EQ(put(*ix, ns, iota_tokens(16)).already_present, 0u);
  EXPECT_EQ(put(*ix, ns, iota_tokens(16)).already_present, 4u);
  EXPECT_EQ(put(*ix, ns, iota_tokens(8)).already_present, 2u);
  auto r = put(*ix, ns, iota_tokens(24));
  EXPECT_EQ(r.already_present, 4u);
  EXPECT_EQ(r.inserted, 2u);
  // Bad arguments are rejected before anything changes.
  EXPECT_FALSE(ix->insert(ns, iota_tokens(8), dev_locs(1)).ok());
  std::vector<PageLocation> none(2);
  EXPECT_FALSE(ix->insert(ns, iota_tokens(8), none).ok());
  std::vector<PageHash> one_hash(1);
  EXPECT_FALSE(ix->insert(ns, iota_tokens(8), dev_locs(2), one_hash).ok());
  EXPECT_EQ(ix->stats().pages, 6u);
}

TEST(PrefixIndex, MatchReturnsHashesOfMatchedAndUnmatchedPages) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(8));
  const auto q = iota_tokens(18);
  std::vector<PageHash> want;
  hash_pages(HashAlgo::kXXH3_128, ns.seed, q, 4, want);
  MatchResult m;
  ix->match(ns, q, m);
  EXPECT_EQ(m.matched_pages, 2u);
  EXPECT_EQ(m.whole_pages, 4u);
  EXPECT_EQ(m.hashes, want);
  // Inserting with the hashes from match stores the same chain as hashing afresh.
  std::vector<PageLocation> locs = dev_locs(4, 50);
  ASSERT_TRUE(ix->insert(ns, q, locs, m.hashes).ok());
  ix->match(ns, q, m);
  EXPECT_EQ(m.hashes, want);
}

TEST(PrefixIndex, InsertMatchedResumesFromTheMatch) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(16));
  auto q = iota_tokens(24);
  q[9] = -5;  // diverges inside the existing edge: the resume must split it
  MatchResult m;
  ix->match(ns, q, m);
  ASSERT_EQ(m.matched_pages, 2u);
  auto r = ix->insert_matched(ns, q, dev_locs(6, 100), m);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->already_present, 2u);
  EXPECT_EQ(r->inserted, 4u);
  EXPECT_TRUE(ix->check_invariants().ok());
  EXPECT_EQ(matched(*ix, ns, q), 6u);
  EXPECT_EQ(matched(*ix, ns, iota_tokens(16)), 4u);
  // A stale match (the tree changed since) falls back to a full walk.
  auto q2 = iota_tokens(12);
  ix->match(ns, q2, m);
  put(*ix, ns, iota_tokens(32));
  r = ix->insert_matched(ns, q2, dev_locs(3, 200), m);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->already_present, 3u);
  EXPECT_TRUE(ix->check_invariants().ok());
}

TEST(PrefixIndex, LockMovesPagesBetweenEvictableAndProtected) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(16));
  auto q = iota_tokens(16);
  q[9] = -1;
  put(*ix, ns, q, 100);  // a branch: shared 2 pages + 2 own pages
  MatchResult m;
  ix->match(ns, iota_tokens(16), m);
  IndexStats s = ix->stats();
  EXPECT_EQ(s.evictable_pages, 6u);
  EXPECT_EQ(s.protected_pages, 0u);
  ASSERT_TRUE(ix->lock(m.deepest).ok());
  s = ix->stats();
  EXPECT_EQ(s.protected_pages, 4u);
  EXPECT_EQ(s.evictable_pages, 2u);
  EXPECT_EQ(s.protected_device_pages, 4u);
  ASSERT_TRUE(ix->lock(m.deepest).ok());  // locks nest
  ASSERT_TRUE(ix->unlock(m.deepest).ok());
  EXPECT_EQ(ix->stats().protected_pages, 4u);
  ASSERT_TRUE(ix->unlock(m.deepest).ok());
  s = ix->stats();
  EXPECT_EQ(s.protected_pages, 0u);
  EXPECT_EQ(s.evictable_pages, 6u);
  EXPECT_FALSE(ix->unlock(m.deepest).ok());  // not locked any more
  EXPECT_FALSE(ix->lock(NodeHandle()).ok());
  EXPECT_TRUE(ix->check_invariants().ok());
}

// A match that ends inside another prompt's node locks only what it matched:
// the node is cut there and its tail stays evictable.
TEST(PrefixIndex, LockingWhereAMatchEndsLeavesThePagesPastItEvictable) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(48));  // one node of 12 pages
  auto q = iota_tokens(48);
  q[9] = -1;  // shares 2 pages with it
  MatchResult m;
  ix->match(ns, q, m);
  ASSERT_EQ(m.matched_pages, 2u);
  ASSERT_TRUE(ix->lock(m.deepest).ok());  // the deepest node as it is: all 12 pages
  EXPECT_EQ(ix->stats().protected_pages, 12u);
  ASSERT_TRUE(ix->unlock(m.deepest).ok());
  auto end = ix->ending_at(m.deepest, m.matched_pages);
  ASSERT_TRUE(end.ok()) << end.status().to_string();
  ASSERT_TRUE(ix->lock(*end).ok());
  EXPECT_EQ(ix->stats().protected_pages, 2u);
  EXPECT_EQ(ix->stats().evictable_pages, 10u);
  EXPECT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
  auto loc = ix->location(*end, 1);  // the matched pages are where they were
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->device, PageId(1));
  EvictResult ev;
  ASSERT_TRUE(ix->evict(1000, TierKind::kDevice, ev).ok());
  EXPECT_EQ(ev.freed, 10u);
  EXPECT_EQ(matched(*ix, ns, iota_tokens(48)), 2u);
  ASSERT_TRUE(ix->unlock(*end).ok());
  EXPECT_EQ(ix->stats().protected_pages, 0u);
  // A match that ends with its node is that node; counts that do not end in it are refused.
  ix->match(ns, iota_tokens(8), m);
  auto same = ix->ending_at(m.deepest, 2);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, m.deepest);
  EXPECT_FALSE(ix->ending_at(m.deepest, 3).ok());
  EXPECT_FALSE(ix->ending_at(m.deepest, 0).ok());
  EXPECT_TRUE(ix->check_invariants().ok());
}

// Device pages that eviction alone cannot free: each page of a path kept one
// residency, device-only first and host-only after it (the host dropped the
// copies of pages the device held, the device those of later pages the host
// held). Dropping a device-only page there would leave a hole, so evict()
// frees nothing; cut_below_device_only drops the host-only pages after it
// (below the node, and later in the node itself), and evict() then can. A
// server stalled on this shape with write-through and prefetch (every waiting
// request answered Busy, nothing running).
TEST(PrefixIndex, DevicePagesStuckBeforeHostOnlyPagesAreFreedByCuttingWhatFollows) {
  for (const bool in_one_node : {false, true}) {
    SCOPED_TRACE(in_one_node ? "host-only pages later in the node" : "host-only pages in a child");
    auto ix = make(4, /*events=*/true);
    const NsKey ns = ns_of("");
    const auto toks = iota_tokens(32);  // 8 pages
    std::vector<PageLocation> locs(8);
    for (uint32_t i = 0; i < 8; ++i) {
      locs[i].device = PageId(i);
      locs[i].host = SlotId(100 + i);
    }
    ASSERT_TRUE(ix->insert(ns, toks, locs).ok());
    MatchResult m;
    ix->match(ns, toks, m);
    NodeHandle tail = m.deepest;
    if (!in_one_node) {  // a second prompt splits the path after page 4
      auto other = iota_tokens(32);
      other[20] = -1;
      std::vector<PageLocation> other_locs(8);
      for (uint32_t i = 0; i < 8; ++i) other_locs[i].device = PageId(50 + i);
      ASSERT_TRUE(ix->insert(ns, other, other_locs).ok());
      ix->match(ns, toks, m);
      tail = m.deepest;
    }
    for (uint32_t i = 0; i < 8; ++i) {
      PageLocation l = locs[i];
      if (i < 4) l.host = SlotId();  // device-only, then host-only
      else l.device = PageId();
      ASSERT_TRUE(ix->set_location(tail, i, l).ok());
    }
    if (!in_one_node) {  // the other prompt's own pages go, as a device eviction would take them
      EvictResult first;
      ASSERT_TRUE(ix->evict(3, TierKind::kDevice, first).ok());
      ASSERT_EQ(first.freed, 3u);
    }
    ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
    std::vector<IndexEvent> drained;
    ix->take_events(drained);
    EvictResult ev;
    ASSERT_TRUE(ix->evict(4, TierKind::kDevice, ev).ok());
    ASSERT_EQ(ev.freed, 0u) << "the shape this test builds is not stuck";
    ASSERT_TRUE(ix->cut_below_device_only(4, ev).ok());
    EXPECT_EQ(ev.freed, 4u);  // pages 4..7, host-only, with their slots
    for (const EvictedPage& e : ev.pages) {
      EXPECT_TRUE(e.removed);
      EXPECT_TRUE(e.location.on_host() && !e.location.on_device());
      EXPECT_GE(e.location.host.value(), 104u);
    }
    std::vector<IndexEvent> events;
    ix->take_events(events);
    EXPECT_EQ(events.size(), 4u);
    EXPECT_EQ(matched(*ix, ns, toks), 4u);  // prefix-closed: pages 0..3 stay
    ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
    ASSERT_TRUE(ix->evict(4, TierKind::kDevice, ev).ok());
    EXPECT_EQ(ev.freed, 4u);
    EXPECT_EQ(ix->tier_pages(TierKind::kDevice), 0u);
    EXPECT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
    // Nothing stuck: nothing cut.
    ASSERT_TRUE(ix->cut_below_device_only(4, ev).ok());
    EXPECT_EQ(ev.freed, 0u);
  }
}

// A locked or retained path is never cut.
TEST(PrefixIndex, CuttingLeavesLockedAndRetainedPathsAlone) {
  for (const bool lock : {true, false}) {
    auto ix = make(4);
    const NsKey ns = ns_of("");
    const auto toks = iota_tokens(16);
    std::vector<PageLocation> locs(4);  // device-only, then host-only: stuck but for the hold
    for (uint32_t i = 0; i < 2; ++i) locs[i].device = PageId(i);
    for (uint32_t i = 2; i < 4; ++i) locs[i].host = SlotId(i);
    ASSERT_TRUE(ix->insert(ns, toks, locs).ok());
    MatchResult m;
    ix->match(ns, toks, m);
    ASSERT_TRUE((lock ? ix->lock(m.deepest) : ix->retain(m.deepest)).ok());
    EvictResult ev;
    ASSERT_TRUE(ix->cut_below_device_only(4, ev).ok());
    EXPECT_EQ(ev.freed, 0u);
    EXPECT_EQ(matched(*ix, ns, toks), 4u);
    EXPECT_TRUE(ix->check_invariants().ok());
  }
}

TEST(PrefixIndex, LockedPathSurvivesEvictEverything) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(16));
  auto q = iota_tokens(16);
  q[5] = -1;
  put(*ix, ns, q, 100);
  MatchResult m;
  ix->match(ns, iota_tokens(16), m);
  ASSERT_TRUE(ix->lock(m.deepest).ok());
  EvictResult ev;
  ASSERT_TRUE(ix->evict(1000, TierKind::kDevice, ev).ok());
  EXPECT_EQ(ev.freed, 3u);  // the unlocked branch only
  EXPECT_EQ(matched(*ix, ns, iota_tokens(16)), 4u);
  EXPECT_EQ(matched(*ix, ns, q), 1u);
  ASSERT_TRUE(ix->unlock(m.deepest).ok());
  ASSERT_TRUE(ix->evict(1000, TierKind::kDevice, ev).ok());
  EXPECT_EQ(ev.freed, 4u);
  const IndexStats s = ix->stats();
  EXPECT_EQ(s.pages, 0u);
  EXPECT_EQ(s.nodes, 0u);
  EXPECT_TRUE(ix->check_invariants().ok());
}

TEST(PrefixIndex, EvictionReturnsExactlyTheFreedLocationsLeavesFirst) {
  auto ix = make(2);
  const NsKey ns = ns_of("");
  put(*ix, ns, {1, 1, 2, 2, 3, 3}, 10);  // 10 11 12
  put(*ix, ns, {1, 1, 2, 2, 4, 4}, 20);  // shares 10 11, adds 22
  EvictResult ev;
  ASSERT_TRUE(ix->evict(2, TierKind::kDevice, ev).ok());  // the two leaves (12, 22) go first
  ASSERT_EQ(ev.freed, 2u);
  std::vector<uint32_t> got;
  for (const EvictedPage& p : ev.pages) {
    EXPECT_TRUE(p.removed);
    got.push_back(p.location.device.value());
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint32_t>{12, 22}));
  // Trimming: one page of the remaining 2-page node, the tail (11) first.
  ASSERT_TRUE(ix->evict(1, TierKind::kDevice, ev).ok());
  ASSERT_EQ(ev.pages.size(), 1u);
  EXPECT_EQ(ev.pages[0].location.device, PageId(11));
  EXPECT_EQ(matched(*ix, ns, {1, 1, 2, 2}), 1u);
  EXPECT_EQ(ix->stats().pages, 1u);
  EXPECT_TRUE(ix->check_invariants().ok());
  EXPECT_FALSE(ix->evict(1, TierKind::kDisk, ev).ok());
}

// Write-back: once a leaf has been demoted to the host, its device-only
// parent must still be evictable (by demotion too), or the device fills
// with parents while the host has room. Without a demotion it stays (no hole).
TEST(PrefixIndex, DeviceDemotesInnerPagesOnceTheirChildrenAreHostOnly) {
  PrefixIndex::Options o;
  o.page_tokens = 2;
  o.device_demotes = true;
  auto ix = std::move(PrefixIndex::create(o)).value();
  const NsKey ns = ns_of("");
  put(*ix, ns, {1, 1, 2, 2}, 10);                // parent: pages 10, 11
  put(*ix, ns, {1, 1, 2, 2, 3, 3, 4, 4}, 10);    // child: pages 12, 13
  uint32_t next_slot = 0;
  PrefixIndex::DemoteFn demote = [&](const PageLocation&, const PageHash&) { return SlotId(next_slot++); };
  EvictResult ev;
  ASSERT_TRUE(ix->evict(2, TierKind::kDevice, ev, demote).ok());  // the child goes to the host
  ASSERT_EQ(ev.freed, 2u);
  ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
  ASSERT_TRUE(ix->evict(1, TierKind::kDevice, ev, {}).ok());  // no demotion offered: the parent keeps its pages
  EXPECT_EQ(ev.freed, 0u);
  ASSERT_TRUE(ix->evict(2, TierKind::kDevice, ev, demote).ok());  // the parent follows, by demotion
  EXPECT_EQ(ev.freed, 2u);
  ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
  EXPECT_EQ(ix->stats().device_pages, 0u);
  EXPECT_EQ(ix->stats().host_pages, 4u);
  EXPECT_EQ(matched(*ix, ns, {1, 1, 2, 2, 3, 3, 4, 4, 5}), 4u);  // all still cached, one tier down
}

TEST(PrefixIndex, DeviceEvictionKeepsPagesWithHostCopies) {
  auto ix = make(2);
  const NsKey ns = ns_of("");
  auto r = put(*ix, ns, {1, 1, 2, 2, 3, 3}, 10);
  // Write-through of page 1 and 2 to host slots 7 and 8.
  ASSERT_TRUE(ix->set_location(r.deepest, 1, PageLocation{PageId(11), SlotId(7)}).ok());
  ASSERT_TRUE(ix->set_location(r.deepest, 2, PageLocation{PageId(12), SlotId(8)}).ok());
  EXPECT_EQ(ix->stats().host_pages, 2u);
  EvictResult ev;
  ASSERT_TRUE(ix->evict(3, TierKind::kDevice, ev).ok());
  // Pages 2 and 1 lose their device copy but stay; page 0 is device-only and
  // not the last page, so it stays too (dropping it would leave a hole).
  ASSERT_EQ(ev.freed, 2u);
  EXPECT_FALSE(ev.pages[0].removed);
  EXPECT_EQ(ev.pages[0].location, (PageLocation{PageId(12), SlotId(8)}));
  MatchResult m;
  ix->match(ns, std::vector<TokenId>{1, 1, 2, 2, 3, 3}, m);
  ASSERT_EQ(m.matched_pages, 3u);
  EXPECT_EQ(m.locations[0], (PageLocation{PageId(10), SlotId()}));
  EXPECT_EQ(m.locations[2], (PageLocation{PageId(), SlotId(8)}));
  IndexStats s = ix->stats();
  EXPECT_EQ(s.device_pages, 1u);
  EXPECT_EQ(s.host_pages, 2u);
  // Loading page 2 back onto the device, in place.
  ASSERT_TRUE(ix->set_location(m.deepest, 2, PageLocation{PageId(30), SlotId(8)}).ok());
  EXPECT_EQ(ix->location(m.deepest, 2).value(), (PageLocation{PageId(30), SlotId(8)}));
  EXPECT_FALSE(ix->set_location(m.deepest, 2, PageLocation{}).ok());  // cannot drop the last copy
  EXPECT_FALSE(ix->set_location(m.deepest, 3, PageLocation{PageId(1), SlotId()}).ok());
  // Host eviction: page 2 keeps its device copy; page 1 is host-only but not
  // the last page, so it stays (no holes).
  ASSERT_TRUE(ix->evict(10, TierKind::kHost, ev).ok());
  ASSERT_EQ(ev.freed, 1u);
  EXPECT_FALSE(ev.pages[0].removed);
  EXPECT_EQ(ev.pages[0].location, (PageLocation{PageId(30), SlotId(8)}));
  // Once page 2 is gone from the device, the host-only page 1 is the tail and can go.
  ASSERT_TRUE(ix->evict(1, TierKind::kDevice, ev).ok());
  ASSERT_EQ(ev.freed, 1u);
  EXPECT_TRUE(ev.pages[0].removed);
  ASSERT_TRUE(ix->evict(1, TierKind::kHost, ev).ok());
  ASSERT_EQ(ev.freed, 1u);
  EXPECT_TRUE(ev.pages[0].removed);
  EXPECT_EQ(ev.pages[0].location, (PageLocation{PageId(), SlotId(7)}));
  EXPECT_EQ(ix->stats().pages, 1u);
  ASSERT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
}

TEST(PrefixIndex, NamespacesIsolate) {
  auto ix = make(4);
  const NsKey a = ns_of("a"), b = ns_of("b"), c = ns_of("c");
  const auto toks = iota_tokens(16);
  put(*ix, a, toks, 0);
  put(*ix, b, iota_tokens(8), 100);
  put(*ix, c, toks, 200);
  MatchResult ma, mb, mc;
  ix->match(a, toks, ma);
  ix->match(b, toks, mb);
  ix->match(c, toks, mc);
  EXPECT_EQ(ma.matched_pages, 4u);
  EXPECT_EQ(mb.matched_pages, 2u);
  EXPECT_EQ(mc.matched_pages, 4u);
  EXPECT_EQ(ma.locations[0].device, PageId(0));
  EXPECT_EQ(mb.locations[0].device, PageId(100));
  EXPECT_EQ(mc.locations[0].device, PageId(200));
  EXPECT_NE(ma.hashes[0], mc.hashes[0]);
  EXPECT_EQ(ix->stats().nodes, 3u);
  EXPECT_EQ(ix->stats().namespaces, 3u);
  EXPECT_EQ(matched(*ix, ns_of("unknown"), toks), 0u);
}

TEST(PrefixIndex, RepeatedPatternsHashDifferentlyByPosition) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  std::vector<TokenId> toks;
  for (int i = 0; i < 4; ++i) toks.insert(toks.end(), {5, 6, 7, 8});
  put(*ix, ns, toks);
  MatchResult m;
  ix->match(ns, toks, m);
  ASSERT_EQ(m.matched_pages, 4u);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(m.hashes[i], m.hashes[j]);
  // A prompt that is a shifted copy only matches from its own start.
  EXPECT_EQ(matched(*ix, ns, std::vector<TokenId>(toks.begin() + 4, toks.end())), 3u);
}

TEST(PrefixIndex, EventsReportStoredAndRemovedPagesWithMatchingHashes) {
  auto ix = make(4, /*events=*/true);
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(12));
  std::vector<IndexEvent> ev;
  ix->take_events(ev);
  ASSERT_EQ(ev.size(), 3u);
  std::vector<PageHash> want;
  hash_pages(HashAlgo::kXXH3_128, ns.seed, iota_tokens(12), 4, want);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ev[i].kind, KvEventKind::kStored);
    EXPECT_EQ(ev[i].hash, want[i]);
    EXPECT_EQ(ev[i].ns, ns);
  }
  EvictResult er;
  ASSERT_TRUE(ix->evict(3, TierKind::kDevice, er).ok());
  ev.clear();
  ix->take_events(ev);
  ASSERT_EQ(ev.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ev[i].kind, KvEventKind::kRemoved);
    EXPECT_EQ(ev[i].hash, er.pages[i].hash);
    EXPECT_EQ(ev[i].hash, want[2 - i]);
  }
  ix->reset();
  ev.clear();
  ix->take_events(ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEventKind::kCleared);
}

// A page whose one residency changes tier is one `moved` event (what a router's view of the
// tiers needs); a copy into the other tier is a `stored` one.
TEST(PrefixIndex, EventsReportADemotionAsAMoveAndACopyAsAStore) {
  PrefixIndex::Options o;
  o.page_tokens = 2;
  o.device_demotes = true;
  o.record_events = true;
  auto ix = std::move(PrefixIndex::create(o)).value();
  const NsKey ns = ns_of("");
  const InsertResult r = put(*ix, ns, {1, 1, 2, 2}, 10);
  std::vector<PageHash> want;
  hash_pages(HashAlgo::kXXH3_128, ns.seed, std::vector<TokenId>{1, 1, 2, 2}, 2, want);
  std::vector<IndexEvent> ev;
  ix->take_events(ev);
  ASSERT_EQ(ev.size(), 2u);
  uint32_t next_slot = 0;
  PrefixIndex::DemoteFn demote = [&](const PageLocation&, const PageHash&) { return SlotId(next_slot++); };
  EvictResult er;
  ASSERT_TRUE(ix->evict(2, TierKind::kDevice, er, demote).ok());
  ev.clear();
  ix->take_events(ev);
  ASSERT_EQ(ev.size(), 2u);
  for (const IndexEvent& e : ev) {
    EXPECT_EQ(e.kind, KvEventKind::kMoved);
    EXPECT_EQ(e.from, TierKind::kDevice);
    EXPECT_EQ(e.tier, TierKind::kHost);
  }
  EXPECT_EQ(ev[0].hash, want[1]);  // leaves first
  EXPECT_EQ(ev[1].hash, want[0]);
  // Page 0 gains a device copy (prefetch's promotion): stored. Page 1 moves back up alone: moved.
  auto loc0 = ix->location(r.deepest, 0);
  ASSERT_TRUE(loc0.ok());
  ASSERT_TRUE(ix->set_location(r.deepest, 0, {PageId(20), loc0->host}).ok());
  ASSERT_TRUE(ix->set_location(r.deepest, 1, {PageId(21), SlotId()}).ok());
  ev.clear();
  ix->take_events(ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, KvEventKind::kStored);
  EXPECT_EQ(ev[0].tier, TierKind::kDevice);
  EXPECT_EQ(ev[0].hash, want[0]);
  EXPECT_EQ(ev[1].kind, KvEventKind::kMoved);
  EXPECT_EQ(ev[1].from, TierKind::kHost);
  EXPECT_EQ(ev[1].tier, TierKind::kDevice);
  EXPECT_EQ(ev[1].hash, want[1]);
  EXPECT_TRUE(ix->check_invariants().ok()) << ix->check_invariants().to_string();
}

TEST(PrefixIndex, ResetZeroesEveryCount) {
  auto ix = make(4);
  const NsKey ns = ns_of("");
  auto r = put(*ix, ns, iota_tokens(16));
  put(*ix, ns_of("x"), iota_tokens(16));
  ASSERT_TRUE(ix->lock(r.deepest).ok());
  ix->reset();
  const IndexStats s = ix->stats();
  EXPECT_EQ(s.namespaces, 0u);
  EXPECT_EQ(s.nodes, 0u);
  EXPECT_EQ(s.pages, 0u);
  EXPECT_EQ(s.device_pages, 0u);
  EXPECT_EQ(s.host_pages, 0u);
  EXPECT_EQ(s.evictable_pages, 0u);
  EXPECT_EQ(s.protected_pages, 0u);
  EXPECT_EQ(s.protected_device_pages, 0u);
  EXPECT_FALSE(ix->unlock(r.deepest).ok());  // stale handle detected
  EXPECT_EQ(matched(*ix, ns, iota_tokens(16)), 0u);
  EXPECT_TRUE(ix->check_invariants().ok());
  put(*ix, ns, iota_tokens(16));
  EXPECT_EQ(matched(*ix, ns, iota_tokens(16)), 4u);
}

TEST(PrefixIndex, PoliciesOrderEviction) {
  const NsKey ns = ns_of("");
  auto run = [&](EvictionPolicyKind kind) {
    auto ix = make(1, false, kind);
    // Three leaves under distinct first tokens: A inserted first, then B, then C.
    put(*ix, ns, {1}, 1);
    put(*ix, ns, {2}, 2);
    put(*ix, ns, {3}, 3);
    matched(*ix, ns, {1});  // A: recently used, 2 hits now
    matched(*ix, ns, {1});
    matched(*ix, ns, {2});  // B: 2 hits
    EvictResult ev;
    EXPECT_TRUE(ix->evict(1, TierKind::kDevice, ev).ok());
    return ev.pages.at(0).location.device.value();
  };
  EXPECT_EQ(run(EvictionPolicyKind::kLru), 3u);   // C is least recent
  EXPECT_EQ(run(EvictionPolicyKind::kFifo), 1u);  // A is oldest
  EXPECT_EQ(run(EvictionPolicyKind::kLfu), 3u);   // C has 1 hit
  EXPECT_EQ(run(EvictionPolicyKind::kSlru), 3u);  // C is still in probation
  auto ix = make(1, false, EvictionPolicyKind::kPriorityLru);
  ASSERT_TRUE(ix->insert(ns, std::vector<TokenId>{1}, dev_locs(1, 1), {}, 5).ok());
  ASSERT_TRUE(ix->insert(ns, std::vector<TokenId>{2}, dev_locs(1, 2), {}, -1).ok());
  ASSERT_TRUE(ix->insert(ns, std::vector<TokenId>{3}, dev_locs(1, 3), {}, 0).ok());
  EvictResult ev;
  ASSERT_TRUE(ix->evict(3, TierKind::kDevice, ev).ok());
  EXPECT_EQ(ev.pages[0].location.device, PageId(2));
  EXPECT_EQ(ev.pages[1].location.device, PageId(3));
  EXPECT_EQ(ev.pages[2].location.device, PageId(1));
  EXPECT_TRUE(parse_eviction_policy("slru").ok());
  EXPECT_FALSE(parse_eviction_policy("mru").ok());
}

TEST(PrefixIndex, MetadataOnlyModeWithoutHashes) {
  PrefixIndex::Options o;
  o.page_tokens = 4;
  o.store_hashes = false;
  auto ix = std::move(PrefixIndex::create(o)).value();
  const NsKey ns = ns_of("");
  put(*ix, ns, iota_tokens(16));
  MatchResult m;
  ix->match(ns, iota_tokens(20), m);
  EXPECT_EQ(m.matched_pages, 4u);
  EXPECT_TRUE(m.hashes.empty());
  EXPECT_LT(ix->stats().metadata_bytes, 1u << 22);
}

}  // namespace
}  // namespace kvtier
