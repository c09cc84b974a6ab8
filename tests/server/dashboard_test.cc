// The dashboard's data: tree snapshots and their summaries, the JSON of the
// tree, tiers and recent requests, the cache view's refresh protocol.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "common/page_hash.h"
#include "index/prefix_index.h"
#include "runtime/prefill_trace.h"
#include "server/cache_view.h"
#include "server/dashboard_json.h"
#include "server/fake_runtime.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

constexpr uint32_t P = 4;

std::unique_ptr<PrefixIndex> make_index() {
  PrefixIndex::Options o;
  o.page_tokens = P;
  return std::move(PrefixIndex::create(o)).value();
}

NsKey ns_of(const std::string& salt) {
  Namespace ns;
  ns.cache_salt = salt;
  return NsKey{namespace_seed(ns, HashAlgo::kXXH3_128)};
}

void put(PrefixIndex& ix, NsKey ns, const std::vector<TokenId>& tokens, uint32_t base) {
  std::vector<PageLocation> locs(tokens.size() / P);
  for (size_t i = 0; i < locs.size(); ++i) locs[i].device = PageId(base + uint32_t(i));
  ASSERT_TRUE(ix.insert(ns, tokens, locs).ok());
}

// A shared prefix of `shared` pages, then `branches` branches of `own` pages each.
std::vector<std::vector<TokenId>> conversations(uint32_t shared, uint32_t branches, uint32_t own) {
  std::vector<std::vector<TokenId>> out;
  for (uint32_t b = 0; b < branches; ++b) {
    std::vector<TokenId> t;
    for (uint32_t i = 0; i < shared * P; ++i) t.push_back(TokenId(i % 97));
    for (uint32_t i = 0; i < own * P; ++i) t.push_back(TokenId(100 + b * 1000 + i));
    out.push_back(t);
  }
  return out;
}

uint64_t top_level_pages(const TreeSnapshot& s) {
  uint64_t n = 0;
  for (const auto& r : s.nodes)
    if (r.parent == kNoTreeParent) n += r.subtree_pages;
  return n;
}

void expect_well_formed(const TreeSnapshot& s) {
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const TreeNodeRecord& r = s.nodes[i];
    if (r.parent != kNoTreeParent) {
      EXPECT_LT(r.parent, i) << "parents come first";
    }
    uint64_t below = r.pages;
    for (const auto& c : s.nodes)
      if (c.parent == i) below += c.subtree_pages;
    EXPECT_EQ(r.subtree_pages, below) << "record " << i;
    EXPECT_LE(r.label_begin + r.label_count, s.label_tokens.size());
  }
  EXPECT_EQ(top_level_pages(s), s.total_pages);
}

TEST(TreeSnapshot, CopiesEveryNodeWithResidencyAndLabels) {
  auto ix = make_index();
  const NsKey ns = ns_of("a");
  const auto convs = conversations(3, 4, 2);
  for (size_t i = 0; i < convs.size(); ++i) put(*ix, ns, convs[i], uint32_t(i * 100));
  const TreeSnapshot s = ix->snapshot({});
  expect_well_formed(s);
  EXPECT_EQ(s.page_tokens, P);
  EXPECT_EQ(s.total_pages, 3u + 4 * 2);
  ASSERT_EQ(s.nodes.size(), 1u + 1 + 4);  // namespace root, shared node, four branches
  EXPECT_TRUE(s.nodes[0].is_namespace());
  EXPECT_EQ(s.nodes[1].pages, 3u);
  EXPECT_EQ(s.nodes[1].device_pages, 3u);
  EXPECT_EQ(s.nodes[1].host_pages, 0u);
  ASSERT_EQ(s.nodes[1].label_count, 8u);
  EXPECT_EQ(s.label_tokens[s.nodes[1].label_begin], 0);
  EXPECT_EQ(s.label_tokens[s.nodes[2].label_begin] % 1000, 100);
  EXPECT_GE(s.nodes[1].hits, 4u);
}

