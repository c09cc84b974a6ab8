// Shared pieces of the remote tests: tier construction against a fixture
// server and waiting for a degraded tier to come back.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "redis_fixture.h"
#include "tiers/remote/remote_tier.h"
#include "tiers/tier_test_util.h"

namespace kvtier::testing {

inline std::unique_ptr<RemoteTier> make_remote(const std::string& url, const ChunkGeometry& g,
                                               void (*tweak)(RemoteTierOptions&) = nullptr) {
  auto o = RemoteTierOptions::from_url(url, g);
  EXPECT_TRUE(o.ok()) << o.status().to_string();
  if (!o.ok()) return nullptr;
  if (tweak) tweak(*o);
  auto t = RemoteTier::create(*o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Retries a put until it succeeds (the tier leaves degraded once a probe works). Liveness bound only.
inline bool wait_recovered(RemoteTier& tier, const testing_util::TestChunk& c, std::chrono::seconds limit = std::chrono::seconds(90)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!tier.degraded() && tier.put(c.key, c.hashes, c.payload).ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace kvtier::testing
