// The router's pure parts: what a backend is believed to hold, the routing
// decision on scripted backend states, backend URLs.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "client/sse.h"
#include "router/backend.h"
#include "router/event_follower.h"
#include "router/held_index.h"
#include "router/policy.h"
#include "router/prefix_tracker.h"
#include "router/router_impl.h"
#include "router/router.h"
#include "server/config.h"

namespace kvtier::router {
namespace {

std::vector<PageHash> chain(uint64_t conversation, size_t pages) {
  std::vector<PageHash> c;
  for (size_t i = 0; i < pages; ++i) c.push_back(PageHash{conversation * 1000 + i, conversation});
  return c;
}

// What a backend's events say it holds: pages one by one in the index,
// then whole chunks on disk, as the backend's own lookup would find them.
// Every message end ("\n\n" or "\n\r\n") is found however the bytes are cut,
// also when it straddles two feeds: the reader searches each byte once, from
// two bytes before where its last search ended.
TEST(SseReader, FindsEveryMessageEndWhereverTheBytesAreCut) {
  const std::string stream = "data: a\n\ndata: b\r\n\r\n: a comment\n\nevent: e\ndata: c\n\r\ndata: d\ndata: e\n\n";
  for (size_t step = 1; step <= stream.size(); ++step) {
    client::SseReader reader(1 << 10);
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += step)
      ASSERT_TRUE(reader.feed_data(std::string_view(stream).substr(i, step), [&](std::string_view d) { got.emplace_back(d); }).ok());
    EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c", "d\ne"})) << "step " << step;
  }
}

TEST(HeldIndex, MatchesPagesThenDiskChunksAndFollowsMovesAndRemovals) {
  HeldIndex h;
  const auto a = chain(1, 12);
  // Pages 0-1 on the device, 2-3 on the host, chunks of 4: chunk 1 (pages 4-7) on disk, chunk 2 not.
  h.reset({a[0], a[1]}, {a[2], a[3]}, {a[7], a[11]});
  EXPECT_EQ(h.match(a, 4).on(TierKind::kDevice), 2u);
  EXPECT_EQ(h.match(a, 4).on(TierKind::kHost), 2u);
  EXPECT_EQ(h.match(a, 4).on(TierKind::kDisk), 8u);  // chunks 1 and 2 (its last page's hash is the key)
  EXPECT_EQ(h.match(std::span(a).first(10), 4).pages(), 8u);  // a chunk past the chain's end does not count
  // Page 1 demoted to the host, page 0 removed from the device: nothing leads any more.
  const PageHash one[] = {a[1]}, zero[] = {a[0]};
  h.apply(KvEventKind::kMoved, TierKind::kHost, TierKind::kDevice, one);
  h.apply(KvEventKind::kRemoved, TierKind::kDevice, TierKind::kDevice, zero);
  EXPECT_EQ(h.match(a, 4).pages(), 0u);
  h.apply(KvEventKind::kStored, TierKind::kHost, TierKind::kHost, zero);
  EXPECT_EQ(h.match(a, 4).on(TierKind::kHost), 4u);
  // Chunk 0 on disk serves a page the index lost from its position to the chunk's end.
  const PageHash three[] = {a[3]};
  h.apply(KvEventKind::kRemoved, TierKind::kHost, TierKind::kHost, three);
  EXPECT_EQ(h.match(a, 4).pages(), 3u);
  h.apply(KvEventKind::kStored, TierKind::kDisk, TierKind::kDisk, three);
  EXPECT_EQ(h.match(a, 4).on(TierKind::kDisk), 9u);
  // Clearing the host leaves the device (empty now) and the disk.
  h.apply(KvEventKind::kCleared, TierKind::kHost, TierKind::kHost, {});
  EXPECT_EQ(h.pages(), 0u);
  EXPECT_EQ(h.match(a, 4).on(TierKind::kDisk), 12u);
}

// A tail (a short chunk of a prompt's last pages, KVCache::store_down) counts after the whole chunks
// and ends the run, as the backend's lookup does; a whole chunk comes before any tail of it.
TEST(HeldIndex, ATailAfterTheWholeChunksCountsAndEndsTheRun) {
  HeldIndex h;
  const auto a = chain(3, 12);
  h.reset({a[0], a[1], a[2], a[3]}, {}, {a[7], a[9]});
  EXPECT_EQ(h.match(a, 4).on(TierKind::kDisk), 6u);  // chunk 1 (pages 4-7), then the tail 8-9
  h.reset({a[0]}, {}, {a[2], a[9]});
  EXPECT_EQ(h.match(a, 4).pages(), 3u);  // page 0 in the index, the tail 1-2 (its key: page 2); nothing after
  h.reset({}, {}, {a[1], a[3], a[6], a[7]});
  EXPECT_EQ(h.match(a, 4).on(TierKind::kDisk), 8u);  // chunks 0 and 1, whole: the tails inside them are not needed
}

// A shared store's chunks serve where the backend's own tiers end, in the order of its lookup.
TEST(HeldIndex, SharedStoreChunksCountAfterTheBackendsOwnTiers) {
  HeldIndex own, store;
  const auto a = chain(2, 12);
  own.reset({a[0]}, {a[1], a[2], a[3]}, {a[7]});  // pages 0-3, then chunk 1 on disk
  const PageHash last[] = {a[11], a[3]};
  store.apply(KvEventKind::kStored, TierKind::kRemote, TierKind::kRemote, last);
  EXPECT_EQ(own.match(a, 4).pages(), 8u);
  const HeldIndex::Match m = own.match(a, 4, &store);
  ASSERT_EQ(m.runs.size(), 4u);
  EXPECT_EQ(m.runs[0].tier, TierKind::kDevice);
  EXPECT_EQ(m.runs[1].tier, TierKind::kHost);
  EXPECT_EQ(m.runs[1].pages, 3u);
  EXPECT_EQ(m.runs[2].tier, TierKind::kDisk);
  EXPECT_EQ(m.runs[3].tier, TierKind::kRemote);
  EXPECT_EQ(m.on(TierKind::kRemote), 4u);
  EXPECT_EQ(store.remote_chunks(), 2u);
  // Removed from the store (found corrupt, or erased): no longer counted.
  const PageHash gone[] = {a[11]};
  store.apply(KvEventKind::kRemoved, TierKind::kRemote, TierKind::kRemote, gone);
  EXPECT_EQ(own.match(a, 4, &store).pages(), 8u);
  // A snapshot of the backend leaves the store's chunks (no snapshot lists them).
  store.reset({}, {}, {});
  EXPECT_EQ(store.remote_chunks(), 1u);
}

TEST(RouterForward, ReadsTheCachedTokensABackendReports) {
  EXPECT_EQ(reported_cached_tokens(R"({"usage": {"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}}})"), 32u);
  EXPECT_EQ(reported_cached_tokens(R"({"usage": {"prompt_tokens": 40}})"), std::nullopt);
  EXPECT_EQ(reported_cached_tokens("not json"), std::nullopt);
  // A backend's usage of the wrong shape is no figure (it threw before).
  EXPECT_EQ(reported_cached_tokens(R"({"usage": 5})"), std::nullopt);
  EXPECT_EQ(reported_cached_tokens(R"({"usage": {"prompt_tokens_details": "none"}})"), std::nullopt);
  // A stream's tail: the last data line with a usage, whatever is cut off before it.
  const std::string tail = "ed\": 1}\n\ndata: {\"choices\": []}\n\ndata: {\"choices\": [], \"usage\": "
                           "{\"prompt_tokens_details\": {\"cached_tokens\": 48}}}\n\ndata: [DONE]\n\n";
  EXPECT_EQ(reported_cached_tokens(tail), 48u);
  EXPECT_EQ(reported_cached_tokens("data: {\"choices\": []}\n\ndata: [DONE]\n\n"), std::nullopt);
}

