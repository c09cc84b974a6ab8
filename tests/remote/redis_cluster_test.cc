// RemoteTier against a three-master Redis Cluster started by the test:
// keys spread over every master, slots computed as Redis computes them,
// a resharded slot (MOVED) and a slot half-way through migration (ASK)
// are followed and the bytes stay exact.
#include <gtest/gtest.h>

#include <random>

#include "remote_test_util.h"
#include "tiers/remote/redis_slots.h"

namespace kvtier {
namespace {

using namespace testing_util;
using testing::RedisCluster;

// A one-page chunk whose Redis key falls in `slot` (found by trying random page hashes).
TestChunk chunk_in_slot(const RemoteTier& t, const ChunkGeometry& g, uint16_t slot, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TestChunk c;
  c.key.ns = test_ns(77);
  do {
    c.key.hash = PageHash{rng(), rng()};
  } while (redis_key_slot(t.key_of(c.key)) != slot);
  c.hashes = {c.key.hash};
  c.payload.resize(g.payload_bytes(1));
  for (auto& b : c.payload) b = static_cast<std::byte>(rng());
  return c;
}

class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new RedisCluster();
    status_ = new Status(cluster_->start());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete status_;
  }
  void SetUp() override {
    ASSERT_TRUE(status_->ok()) << status_->to_string();
    for (size_t i = 0; i < cluster_->size(); ++i) ASSERT_TRUE(cluster_->node(i).cmd({"FLUSHALL"}).ok());
    // All three seeds are given; the slot map itself is learned from CLUSTER SLOTS.
    tier = testing::make_remote(cluster_->url(), g);
    ASSERT_TRUE(tier);
    ASSERT_TRUE(tier->client().is_cluster());
  }
  static RedisCluster* cluster_;
  static Status* status_;
  ChunkGeometry g = small_geometry();
  std::unique_ptr<RemoteTier> tier;
};
RedisCluster* RedisClusterTest::cluster_ = nullptr;
Status* RedisClusterTest::status_ = nullptr;