TEST(TreeSnapshot, SummaryKeepsTheLargestBranchesAndSumsTheRest) {
  auto ix = make_index();
  const NsKey ns = ns_of("b");
  std::vector<TokenId> base;
  for (uint32_t i = 0; i < 2 * P; ++i) base.push_back(TokenId(i));
  for (uint32_t b = 0; b < 10; ++b) {  // branch b has b + 1 pages
    std::vector<TokenId> t = base;
    for (uint32_t i = 0; i < (b + 1) * P; ++i) t.push_back(TokenId(500 + b * 100 + i));
    put(*ix, ns, t, b * 100);
  }
  TreeSnapshotOptions o;
  o.max_nodes = 6;
  const TreeSnapshot s = ix->snapshot(o);
  expect_well_formed(s);
  ASSERT_LE(s.nodes.size(), 6u);
  EXPECT_EQ(s.total_nodes, 12u);
  // root, shared node, the three largest branches (10, 9, 8 pages), one aggregate of the other seven.
  ASSERT_EQ(s.nodes.size(), 6u);
  EXPECT_EQ(s.nodes[2].pages, 10u);
  EXPECT_EQ(s.nodes[3].pages, 9u);
  EXPECT_EQ(s.nodes[4].pages, 8u);
  EXPECT_EQ(s.nodes[5].aggregate, 7u);
  EXPECT_EQ(s.nodes[5].pages, 1u + 2 + 3 + 4 + 5 + 6 + 7);
  EXPECT_EQ(s.nodes[5].device_pages, s.nodes[5].pages);
  EXPECT_EQ(s.nodes[5].parent, 1u);
}

TEST(TreeSnapshot, SummariesOfRandomTreesFitAndAddUp) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    auto ix = make_index();
    for (int n = 0; n < 3; ++n) {
      const NsKey ns = ns_of("ns" + std::to_string(n));
      for (int i = 0; i < 30; ++i) {
        std::vector<TokenId> t;
        const uint32_t pages = 1 + rng() % 8;
        for (uint32_t p = 0; p < pages * P; ++p) t.push_back(TokenId(rng() % 3));  // few symbols: much sharing
        put(*ix, ns, t, uint32_t(i * 16));
      }
    }
    const TreeSnapshot full = ix->snapshot({});
    expect_well_formed(full);
    for (uint32_t max_nodes : {1u, 2u, 3u, 5u, 17u, 60u, 1000u}) {
      const TreeSnapshot s = summarize_tree(full, max_nodes);
      EXPECT_LE(s.nodes.size(), max_nodes);
      EXPECT_FALSE(s.nodes.empty());
      expect_well_formed(s);
    }
  }
}

TEST(DashboardJson, TreeJsonLabelsAndCounts) {
  auto ix = make_index();
  const auto convs = conversations(2, 3, 1);
  for (size_t i = 0; i < convs.size(); ++i) put(*ix, ns_of("c"), convs[i], uint32_t(i * 10));
  PublishedTree tree;
  tree.snapshot = ix->snapshot({});
  tree.taken = std::chrono::steady_clock::now();
  TextCodec codec;
  // Half a UTF-8 character must not break the JSON.
  codec.detokenize = [](std::span<const TokenId> ids) {
    std::string text(ids.size() == 8 ? "t8" : "t?");
    text.push_back('\xe2');
    text.push_back('\x82');
    return text;
  };
  const json j = json::parse(tree_json(&tree, 2000, &codec, tree.taken));
  EXPECT_TRUE(j["available"]);
  EXPECT_EQ(j["total_tokens"], (2 + 3) * P);
  ASSERT_EQ(j["nodes"].size(), 5u);
  EXPECT_EQ(j["nodes"][0]["kind"], "namespace");
  EXPECT_EQ(j["nodes"][0]["parent"], -1);
  EXPECT_EQ(j["nodes"][1]["label"].get<std::string>().substr(0, 2), "t8");
  EXPECT_EQ(j["nodes"][2]["tokens"], P);
  EXPECT_EQ(json::parse(tree_json(&tree, 2, &codec, tree.taken))["nodes"].size(), 2u);
  EXPECT_FALSE(json::parse(tree_json(nullptr, 10, &codec, tree.taken))["available"]);
  // Without --dashboard-labels no prompt text leaves: a size and a hash prefix.
  const json bare = json::parse(tree_json(&tree, 2000, nullptr, tree.taken));
  ASSERT_EQ(bare["nodes"].size(), 5u);
  const std::string label = bare["nodes"][1]["label"];
  EXPECT_EQ(label.find("t8"), std::string::npos) << label;
  EXPECT_EQ(label.rfind(std::to_string(bare["nodes"][1]["tokens"].get<uint64_t>()) + " tokens #", 0), 0u) << label;
  EXPECT_EQ(label.size(), label.find('#') + 9) << label;
}

TEST(DashboardJson, QueryCount) {
  EXPECT_EQ(query_count("", 7, 1, 10), 7u);
  EXPECT_EQ(query_count("10", 7, 1, 10), 10u);
  EXPECT_FALSE(query_count("11", 7, 1, 10));
  EXPECT_FALSE(query_count("0", 7, 1, 10));
  EXPECT_FALSE(query_count("3x", 7, 1, 10));
  EXPECT_FALSE(query_count("-1", 7, 1, 10));
}