TEST(EventFollower, ParsesMessagesSplitAnywhereAndRefusesGarbage) {
  const PageHash x{0x1122334455667788ull, 0x99aabbccddeeff00ull};
  const std::string hex = x.to_hex();
  const std::string stream = ": keep-alive\n\nid: 7\nevent: snapshot\ndata: {\"seq\": 7, \"tiers\": {\"device\": [\"" + hex +
                             "\"], \"host\": [], \"disk\": []}}\n\nid: 9\nevent: kv\ndata: {\"seq\": 9, \"events\": "
                             "[{\"kind\": \"moved\", \"tier\": \"host\", \"from\": \"device\", \"unit\": \"page\", \"hashes\": [\"" +
                             hex + "\"]}]}\n\n";
  for (size_t step : {size_t(1), size_t(5), stream.size()}) {
    client::SseReader split(1 << 20);
    std::vector<EventMessage> got;
    for (size_t i = 0; i < stream.size(); i += step) {
      const Status st = split.feed(std::string_view(stream).substr(i, step), [&](const client::SseMessage& sse) {
        auto m = parse_event_message(sse.event, sse.data);
        if (!m.ok()) return m.status();
        got.push_back(std::move(m).value());
        return Status::Ok();
      });
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_EQ(got.size(), 2u) << "step " << step;
    EXPECT_TRUE(got[0].snapshot);
    EXPECT_EQ(got[0].seq, 7u);
    EXPECT_EQ(got[0].device, std::vector<PageHash>{x});
    EXPECT_FALSE(got[1].snapshot);
    ASSERT_EQ(got[1].records.size(), 1u);
    EXPECT_EQ(got[1].records[0].kind, KvEventKind::kMoved);
    EXPECT_EQ(got[1].records[0].tier, TierKind::kHost);
    EXPECT_EQ(got[1].records[0].from, TierKind::kDevice);
    EXPECT_EQ(got[1].records[0].hashes, std::vector<PageHash>{x});
  }
  for (const char* bad : {"{", "[]", "{\"events\": []}", "{\"seq\": 1, \"events\": [{\"kind\": \"eaten\", \"tier\": \"host\"}]}",
                          "{\"seq\": 1, \"events\": [{\"kind\": \"stored\", \"tier\": \"moon\"}]}",
                          "{\"seq\": 1, \"events\": [{\"kind\": \"stored\", \"tier\": \"host\", \"hashes\": [\"xyz\"]}]}",
                          "{\"seq\": 1, \"events\": [{\"kind\": \"moved\", \"tier\": \"host\", \"hashes\": []}]}"})
    EXPECT_FALSE(parse_event_message("kv", bad).ok()) << bad;
  EXPECT_FALSE(parse_event_message("gossip", "{\"seq\": 1}").ok());
}

TEST(PrefixTracker, MatchesLeadingPagesAndForgetsTheLeastRecent) {
  PrefixTracker t(10);
  const auto a = chain(1, 6), b = chain(2, 6);
  t.insert(std::span(a).first(4));
  EXPECT_EQ(t.match(a), 4u);
  EXPECT_EQ(t.match(b), 0u);
  EXPECT_EQ(t.match({}), 0u);
  t.insert(b);  // 10 hashes: full
  EXPECT_EQ(t.size(), 10u);
  t.insert(a);  // a's two new pages push out b's deepest two (its least recent)
  EXPECT_EQ(t.size(), 10u);
  EXPECT_EQ(t.match(a), 6u);
  EXPECT_EQ(t.match(b), 4u);
  t.clear();
  EXPECT_EQ(t.match(a), 0u);
}

// match() finds the leading run by binary search, which relies on what is held being
// prefix-closed along every chain; checked against a linear scan through random inserts of
// chains that share prefixes (a tree of conversations) into a tracker that keeps evicting.
TEST(PrefixTracker, BinaryMatchEqualsTheLeadingRunUnderEviction) {
  std::mt19937 rng(11);
  PrefixTracker t(200);
  auto chain_of = [](uint32_t branch, uint32_t depth) {  // 8 trunks, each page of a branch shared by its children
    std::vector<PageHash> c;
    for (uint32_t d = 0; d < depth; ++d) c.push_back(PageHash{(branch >> (2 * (depth - d))) * 100 + d, 7});
    return c;
  };
  for (int step = 0; step < 3000; ++step) {
    const auto c = chain_of(rng() % 4096, 1 + rng() % 12);
    if (rng() % 2) t.insert(std::span(c).first(1 + rng() % c.size()));
    uint32_t linear = 0;  // a one-page span's match is that page's presence
    while (linear < c.size() && t.match(std::span(c).subspan(linear, 1)) == 1) ++linear;
    ASSERT_EQ(t.match(c), linear) << "step " << step;
  }
}

TEST(RoutePolicy, CacheAwarePicksTheLongestPrefixUnlessItIsOverloaded) {
  uint64_t rotation = 0;
  std::vector<BackendView> v = {{true, 3, 2}, {true, 1, 9}, {true, 0, 0}};
  auto c = choose_backend(RoutePolicy::kCacheAware, v, rotation, 4);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->backend, 1u);
  EXPECT_EQ(c->reason, RouteReason::kCache);
  v[1].load = 5;  // 5 > 0 + 4: the least loaded instead
  c = choose_backend(RoutePolicy::kCacheAware, v, rotation, 4);
  EXPECT_EQ(c->backend, 2u);
  EXPECT_EQ(c->reason, RouteReason::kLoad);
  v[1].healthy = false;  // the best match is down: the next best within the slack
  c = choose_backend(RoutePolicy::kCacheAware, v, rotation, 4);
  EXPECT_EQ(c->backend, 0u);
  EXPECT_EQ(c->reason, RouteReason::kCache);
}

