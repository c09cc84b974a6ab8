// The dashboard in a real browser: `kvtier serve` runs a short multi-turn
// workload, then headless Chromium loads /dashboard. The page lists its own
// script errors and failed fetches in #page-errors; there must be none, and
// the DOM must show what the JSON endpoints say: a tree with a branch per
// conversation, tier bars with their occupancy, a timeline whose lanes are
// those of the newest request. Screenshots are kept under the build folder
// (docs/DASHBOARD.md shows them). Skips when Chromium is not installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "e2e/e2e_util.h"
#include "e2e/headless_chromium.h"
#include "e2e/server_process.h"
#include "test_http.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

constexpr int kConversations = 3;
constexpr int kTurns = 3;

// Where test artefacts go: the build folder (KVTIER_BINARY is <build>/tools/kvtier).
std::string artefact(const std::string& name) {
  return (std::filesystem::path(kvtier_binary()).parent_path().parent_path() / name).string();
}

std::vector<std::string> server_args(const std::string& dir) {
  // A device pool of 16 pages: later turns find part of their prefix evicted
  // to the host and load it back, so the race has a load lane.
  return {"--model", "tiny", "--disk-dir", dir, "--device-capacity", "128KiB", "--host-capacity", "16MiB",
          "--disk-capacity", "256MiB", "--threads", "1"};
}

// Conversations sharing a system prompt, each turn the previous prompt plus more of its own history.
void run_workload(int port, const httplib::Headers& headers = {}) {
  std::vector<int> system;
  for (int i = 0; i < 96; ++i) system.push_back(3 + (i * 7) % 500);
  for (int turn = 1; turn <= kTurns; ++turn) {
    for (int c = 0; c < kConversations; ++c) {
      std::vector<int> prompt = system;
      for (int i = 0; i < 40 * turn; ++i) prompt.push_back(3 + (i * 13 + c * 101) % 500);
      const Reply r = post_json(port, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 4}, {"ignore_eos", true}}, headers);
      ASSERT_EQ(r.status, 200) << r.body.dump();
    }
  }
}

Chromium browser(const TempDir& profile) {
  Chromium b;
  b.binary = find_chromium();
  b.profile_dir = profile.str();
  return b;
}

void expect_no_page_errors(const std::string& dom) {
  const std::string errors = tag_with(dom, "id=\"page-errors\"");
  ASSERT_FALSE(errors.empty()) << dom.substr(0, 2000);
  EXPECT_EQ(attribute(errors, "data-count").value_or("?"), "0") << "the page reported errors:\n" << dom;
}

int updates(const std::string& dom) { return std::stoi(attribute(tag_with(dom, "<body"), "data-updates").value_or("0")); }