TEST(DashboardJson, TiersRatiosAndRates) {
  std::vector<TierSample> s(3);
  for (int i = 0; i < 3; ++i) {
    s[i].t_s = i * 30.0;
    s[i].capacity_bytes[0] = 1000;
    s[i].used_bytes[0] = 100 * (i + 1);
  }
  s[2].prompt_tokens = 100;
  s[2].cached_tokens[0] = 50;
  s[2].cached_tokens[1] = 25;
  s[2].bytes_loaded[1] = 3000;  // host -> device over the last 30 s
  const json j = json::parse(tiers_json(s));
  EXPECT_EQ(j["tiers"][0]["name"], "device");
  EXPECT_EQ(j["tiers"][0]["used_bytes"], 300);
  EXPECT_DOUBLE_EQ(j["tiers"][0]["hit_ratio_1m"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["tiers"][1]["hit_ratio_5m"].get<double>(), 0.25);
  EXPECT_FALSE(j["tiers"][2]["present"]);
  ASSERT_EQ(j["links"].size(), 2u);  // host only: host -> device, device -> host
  EXPECT_EQ(j["links"][0]["name"], "host → device");
  EXPECT_DOUBLE_EQ(j["links"][0]["bytes_per_s_10s"].get<double>(), 100.0);
  EXPECT_TRUE(j["history"]["hit_ratio_by_tier"]["device"][0].is_null());  // no prompts in the first 30 s
  EXPECT_FALSE(json::parse(tiers_json({}))["available"]);
}

TEST(DashboardJson, TierSampleFromStats) {
  RuntimeStats st;
  st.cache.pool.total_pages = 10;
  st.cache.pool.used_pages = 4;
  st.cache.pool.page_bytes = 100;
  st.cache.index.device_pages = 3;
  st.cache.host_slots = 20;
  st.cache.host_free_slots = 5;
  st.cache.index.host_pages = 15;
  st.cache.disk_present = true;
  st.cache.disk.bytes = 7;
  st.cache.disk.capacity_bytes = 70;
  st.cache.disk.checksum_failures = 2;
  st.counters.prompt_tokens = 9;
  st.counters.cached_tokens_by_tier[2] = 3;
  st.cache.demoted_pages = 4;
  st.cache.spilled_chunks = 5;
  const TierSample s = tier_sample_from_stats(st, 1.5);
  EXPECT_EQ(s.used_bytes[0], 400u);
  EXPECT_EQ(s.capacity_bytes[1], 2000u);
  EXPECT_EQ(s.used_bytes[1], 1500u);
  EXPECT_TRUE(s.present[2]);
  EXPECT_FALSE(s.present[3]);
  EXPECT_EQ(s.used_bytes[2], 7u);
  EXPECT_EQ(s.checksum_failures, 2u);
  EXPECT_EQ(s.cached_tokens[2], 3u);
  EXPECT_EQ(s.spilled_chunks, 5u);
  EXPECT_DOUBLE_EQ(s.t_s, 1.5);
}

TEST(DashboardJson, RecentRequestsCarryTheRace) {
  auto trace = std::make_shared<PrefillTrace>();
  trace->num_layers = 2;
  trace->page_tokens = 16;
  trace->plan = {{0, 2, TierKind::kDevice, PlanAction::kInPlace}, {2, 3, TierKind::kHost, PlanAction::kLoad},
                 {5, 1, TierKind::kDisk, PlanAction::kRecompute}};
  trace->predicted_s = 0.004;
  trace->recompute_all_s = 0.02;
  trace->arrival_s[1] = {0.001, 0.002};
  PrefillPass pass;
  pass.start_pos = 80;
  pass.end_pos = 100;
  pass.end_s = 0.005;
  pass.hook_enter_s = {0.0005, 0.003};
  pass.hook_return_s = {0.001, 0.003};
  trace->passes.push_back(pass);
  PrefillRecord r;
  r.id = 4;
  r.report.prompt_tokens = 100;
  r.report.trace = trace;
  const json j = json::parse(recent_requests_json(std::span(&r, 1)));
  const json& q = j["requests"][0];
  EXPECT_EQ(q["id"], 4);
  EXPECT_EQ(q["decision"], "split");
  EXPECT_EQ(q["plan"][1]["tokens"], 48);
  EXPECT_EQ(q["plan"][1]["action"], "load");
  ASSERT_EQ(q["race"]["loads"].size(), 1u);
  EXPECT_EQ(q["race"]["loads"][0]["tier"], "host");
  const json& layers = q["race"]["compute"][0]["layers"];
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_DOUBLE_EQ(layers[0]["end_s"].get<double>(), 0.003);  // the next layer's hook
  EXPECT_DOUBLE_EQ(layers[1]["end_s"].get<double>(), 0.005);  // the call's end
}

// Ages are read from the view's clock: a tree younger than max_age is
// served as is, an older one makes the view ask the scheduler again.
TEST(CacheView, AgesFollowItsClock) {
  testing::FakeRuntime runtime(std::make_shared<testing::FakeShared>());
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  size_t asked = 0;
  std::vector<std::function<void(Runtime&)>> queued;
  auto post = [&](std::function<void(Runtime&)> fn) {
    std::lock_guard lk(mu);
    ++asked;
    queued.push_back(std::move(fn));
    cv.notify_all();
    return true;
  };
  auto run_queued = [&] {
    std::vector<std::function<void(Runtime&)>> now;
    {
      std::lock_guard lk(mu);
      now.swap(queued);
    }
    for (auto& fn : now) fn(runtime);
  };
  CacheViewOptions o;
  o.clock = &clock;
  o.sample_every = std::chrono::hours(1);  // the sampler thread stays out of the way
  o.max_age = std::chrono::milliseconds(500);
  o.max_wait = std::chrono::milliseconds(0);
  auto view = CacheView::create(o, post);
  ASSERT_TRUE(view.ok());
  {
    std::unique_lock lk(mu);  // the sampler's one ask (the next is an hour away)
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return asked >= 1; }));
  }
  (void)(*view)->tree();  // none yet: asks
  run_queued();
  ASSERT_NE((*view)->tree(), nullptr);
  const size_t before = [&] {
    std::lock_guard lk(mu);
    return asked;
  }();
  clock.advance(std::chrono::milliseconds(400));
  (void)(*view)->tree();  // 400 ms old on the view's clock: fresh enough
  {
    std::lock_guard lk(mu);
    EXPECT_EQ(asked, before);
  }
  clock.advance(std::chrono::milliseconds(200));
  (void)(*view)->tree();  // 600 ms old: asks again
  {
    std::lock_guard lk(mu);
    EXPECT_EQ(asked, before + 1);
  }
  run_queued();
  view->reset();
  run_queued();
}