// Priced backends: the lowest predicted time to first token, unless it is a tie with the least loaded.
TEST(RoutePolicy, CacheAwarePicksTheLowestPredictedTimeWhenEveryBackendIsPriced) {
  uint64_t rotation = 0;
  // Backend 0 holds more pages but on a slow tier, and is busier: backend 1's price is lower.
  std::vector<BackendView> v = {{true, 2, 9, 0.30}, {true, 1, 6, 0.10}, {true, 0, 0, 0.50}};
  auto c = choose_backend(RoutePolicy::kCacheAware, v, rotation, 4);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->backend, 1u);
  EXPECT_EQ(c->reason, RouteReason::kCache);
  // Within kPriceTie of the lowest price: the least loaded of those.
  v[0].predicted_s = 0.60;
  v[1].predicted_s = 0.50 * (1 - kPriceTie / 2);
  c = choose_backend(RoutePolicy::kCacheAware, v, rotation, 4);
  EXPECT_EQ(c->backend, 2u);
  EXPECT_EQ(c->reason, RouteReason::kLoad);
  // No slack rule when priced: a much busier backend still wins if its price says so.
  v = {{true, 40, 9, 0.05}, {true, 0, 0, 0.50}};
  EXPECT_EQ(choose_backend(RoutePolicy::kCacheAware, v, rotation, 4)->backend, 0u);
  // One backend without a price (another server): the held-pages rule for all.
  v[1].predicted_s = -1;
  EXPECT_EQ(choose_backend(RoutePolicy::kCacheAware, v, rotation, 4)->backend, 1u);  // 40 > 0 + 4
  // A down backend's missing price does not matter.
  v[1].healthy = false;
  v.push_back({true, 0, 0, 0.5});
  EXPECT_EQ(choose_backend(RoutePolicy::kCacheAware, v, rotation, 4)->backend, 0u);
}

