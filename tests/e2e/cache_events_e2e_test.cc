// GET /v1/cache/events on the real `kvtier serve`: a snapshot first, then the
// pages and chunks a request leaves in each tier; resuming with ?since= gets
// what followed without a snapshot; a number the server never gave gets a
// snapshot; bad input is a 400; an open stream never holds up shutdown.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "client/sse.h"
#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "test_http.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

std::vector<std::string> args(const std::string& disk_dir) {
  return {"--model", "tiny", "--disk-dir", disk_dir, "--device-capacity", "64MiB", "--host-capacity", "128MiB",
          "--threads", "1", "--shutdown-grace", "30"};
}

json prompt_ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  json a = json::array();
  for (size_t i = 0; i < n; ++i) a.push_back(int(3 + rng() % 200));
  return a;
}

struct SseMessage {
  uint64_t id = 0;
  std::string event;
  json data;
};

// Follows GET `path`, handing each message to `on` until it returns false, the stream ends, or
// `limit` passes (a guard against a hang, not a measurement). Returns the HTTP status (0: none).
int follow(int port, const std::string& path, const std::function<bool(const SseMessage&)>& on,
           std::chrono::seconds limit = std::chrono::seconds(120)) {
  auto c = kvtier::testing::local_client(port);
  c.set_read_timeout(limit.count(), 0);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  client::SseReader sse;
  bool more = true;
  auto r = c.Get(path, [&](const char* data, size_t n) {
    const Status st = sse.feed({data, n}, [&](const client::SseMessage& raw) {
      if (!more || raw.event.empty()) return Status::Ok();
      more = on(SseMessage{raw.id.empty() ? 0 : std::stoull(raw.id), raw.event, json::parse(raw.data)});
      return Status::Ok();
    });
    return st.ok() && more && std::chrono::steady_clock::now() < deadline;
  });
  if (r) return r->status;
  return more ? 0 : 200;  // stopped by `on`: the status was 200 (httplib reports the cancel as an error)
}

// The hashes a follower believes each tier holds.
struct Held {
  std::map<std::string, std::set<std::string>> tier;
  void apply(const SseMessage& m) {
    if (m.event == "snapshot") {
      tier.clear();
      for (auto& [t, hashes] : m.data["tiers"].items())
        for (auto& h : hashes) tier[t].insert(h.get<std::string>());
      return;
    }
    for (const json& r : m.data["events"]) {
      auto& t = tier[r["tier"].get<std::string>()];
      const std::string kind = r["kind"];
      if (kind == "cleared") t.clear();
      for (const json& h : r["hashes"]) {
        if (kind == "stored" || kind == "moved") t.insert(h.get<std::string>());
        if (kind == "removed") t.erase(h.get<std::string>());
        if (kind == "moved") tier[r["from"].get<std::string>()].erase(h.get<std::string>());
      }
    }
  }
};

TEST(CacheEventsE2E, SnapshotThenEventsThenResume) {
  TempDir dir;
  ServerProcess s;
  ASSERT_TRUE(s.start(args(dir.str()))) << s.log();
  const int port = s.port();
  // A request that leaves (1040 - 1) / 16 = 64 whole pages on the device and host, and 4 chunks of 16 on disk.
  const json request = {{"prompt", prompt_ids(1040, 7)}, {"max_tokens", 1}, {"temperature", 0}};
  Held held;
  uint64_t last = 0;
  std::thread client;
  int status = follow(port, "/v1/cache/events", [&](const SseMessage& m) {
    if (m.event == "snapshot") {
      EXPECT_EQ(m.data["seq"].get<uint64_t>(), m.id);
      EXPECT_TRUE(m.data["tiers"]["device"].empty());
      client = std::thread([&] { EXPECT_EQ(post_json(port, "/v1/completions", request).status, 200); });
    } else {
      EXPECT_EQ(m.event, "kv");
      EXPECT_GT(m.id, last);
    }
    last = m.id;
    held.apply(m);
    return !(held.tier["device"].size() >= 64 && held.tier["host"].size() >= 64 && held.tier["disk"].size() >= 4);
  });
  client.join();
  EXPECT_EQ(status, 200);
  ASSERT_GE(held.tier["device"].size(), 64u);
  ASSERT_GE(held.tier["disk"].size(), 4u);

  // What happened while away (the log lingers after its last listener left) comes after `since`,
  // with no snapshot: a flush takes everything off the device and host (the disk keeps its chunks).
  ASSERT_EQ(post_json(port, "/v1/cache/flush", json::object()).status, 200);
  status = follow(port, "/v1/cache/events?since=" + std::to_string(last), [&](const SseMessage& m) {
    EXPECT_EQ(m.event, "kv");
    held.apply(m);
    return !(held.tier["device"].empty() && held.tier["host"].empty());
  });
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(held.tier["device"].empty());
  EXPECT_GE(held.tier["disk"].size(), 4u);

  // A number this server never gave: a snapshot, which agrees with what the follower built.
  Held fresh;
  status = follow(port, "/v1/cache/events?since=999999999", [&](const SseMessage& m) {
    EXPECT_EQ(m.event, "snapshot");
    fresh.apply(m);
    return false;
  });
  EXPECT_EQ(status, 200);
  EXPECT_EQ(fresh.tier["disk"], held.tier["disk"]);
  EXPECT_TRUE(fresh.tier["device"].empty() && fresh.tier["host"].empty());

  auto c = kvtier::testing::local_client(port);
  auto bad = c.Get("/v1/cache/events?since=abc");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("since"), std::string::npos);

  // An open stream does not hold up a graceful shutdown.
  std::promise<void> connected;
  std::thread open([&] {
    bool first = true;
    (void)follow(port, "/v1/cache/events", [&](const SseMessage&) {
      if (std::exchange(first, false)) connected.set_value();
      return true;
    });
    if (first) connected.set_value();  // it never got in: the wait below must not hang (the exit check still runs)
  });
  connected.get_future().wait();
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
  open.join();
}

}  // namespace
}  // namespace kvtier::testing