// The history spans its time whoever asks for samples: refreshes four times a period (a
// dashboard's polls between the sampler's) replace the newest sample instead of adding one. Kept
// by count, they shrank ten periods of history to two and a half.
TEST(CacheView, ExtraSamplesKeepTheHistorysSpan) {
  testing::FakeRuntime runtime(std::make_shared<testing::FakeShared>());
  ManualClock clock;
  CacheViewOptions o;
  o.clock = &clock;
  o.sample_every = std::chrono::milliseconds(1000);
  o.history = 10;
  auto view = CacheView::create(o, [](std::function<void(Runtime&)>) { return true; });  // the test refreshes
  ASSERT_TRUE(view.ok());
  for (int i = 0; i < 160; ++i) {
    (*view)->refresh(runtime, false);
    clock.advance(std::chrono::milliseconds(250));
  }
  const std::vector<TierSample> s = (*view)->samples();
  ASSERT_FALSE(s.empty());
  EXPECT_GE(s.back().t_s - s.front().t_s, 9.0);
  EXPECT_LE(s.size(), 2u * o.history + 1);
}

TEST(CacheView, PublishesSamplesAndTreesTakenOnTheSchedulerThread) {
  testing::FakeRuntime runtime(std::make_shared<testing::FakeShared>());
  std::mutex mu;
  std::vector<std::function<void(Runtime&)>> queued;
  auto post = [&](std::function<void(Runtime&)> fn) {
    std::lock_guard lk(mu);
    queued.push_back(std::move(fn));
    return true;
  };
  CacheViewOptions o;
  o.max_wait = std::chrono::milliseconds(0);  // answer at once with what is published
  auto view = CacheView::create(o, post);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)->tree(), nullptr);  // nothing taken yet: asks for one
  auto run_queued = [&] {
    std::vector<std::function<void(Runtime&)>> now;
    {
      std::lock_guard lk(mu);
      now.swap(queued);
    }
    for (auto& fn : now) fn(runtime);
    return now.size();
  };
  EXPECT_GE(run_queued(), 1u);
  EXPECT_NE((*view)->tree(), nullptr);
  EXPECT_FALSE(CacheView::create(o, nullptr).ok());
  o.history = 1;
  EXPECT_FALSE(CacheView::create(o, post).ok());
  // A task that outlives its view does nothing.
  (*view)->tree();
  view->reset();
  run_queued();
}

}  // namespace
}  // namespace kvtier::server