TEST_F(RedisClusterTest, SlotsMatchTheServersAndKeysSpreadOverAllMasters) {
  EXPECT_EQ(tier->client().nodes().size(), 3u);
  auto& n0 = cluster_->node(0);
  EXPECT_EQ(*n0.cmd({"CLUSTER", "KEYSLOT", "foo"}), "12182");
  std::vector<TestChunk> chunks;
  std::vector<PutOp> puts;
  for (uint32_t i = 0; i < 48; ++i) chunks.push_back(make_chunk(g, test_ns(3), i));
  for (auto& c : chunks) {
    const std::string k = tier->key_of(c.key);
    EXPECT_EQ(*n0.cmd({"CLUSTER", "KEYSLOT", k}), std::to_string(redis_key_slot(k)));
    puts.push_back(PutOp{c.key, c.hashes, c.payload, {}});
  }
  tier->put_batch(puts);  // one pipeline per master
  for (auto& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.to_string();
  for (size_t i = 0; i < cluster_->size(); ++i) EXPECT_GT(std::stoi(*cluster_->node(i).cmd({"DBSIZE"})), 0) << "master " << i;
  std::vector<std::vector<std::byte>> bufs(chunks.size(), std::vector<std::byte>(g.max_payload_bytes()));
  std::vector<GetOp> gets;
  for (size_t i = 0; i < chunks.size(); ++i) gets.push_back(GetOp{.key = chunks[i].key, .out = bufs[i]});
  tier->get_batch(gets);
  for (size_t i = 0; i < chunks.size(); ++i) {
    ASSERT_TRUE(gets[i].status.ok()) << gets[i].status.to_string();
    EXPECT_TRUE(std::equal(chunks[i].payload.begin(), chunks[i].payload.end(), bufs[i].begin()));
  }
  std::vector<PageHash> keys;
  for (auto& c : chunks) keys.push_back(c.key.hash);
  EXPECT_EQ(tier->exists_prefix(test_ns(3), keys), chunks.size());
  EXPECT_EQ(tier->remote_stats().client.moved, 0u);
}

TEST_F(RedisClusterTest, ReshardedSlotIsFollowedThroughMoved) {
  auto c = make_chunk(g, test_ns(4), 1);
  ASSERT_TRUE(tier->put(c.key, c.hashes, c.payload).ok());
  const std::string key = tier->key_of(c.key);
  const uint16_t slot = redis_key_slot(key);
  auto from = cluster_->owner_of(slot);
  ASSERT_TRUE(from.ok()) << from.status().to_string();
  const size_t to = (*from + 1) % cluster_->size();
  ASSERT_TRUE(cluster_->move_slot(slot, *from, to).ok());
  ASSERT_EQ(*cluster_->owner_of(slot), to);
  EXPECT_EQ(*cluster_->node(to).cmd({"EXISTS", key}), "1");

  std::vector<std::byte> out(c.payload.size());
  auto r = tier->get(c.key, out);  // the old owner answers MOVED
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(out, c.payload);
  auto s = tier->remote_stats().client;
  EXPECT_GE(s.moved, 1u);
  // The map was refreshed: later calls go straight to the new owner.
  EXPECT_TRUE(tier->exists(c.key));
  ASSERT_TRUE(tier->get(c.key, out).ok());
  EXPECT_EQ(tier->remote_stats().client.moved, s.moved);
  EXPECT_GE(tier->remote_stats().client.topology_refreshes, 2u);
  EXPECT_FALSE(tier->degraded());
}

TEST_F(RedisClusterTest, MigratingSlotIsFollowedThroughAsk) {
  auto probe = make_chunk(g, test_ns(5), 1);
  const uint16_t slot = redis_key_slot(tier->key_of(probe.key));
  auto from = cluster_->owner_of(slot);
  ASSERT_TRUE(from.ok());
  const size_t to = (*from + 1) % cluster_->size();
  // Half-way: the old owner holds the slot but answers ASK for keys it does not have.
  auto old_key = chunk_in_slot(*tier, g, slot, 1);
  ASSERT_TRUE(tier->put(old_key.key, old_key.hashes, old_key.payload).ok());
  ASSERT_TRUE(cluster_->move_slot(slot, *from, to, /*finish=*/false).ok());
  auto fresh = chunk_in_slot(*tier, g, slot, 2);
  ASSERT_TRUE(tier->put(fresh.key, fresh.hashes, fresh.payload).ok());  // ASK → ASKING + SET on the importer
  EXPECT_GE(tier->remote_stats().client.ask, 1u);
  std::vector<std::byte> out(fresh.payload.size());
  ASSERT_TRUE(tier->get(fresh.key, out).ok());  // ASK again
  EXPECT_EQ(out, fresh.payload);
  ASSERT_TRUE(tier->get(old_key.key, out).ok());  // still on the old owner
  EXPECT_EQ(out, old_key.payload);
  EXPECT_EQ(tier->exists_prefix(fresh.key.ns, std::vector<PageHash>{old_key.key.hash, fresh.key.hash}), 2u);
  // Finish the move: both keys are now behind MOVED.
  ASSERT_TRUE(cluster_->finish_move(slot, *from, to).ok());
  ASSERT_TRUE(tier->get(old_key.key, out).ok());
  EXPECT_EQ(out, old_key.payload);
  ASSERT_TRUE(tier->get(fresh.key, out).ok());
  EXPECT_EQ(out, fresh.payload);
  EXPECT_GE(tier->remote_stats().client.moved, 1u);
  EXPECT_FALSE(tier->degraded());
}

// An error reply to CLUSTER SLOTS that does not say "no cluster support" (here
// NOPERM; "max number of clients reached" or LOADING alike) is asked again on
// the next command: it used to make the client standalone for good, sending
// every key to the seed node.
TEST_F(RedisClusterTest, AnErrorToClusterSlotsIsAskedAgainNotTakenForStandalone) {
  for (size_t i = 0; i < cluster_->size(); ++i)
    ASSERT_TRUE(cluster_->node(i).cmd({"ACL", "SETUSER", "default", "-cluster"}).ok());
  auto t = testing::make_remote(cluster_->url(), g);
  for (size_t i = 0; i < cluster_->size(); ++i)
    ASSERT_TRUE(cluster_->node(i).cmd({"ACL", "SETUSER", "default", "+@all"}).ok());
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->client().is_cluster());
  std::vector<RedisCommand> cmds;
  cmds.push_back(RedisCommand{{"PING"}});
  ASSERT_TRUE(t->client().run(cmds).ok());
  EXPECT_TRUE(t->client().is_cluster());
  EXPECT_EQ(t->client().nodes().size(), 3u);
}

TEST_F(RedisClusterTest, ClusterModeOnAgainstAStandaloneServerIsAConfigurationError) {
  testing::RedisServer s;
  ASSERT_TRUE(s.start().ok());
  auto o = RemoteTierOptions::from_url(s.url() + "?cluster=on", g);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(RemoteTier::create(*o).status().code(), StatusCode::kFailedPrecondition);
  auto auto_mode = testing::make_remote(s.url(), g);
  ASSERT_TRUE(auto_mode);
  EXPECT_FALSE(auto_mode->client().is_cluster());
}

}  // namespace
}  // namespace kvtier