TEST(DashboardBrowser, ShowsTreeTiersAndRaceOfAMultiTurnWorkload) {
  if (find_chromium().empty()) GTEST_SKIP() << "Chromium is not installed (make deps installs the Debian package chromium)";
  TempDir dir, profile;
  ServerProcess server;
  ASSERT_TRUE(server.start(server_args(dir.str()))) << server.log();
  run_workload(server.port());
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/dashboard";
  const Chromium chromium = browser(profile);
  const auto dom = chromium.dump_dom(url);
  ASSERT_TRUE(dom.has_value()) << "chromium did not run";
  expect_no_page_errors(*dom);
  EXPECT_GE(updates(*dom), 1) << "the page never rendered a full update";

  // The tree: a branch end per conversation at least.
  const std::string tree = tag_with(*dom, "id=\"tree\"");
  EXPECT_GE(std::stoi(attribute(tree, "data-leaves").value_or("0")), kConversations) << tree;
  EXPECT_GE(int(tags_with(*dom, "data-leaf=\"1\"").size()), kConversations);

  // The tiers: device and host hold the conversations' KV.
  std::set<std::string> occupied;
  for (const std::string& row : tags_with(*dom, "class=\"tier-row\""))
    if (std::stoull(attribute(row, "data-used-bytes").value_or("0")) > 0) occupied.insert(attribute(row, "data-tier").value_or(""));
  EXPECT_TRUE(occupied.count("device")) << "no device occupancy shown";
  EXPECT_TRUE(occupied.count("host")) << "no host occupancy shown";

  // The race: the page shows the newest request, with the lanes /v1/requests/recent gives it.
  const Reply recent = get_json(server.port(), "/v1/requests/recent?limit=1");
  ASSERT_EQ(recent.status, 200);
  const json& newest = recent.body["requests"][0];
  EXPECT_EQ(attribute(tag_with(*dom, "id=\"timeline\""), "data-request-id").value_or(""), std::to_string(newest["id"].get<int>()));
  std::map<std::string, int> expected;
  for (const json& load : newest["race"]["loads"]) expected["load-" + load["tier"].get<std::string>()] = int(load["arrival_s"].size());
  int layers = 0;
  for (const json& pass : newest["race"]["compute"]) layers += int(pass["layers"].size());
  expected["compute"] = layers;
  EXPECT_TRUE(expected.count("load-host")) << "the workload should make the newest request load from the host: " << newest.dump();
  std::map<std::string, int> shown;
  for (const std::string& lane : tags_with(*dom, "class=\"lane\""))
    shown[attribute(lane, "data-lane").value_or("")] = std::stoi(attribute(lane, "data-layers").value_or("-1"));
  EXPECT_EQ(shown, expected);

  Chromium tall = chromium;
  tall.window_height = 1250;
  EXPECT_TRUE(tall.screenshot(url, artefact("dashboard.png")));
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(), 0) << server.log();
}

TEST(DashboardBrowser, PageIsPublicDataNeedsTheKeyWhichThePageAsksForOnce) {
  TempDir dir, profile;
  ServerProcess server;
  auto args = server_args(dir.str());
  args.insert(args.end(), {"--api-key", "sesame-0123456789"});
  ASSERT_TRUE(server.start(args)) << server.log();
  const httplib::Headers key = {{"Authorization", "Bearer sesame-0123456789"}};
  run_workload(server.port(), key);
  auto c = kvtier::testing::local_client(server.port());
  auto page = c.Get("/dashboard");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  for (const char* path : {"/v1/cache/tree", "/v1/cache/tiers", "/v1/requests/recent"}) {
    EXPECT_EQ(c.Get(path)->status, 401) << path;
    EXPECT_EQ(c.Get(path, key)->status, 200) << path;
  }
  EXPECT_EQ(c.Get("/v1/cache/tree?max_nodes=0", key)->status, 400);
  EXPECT_EQ(c.Get("/v1/cache/tree?max_nodes=20001", key)->status, 400);

  if (find_chromium().empty()) GTEST_SKIP() << "Chromium is not installed (make deps installs the Debian package chromium)";
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/dashboard";
  const Chromium chromium = browser(profile);
  // Without the key the page asks for it (and does not count the 401s as errors).
  const auto asking = chromium.dump_dom(url);
  ASSERT_TRUE(asking.has_value());
  expect_no_page_errors(*asking);
  EXPECT_FALSE(attribute(tag_with(*asking, "id=\"key-form\""), "hidden").has_value()) << "the key form is not shown";
  EXPECT_EQ(updates(*asking), 0);
  EXPECT_TRUE(chromium.screenshot(url, artefact("dashboard-asks-for-key.png")));
  // Given the key (here in the fragment, which never reaches the server), it sends it and draws.
  const auto keyed = chromium.dump_dom(url + "#key=sesame-0123456789");
  ASSERT_TRUE(keyed.has_value());
  expect_no_page_errors(*keyed);
  EXPECT_GE(updates(*keyed), 1);
  EXPECT_TRUE(attribute(tag_with(*keyed, "id=\"key-form\""), "hidden").has_value());
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(), 0) << server.log();
}

}  // namespace
}  // namespace kvtier::testing