TEST(RoutePolicy, NewConversationsRotateAmongEquallyLoadedBackends) {
  uint64_t rotation = 0;
  const std::vector<BackendView> v = {{true, 0, 0}, {true, 0, 0}, {true, 0, 0}};
  std::vector<int> seen(3);
  for (int i = 0; i < 6; ++i) ++seen[choose_backend(RoutePolicy::kCacheAware, v, rotation, 4)->backend];
  EXPECT_EQ(seen, (std::vector<int>{2, 2, 2}));
}

TEST(RoutePolicy, RoundRobinAndLeastLoadedSkipDownBackends) {
  uint64_t rotation = 0;
  const std::vector<BackendView> v = {{true, 7, 0}, {false, 0, 9}, {true, 2, 0}};
  std::vector<size_t> rr;
  for (int i = 0; i < 4; ++i) rr.push_back(choose_backend(RoutePolicy::kRoundRobin, v, rotation, 4)->backend);
  EXPECT_EQ(rr, (std::vector<size_t>{0, 2, 2, 0}));
  EXPECT_EQ(choose_backend(RoutePolicy::kLeastLoaded, v, rotation, 4)->backend, 2u);
  const std::vector<BackendView> down = {{false, 0, 0}, {false, 0, 0}};
  EXPECT_FALSE(choose_backend(RoutePolicy::kCacheAware, down, rotation, 4));
  EXPECT_FALSE(choose_backend(RoutePolicy::kRoundRobin, {}, rotation, 4));
}

TEST(RoutePolicy, NamesRoundTrip) {
  for (RoutePolicy p : {RoutePolicy::kCacheAware, RoutePolicy::kRoundRobin, RoutePolicy::kLeastLoaded})
    EXPECT_EQ(*parse_policy(policy_name(p)), p);
  EXPECT_FALSE(parse_policy("random").ok());
}

TEST(BackendUrl, ParsesHostAndPortAndRefusesTheRest) {
  auto a = parse_backend_url("http://127.0.0.1:8081");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8081);
  EXPECT_EQ(parse_backend_url("http://node-3:80/")->host, "node-3");
  for (const char* bad : {"127.0.0.1:8081", "https://a:1", "http://a", "http://a:0", "http://a:99999", "http://a:1/v1",
                          "http://:80", "http://a:x"})
    EXPECT_FALSE(parse_backend_url(bad).ok()) << bad;
}

TEST(RouterOptions, ConfigDocHasTheRoutersTable) {
  // docs/CONFIG.md is `kvtier config --markdown`: the server's sections, then the router's.
  std::ifstream f(std::string(KVTIER_SOURCE_DIR) + "/docs/CONFIG.md");
  ASSERT_TRUE(f.good());
  const std::string committed((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(committed, server::config_markdown() + route_config_markdown())
      << "docs/CONFIG.md is stale: run `build/tools/kvtier config --markdown > docs/CONFIG.md`";
  RouterOptions o;
  ASSERT_TRUE(find_option(router_option_table(), "route.policy")->apply(o, "round-robin", "--policy").ok());
  EXPECT_EQ(o.policy, RoutePolicy::kRoundRobin);
  EXPECT_FALSE(find_option(router_option_table(), "route.port")->apply(o, "70000", "--port").ok());
}

}  // namespace
}  // namespace kvtier::router
