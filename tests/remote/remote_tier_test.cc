// RemoteTier against a real redis-server started by the test: the tier
// conformance cases (as tests/tiers/tier_conformance_test.cc, minus the
// capacity cases that belong to Redis's maxmemory), URL parsing, key slots,
// corrupt and foreign values, TTL, OOM, eviction, and failure handling.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "remote_test_util.h"
#include <hiredis/hiredis.h>

#include "tiers/remote/redis_slots.h"
#include "tiers/remote/redis_wire.h"

namespace kvtier {
namespace {

using namespace testing_util;
using testing::make_remote;
using testing::RedisServer;
using testing::wait_recovered;

// ---------------------------------------------------------- pure parts ----

TEST(RedisSlots, Crc16AndKeySlotsMatchRedis) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(crc16_xmodem(""), 0);
  EXPECT_EQ(redis_key_slot("foo"), 12182);
  EXPECT_EQ(redis_key_slot("bar"), 5061);
  EXPECT_EQ(redis_key_slot("123456789"), 0x31C3 & 16383);
  // Hash tags: the first non-empty {...} decides.
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("{user1000}.followers"));
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("foo{}{bar}"), crc16_xmodem("foo{}{bar}") & 16383);  // empty first tag: whole key
  EXPECT_EQ(redis_key_slot("foo{{bar}}zap"), redis_key_slot("{bar"));
  EXPECT_EQ(redis_key_slot("foo{bar}{zap}"), redis_key_slot("bar"));
}

TEST(RemoteUrl, ParsesHostsCredentialsAndOptions) {
  const ChunkGeometry g = small_geometry();
  auto o = RemoteTierOptions::from_url(
      "redis://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001/?timeout_ms=250&connect_timeout_ms=100&ttl_s=3600&pool=8"
      "&cluster=on&range_reads=0&backoff_ms=10&backoff_max_ms=2000&call_timeout_ms=7000",
      g);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_EQ(o->redis.seeds.size(), 2u);
  EXPECT_EQ(o->redis.seeds[1].to_string(), "10.0.0.2:7001");
  EXPECT_EQ(o->redis.username, "app");
  EXPECT_EQ(o->redis.password, "s@cret");
  EXPECT_EQ(o->redis.command_timeout.count(), 250);
  EXPECT_EQ(o->redis.connect_timeout.count(), 100);
  EXPECT_EQ(o->redis.call_timeout.count(), 7000);
  EXPECT_EQ(o->ttl.count(), 3600 * 1000);
  EXPECT_EQ(o->redis.pool_size, 8u);
  EXPECT_EQ(o->redis.cluster, RedisClusterMode::kOn);
  EXPECT_FALSE(o->range_reads);
  EXPECT_EQ(o->backoff_initial.count(), 10);

  auto p = RemoteTierOptions::from_url("redis://pw@[::1]:6379", g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->redis.password, "pw");
  EXPECT_EQ(p->redis.seeds[0].host, "::1");
  EXPECT_EQ(p->redis.cluster, RedisClusterMode::kAuto);

  for (const char* bad : {"http://h:1", "redis://", "redis://host", "redis://host:0", "redis://host:70000",
                          "redis://h:1?pool=0", "redis://h:1?ttl_s=x", "redis://h:1?bogus=1", "redis://h:1?cluster=maybe",
                          "redis://h:1/3", "redis://h:1?timeout_ms=0", "redis://h:1?call_timeout_ms=0", "redis://h:1,", "redis://%zz@h:1"})
    EXPECT_EQ(RemoteTierOptions::from_url(bad, g).status().code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ(RemoteTierOptions::from_url("rediss://h:1", g).status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(RemoteTierOptions::from_url("redis://h:1?tls=1", g).status().code(), StatusCode::kUnimplemented);
  // The parser refuses '/' and '?' in it without printing any of it.
  for (const char* url : {"redis://u:Pa?ss123@h:1", "redis://u:Pa/ss123@h:1"}) {
    auto o = RemoteTierOptions::from_url(url, g);
    ASSERT_FALSE(o.ok()) << url;
    EXPECT_EQ(o.status().message().find("Pa"), std::string::npos) << o.status().message();
    EXPECT_EQ(o.status().message().find("ss123"), std::string::npos) << o.status().message();
  }
  auto hash = RemoteTierOptions::from_url("redis://u:Pa%23ss@h:1", g);
  ASSERT_TRUE(hash.ok()) << hash.status().to_string();
  EXPECT_EQ(hash->redis.password, "Pa#ss");
}

// ------------------------------------------------------- with a server ----

class RemoteTierTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new RedisServer();
    start_status_ = new Status(server_->start());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete start_status_;
  }
  void SetUp() override {
    ASSERT_TRUE(start_status_->ok()) << start_status_->to_string();
    ASSERT_TRUE(server_->cmd({"FLUSHALL"}).ok());
  }
  std::unique_ptr<RemoteTier> tier(void (*tweak)(RemoteTierOptions&) = nullptr) {
    return make_remote(server_->url() + "?timeout_ms=2000", g, tweak);
  }
  static RedisServer* server_;
  static Status* start_status_;
  ChunkGeometry g = small_geometry();
};
RedisServer* RemoteTierTest::server_ = nullptr;
Status* RemoteTierTest::start_status_ = nullptr;

void whole_reads(RemoteTierOptions& o) { o.range_reads = false; }

TEST_F(RemoteTierTest, RoundTripIsBitExactWholeAndLayerRanges) {
  for (bool ranges : {true, false}) {
    auto t = ranges ? tier() : tier(whole_reads);
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->degraded());
    std::vector<TestChunk> chunks;
    for (uint32_t i = 0; i < 6; ++i) chunks.push_back(make_chunk(g, test_ns(1), i, 1 + i % g.chunk_pages));
    std::vector<PutOp> puts;
    for (auto& c : chunks) puts.push_back(PutOp{c.key, c.hashes, c.payload, {}});
    t->put_batch(puts);
    for (auto& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.to_string();
    for (auto& c : chunks) {
      std::vector<std::byte> out(c.payload.size());
      auto n = t->get(c.key, out);
      ASSERT_TRUE(n.ok()) << n.status().to_string();
      EXPECT_EQ(*n, c.hashes.size());
      EXPECT_EQ(out, c.payload);
      const size_t lb = g.layer_bytes(*n);
      for (uint32_t first = 0; first < g.kv.num_layers; ++first) {
        std::vector<std::byte> part(lb);
        auto r = t->get_layers(c.key, first, 1, part);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_TRUE(std::equal(part.begin(), part.end(), c.payload.begin() + first * lb)) << first;
      }
      std::vector<std::byte> tail(2 * lb);
      ASSERT_TRUE(t->get_layers(c.key, 2, kAllLayers, tail).ok());
      EXPECT_TRUE(std::equal(tail.begin(), tail.end(), c.payload.begin() + 2 * lb));
    }
    auto missing = make_chunk(g, test_ns(1), 99);
    std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(g.max_payload_bytes()));
    std::vector<GetOp> ops{{chunks[0].key, 0, kAllLayers, bufs[0]}, {missing.key, 0, kAllLayers, bufs[1]},
                           {chunks[5].key, 3, 1, bufs[2]}};
    t->get_batch(ops);
    EXPECT_TRUE(ops[0].status.ok());
    EXPECT_EQ(ops[1].status.code(), StatusCode::kNotFound);
    EXPECT_TRUE(ops[2].status.ok());
    EXPECT_EQ(ops[2].num_layers, 1u);
    auto st = t->stats();
    EXPECT_GE(st.hits, 8u);
    EXPECT_GE(st.misses, 1u);
    EXPECT_EQ(st.puts, 6u);
    EXPECT_EQ(st.checksum_failures, 0u);
    EXPECT_FALSE(t->degraded());
    ASSERT_TRUE(server_->cmd({"FLUSHALL"}).ok());
  }
}

// A prompt's tail is a short chunk (KVCache::store_down). Read by layers with
// its length expected (GetOp::expect_pages, as the transfer engine asks), its
// layers come from one round of ranged reads; guessed as a whole chunk, every
// layer's read fell back to a GET of the whole value. A chunk longer than
// expected costs a second round, as the Tier contract says: its metadata, read
// for the expected length, was cut short, taken for corruption and deleted.
TEST_F(RemoteTierTest, AChunkReadByLayersTakesOneRoundWhenItsLengthIsExpected) {
  auto t = tier();
  ASSERT_TRUE(t);
  struct Case {
    uint32_t pages, expect;
  };
  for (const Case k : {Case{2, 2}, Case{2, 0}, Case{4, 2}}) {
    SCOPED_TRACE(std::to_string(k.pages) + " pages, " + std::to_string(k.expect) + " expected");
    const auto c = make_chunk(g, test_ns(1), k.pages, k.pages);
    ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
    const size_t lb = g.layer_bytes(k.pages);
    ASSERT_TRUE(server_->cmd({"CONFIG", "RESETSTAT"}).ok());
    std::vector<std::byte> part(lb);
    std::vector<GetOp> ops{{c.key, 1, 1, part, {}, 0, KvCodec::kNone, k.expect}};
    t->get_batch(ops);
    ASSERT_TRUE(ops[0].status.ok()) << ops[0].status.to_string();
    EXPECT_EQ(ops[0].num_pages, k.pages);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), c.payload.begin() + lb));
    auto info = server_->cmd({"INFO", "commandstats"});
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->find("cmdstat_get:") == std::string::npos, k.expect == k.pages) << *info;
    EXPECT_TRUE(t->exists(c.key));
  }
  EXPECT_EQ(t->stats().checksum_failures, 0u);
}

TEST_F(RemoteTierTest, KeysFollowTheDocumentedScheme) {
  auto t = tier();
  ASSERT_TRUE(t);
  auto c = make_chunk(g, test_ns(1), 1);
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  const std::string key = t->key_of(c.key);
  std::string tail = c.key.ns.to_hex();
  tail.insert(tail.begin(), ':');
  tail += ':';
  tail += c.key.hash.to_hex();
  ASSERT_EQ(key.size(), std::string("kvtier:1:").size() + 16 + tail.size()) << key;
  EXPECT_TRUE(key.starts_with("kvtier:1:")) << key;
  EXPECT_TRUE(key.ends_with(tail)) << key;
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef", 9), 9u + 16u) << key;  // the layout: 16 hex digits
  EXPECT_EQ(*server_->cmd({"EXISTS", key}), "1");
  // The value is exactly the packed entry (align=1).
  EXPECT_EQ(*server_->cmd({"STRLEN", key}), std::to_string(chunk_entry_layout(g, g.chunk_pages, 1).entry_bytes));
}

// Instances of one model whose KV differs (its element type, the chunk size) use different keys: sharing them, each read the other's entries as corrupt (another
// geometry), deleted them and counted checksum failures.
TEST_F(RemoteTierTest, TiersOfAnotherLayoutNeitherSeeNorDeleteTheEntries) {
  auto t = tier();
  ASSERT_TRUE(t);
  auto c = make_chunk(g, test_ns(1), 1);
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  ChunkGeometry f16 = g;
  f16.kv.dtype = DType::kF16;
  ChunkGeometry half_chunks = g;
  half_chunks.chunk_pages = g.chunk_pages / 2;
  for (const ChunkGeometry& other : {f16, half_chunks}) {
    auto o = make_remote(server_->url(), other);
    ASSERT_TRUE(o);
    EXPECT_NE(o->key_of(c.key), t->key_of(c.key));
    EXPECT_FALSE(o->exists(c.key));
    std::vector<std::byte> out(other.max_payload_bytes());
    EXPECT_EQ(o->get(c.key, out).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(o->stats().checksum_failures, 0u);
  }
  EXPECT_TRUE(t->exists(c.key));  // still there for its own layout
}

TEST_F(RemoteTierTest, ExistsPrefixAndNamespacesDoNotMix) {
  auto t = tier();
  ASSERT_TRUE(t);
  std::vector<TestChunk> a;
  for (uint32_t i = 0; i < 4; ++i) a.push_back(make_chunk(g, test_ns(1), i));
  for (uint32_t i : {0u, 1u, 3u}) ASSERT_TRUE(t->put(a[i].key, a[i].hashes, a[i].payload).ok());
  std::vector<PageHash> keys;
  for (auto& c : a) keys.push_back(c.key.hash);
  EXPECT_EQ(t->exists_prefix(test_ns(1), keys), 2u);
  EXPECT_EQ(t->exists_prefix(test_ns(1), {}), 0u);
  EXPECT_TRUE(t->exists(a[3].key));
  EXPECT_FALSE(t->exists(a[2].key));
  // The first present of candidates asked longest first (a prompt's tails), in one round trip.
  EXPECT_EQ(t->exists_first(test_ns(1), std::vector<PageHash>{a[2].key.hash, a[3].key.hash, a[0].key.hash}), 1u);
  EXPECT_EQ(t->exists_first(test_ns(1), std::vector<PageHash>{a[2].key.hash}), 1u);  // none: the size
  EXPECT_EQ(t->exists_first(test_ns(2), keys), keys.size());
  EXPECT_EQ(t->exists_prefix(test_ns(2), keys), 0u);
  std::vector<std::byte> out(a[0].payload.size());
  EXPECT_EQ(t->get(ChunkKey{test_ns(2), a[0].key.hash}, out).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(t->erase(a[0].key).ok());
  ASSERT_TRUE(t->erase(a[0].key).ok());  // absent: still OK
  EXPECT_EQ(t->exists_prefix(test_ns(1), keys), 0u);
  // A long prompt: 200 chunks in one round trip.
  std::vector<PageHash> many;
  std::vector<PutOp> puts;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 200; ++i) chunks.push_back(make_chunk(g, test_ns(5), i, 1));
  for (auto& c : chunks) {
    puts.push_back(PutOp{c.key, c.hashes, c.payload, {}});
    many.push_back(c.key.hash);
  }
  t->put_batch(std::span(puts).first(150));
  EXPECT_EQ(t->exists_prefix(test_ns(5), many), 150u);
}

TEST_F(RemoteTierTest, RejectsMalformedOps) {
  auto t = tier();
  ASSERT_TRUE(t);
  auto c = make_chunk(g, test_ns(1), 1);
  std::vector<std::byte> short_payload(c.payload.size() - 1);
  EXPECT_EQ(t->put(c.key, c.hashes, short_payload).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->put(ChunkKey{c.key.ns, c.hashes.front()}, c.hashes, c.payload).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());  // idempotent
  std::vector<std::byte> small(10);
  EXPECT_EQ(t->get(c.key, small).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> out(c.payload.size());
  EXPECT_EQ(t->get_layers(c.key, 4, 1, out).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t->get_layers(c.key, 2, 3, out).status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(t->degraded());
}

TEST_F(RemoteTierTest, ConcurrentPutsAndGetsStayExact) {
  auto t = tier([](RemoteTierOptions& o) { o.redis.pool_size = 3; });  // fewer sessions than threads: callers wait
  ASSERT_TRUE(t);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      std::vector<std::byte> out(g.max_payload_bytes());
      for (uint32_t i = 0; i < 20; ++i) {
        auto c = make_chunk(g, test_ns(10 + k), i);
        if (!t->put(c.key, c.hashes, c.payload).ok()) ++bad;
        auto back = make_chunk(g, test_ns(10 + k), i / 2);
        auto r = t->get(back.key, out);
        if (!r.ok() || !std::equal(back.payload.begin(), back.payload.end(), out.begin())) ++bad;
        if (t->exists_prefix(test_ns(10 + k), {&c.key.hash, 1}) != 1) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(t->remote_stats().client.connects, 3u);
}

TEST_F(RemoteTierTest, TtlIsSetAndRefreshedOnHit) {
  auto t = make_remote(server_->url() + "?ttl_s=600", g);
  ASSERT_TRUE(t);
  auto c = make_chunk(g, test_ns(1), 1);
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  const std::string key = t->key_of(c.key);
  auto ttl = std::stoll(*server_->cmd({"PTTL", key}));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 600000);
  ASSERT_TRUE(server_->cmd({"PEXPIRE", key, "100000"}).ok());
  std::vector<std::byte> out(c.payload.size());
  ASSERT_TRUE(t->get(c.key, out).ok());
  EXPECT_GT(std::stoll(*server_->cmd({"PTTL", key})), 100000);  // the hit pushed it back to 600 s
  auto no_ttl = tier();
  auto d = make_chunk(g, test_ns(1), 2);
  ASSERT_TRUE(no_ttl->put(d.key, d.hashes, d.payload).ok());
  EXPECT_EQ(*server_->cmd({"PTTL", no_ttl->key_of(d.key)}), "-1");
}

// Every way a value can be wrong is kCorruption, counted, deleted, and never served.
TEST_F(RemoteTierTest, CorruptOrForeignValuesAreNeverServed) {
  for (bool ranges : {true, false}) {
    auto t = ranges ? tier() : tier(whole_reads);
    ASSERT_TRUE(t);
    auto c = make_chunk(g, test_ns(7), 1);
    auto other = make_chunk(g, test_ns(7), 2);
    const std::string key = t->key_of(c.key);
    const auto lay = chunk_entry_layout(g, g.chunk_pages, 1);
    const size_t lb = g.layer_bytes(g.chunk_pages);
    struct Damage {
      const char* what;
      std::function<void()> apply;
    };
    std::vector<Damage> damages{
        {"payload byte of layer 2", [&] { ASSERT_TRUE(server_->cmd({"SETRANGE", key, std::to_string(lay.payload_offset + 2 * lb + 5), "X"}).ok()); }},
        {"header byte", [&] { ASSERT_TRUE(server_->cmd({"SETRANGE", key, "20", "Z"}).ok()); }},
        {"layer checksum", [&] { ASSERT_TRUE(server_->cmd({"SETRANGE", key, std::to_string(lay.meta_bytes - 3), "Q"}).ok()); }},
        {"garbage", [&] { ASSERT_TRUE(server_->cmd({"SET", key, "not a kvtier entry at all"}).ok()); }},
        {"truncated", [&] { ASSERT_TRUE(server_->cmd({"SET", key, std::string(lay.meta_bytes + 10, 'x')}).ok()); }},
        {"wrong type", [&] {
           ASSERT_TRUE(server_->cmd({"DEL", key}).ok());
           ASSERT_TRUE(server_->cmd({"LPUSH", key, "x"}).ok());
         }},
        {"another chunk's entry", [&] {
           ASSERT_TRUE(t->put(other.key, other.hashes, other.payload).ok());
           ASSERT_TRUE(server_->cmd({"COPY", t->key_of(other.key), key, "REPLACE"}).ok());
         }},
    };
    uint64_t failures = 0;
    for (auto& d : damages) {
      SCOPED_TRACE(std::string(d.what) + (ranges ? " (range reads)" : " (whole reads)"));
      ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
      d.apply();
      std::vector<std::byte> out(c.payload.size());
      // Whole chunk, then (damaged again) layers 2..3 only.
      auto r = t->get(c.key, out);
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().to_string();
      EXPECT_EQ(*server_->cmd({"EXISTS", key}), "0") << "a corrupt value must be deleted";
      EXPECT_EQ(t->stats().checksum_failures, ++failures);
      ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
      d.apply();
      std::vector<std::byte> part(2 * lb);
      auto p = t->get_layers(c.key, 2, 2, part);
      if (std::string(d.what) == "header byte" || std::string(d.what) == "payload byte of layer 2" ||
          std::string(d.what) == "layer checksum" || std::string(d.what) == "garbage" ||
          std::string(d.what) == "wrong type" || std::string(d.what) == "another chunk's entry" || !ranges) {
        EXPECT_EQ(p.status().code(), StatusCode::kCorruption) << p.status().to_string();
      } else {
        EXPECT_FALSE(p.ok());  // truncated: a range read sees the metadata fail or the layers missing
      }
      if (!p.ok()) ++failures;
      EXPECT_FALSE(t->degraded()) << "bad data is not a connectivity failure";
    }
    // Intact again: served.
    ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
    std::vector<std::byte> out(c.payload.size());
    ASSERT_TRUE(t->get(c.key, out).ok());
    EXPECT_EQ(out, c.payload);
    ASSERT_TRUE(server_->cmd({"FLUSHALL"}).ok());
  }
}

// A read the server refuses (here NOPERM: the ACL takes GET and GETRANGE away;
// LOADING while it restarts is the same) is unavailable, not corrupt: the
// entry is neither counted as a checksum failure nor deleted, and is served
// again once reads are allowed.
TEST_F(RemoteTierTest, RefusedReadsAreUnavailableAndKeepTheEntry) {
  for (bool ranges : {true, false}) {
    SCOPED_TRACE(ranges ? "range reads" : "whole reads");
    auto t = ranges ? tier() : tier(whole_reads);
    ASSERT_TRUE(t);
    auto c = make_chunk(g, test_ns(8), 1);
    ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
    ASSERT_TRUE(server_->cmd({"ACL", "SETUSER", "default", "-get", "-getrange"}).ok());
    std::vector<std::byte> out(c.payload.size());
    auto r = t->get(c.key, out);
    ASSERT_TRUE(server_->cmd({"ACL", "SETUSER", "default", "+@all"}).ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
    EXPECT_NE(r.status().message().find("NOPERM"), std::string::npos) << r.status().to_string();
    EXPECT_EQ(t->stats().checksum_failures, 0u);
    EXPECT_EQ(*server_->cmd({"EXISTS", t->key_of(c.key)}), "1") << "a refused read must not delete the entry";
    auto t2 = ranges ? tier() : tier(whole_reads);  // a fresh tier: no backoff from the refusal
    ASSERT_TRUE(t2->get(c.key, out).ok());
    EXPECT_EQ(out, c.payload);
    ASSERT_TRUE(server_->cmd({"FLUSHALL"}).ok());
  }
}

TEST_F(RemoteTierTest, ServerKilledMidRunFailsWithStatusThenRecovers) {
  auto t = tier([](RemoteTierOptions& o) {
    o.backoff_initial = std::chrono::milliseconds(20);
    o.backoff_max = std::chrono::milliseconds(200);
    o.redis.command_timeout = std::chrono::milliseconds(500);
  });
  ASSERT_TRUE(t);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ok_ops{0}, failed_ops{0}, wrong{0};
  // A writer/reader that keeps going through the crash: every op either works or returns a Status.
  std::thread worker([&] {
    std::vector<std::byte> out(g.max_payload_bytes());
    for (uint32_t i = 0; !stop.load(); ++i) {
      auto c = make_chunk(g, test_ns(20), i % 64);
      Status s = t->put(c.key, c.hashes, c.payload);
      auto r = t->get(c.key, out);
      (s.ok() ? ok_ops : failed_ops)++;
      if (r.ok()) {
        if (!std::equal(c.payload.begin(), c.payload.end(), out.begin())) ++wrong;
      } else if (r.status().code() != StatusCode::kUnavailable && r.status().code() != StatusCode::kNotFound) {
        ++wrong;
      }
    }
  });
  while (ok_ops.load() < 20) std::this_thread::yield();
  server_->kill();
  const uint64_t failed_before = failed_ops.load();
  while (failed_ops.load() < failed_before + 20) std::this_thread::yield();
  // Down: every call fails fast with a Status; lookups see nothing.
  auto c = make_chunk(g, test_ns(21), 1);
  EXPECT_EQ(t->put(c.key, c.hashes, c.payload).code(), StatusCode::kUnavailable);
  EXPECT_EQ(t->exists_prefix(c.key.ns, {&c.key.hash, 1}), 0u);
  std::vector<std::byte> out(c.payload.size());
  EXPECT_EQ(t->get(c.key, out).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(t->degraded() || t->stats().fast_fails > 0);
  ASSERT_TRUE(server_->restart().ok());
  EXPECT_TRUE(wait_recovered(*t, c)) << "the tier did not recover after Redis came back";
  stop = true;
  worker.join();
  EXPECT_EQ(wrong.load(), 0u);
  ASSERT_TRUE(t->get(c.key, out).ok());
  EXPECT_EQ(out, c.payload);
  EXPECT_FALSE(t->degraded());
  const auto rs = t->remote_stats();
  EXPECT_GT(t->stats().io_errors, 0u);
  EXPECT_GE(t->stats().degraded_episodes, 1u);
  EXPECT_GT(rs.client.transport_errors + rs.client.connect_failures, 0u);
  EXPECT_GE(rs.client.connects, 2u);  // it reconnected
}

TEST_F(RemoteTierTest, HungServerTimesOutAndRecovers) {
  auto t = tier([](RemoteTierOptions& o) {
    o.backoff_initial = std::chrono::milliseconds(10);
    o.backoff_max = std::chrono::milliseconds(50);
    o.redis.command_timeout = std::chrono::milliseconds(200);
  });
  ASSERT_TRUE(t);
  auto c = make_chunk(g, test_ns(30), 1);
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  server_->pause();
  std::vector<std::byte> out(c.payload.size());
  auto r = t->get(c.key, out);
  server_->resume();
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  EXPECT_GE(t->remote_stats().client.timeouts, 1u);
  EXPECT_TRUE(wait_recovered(*t, c));
  ASSERT_TRUE(t->get(c.key, out).ok());
  EXPECT_EQ(out, c.payload);
}

TEST(RemoteTierLifecycle, StartsDegradedWithoutServerAndRecoversWhenItAppears) {
  RedisServer probe;  // reserve a directory and a free port, then stop so nothing listens there
  ASSERT_TRUE(probe.start().ok());
  const uint16_t port = probe.port();
  probe.kill();
  const ChunkGeometry g = small_geometry();
  auto t = make_remote("redis://127.0.0.1:" + std::to_string(port) + "?backoff_ms=20&backoff_max_ms=100", g);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->degraded());
  auto c = make_chunk(g, test_ns(1), 1);
  EXPECT_EQ(t->exists_prefix(c.key.ns, {&c.key.hash, 1}), 0u);
  ASSERT_TRUE(probe.restart().ok());
  EXPECT_TRUE(wait_recovered(*t, c));
  EXPECT_TRUE(t->exists(c.key));
}

// While the tier is unreachable the serving calls never touch the network: its prober thread
// PINGs once per backoff window, and the windows are read from the tier's clock (a ManualClock
// decides, however slow the machine). The calls failed fast only until a window ended; then each
// call was the probe, and a hung server held the engine's thread for a timeout per window.
TEST(RemoteTierLifecycle, OnlyTheProberProbesAtTheWindowsOfTheClock) {
  RedisServer server;  // a port where nothing listens, until the server restarts
  ASSERT_TRUE(server.start().ok());
  server.kill();
  const ChunkGeometry g = small_geometry();
  ManualClock clock;
  auto o = RemoteTierOptions::from_url(server.url() + "?backoff_ms=100&backoff_max_ms=400&connect_timeout_ms=500", g);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  o->clock = &clock;
  auto t = RemoteTier::create(*o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  RemoteTier& tier = **t;
  const auto tries = [&] { return tier.remote_stats().client.connect_failures; };
  const auto wait_for_tries = [&](uint64_t n) {
    for (int i = 0; i < 6000 && tries() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return tries();
  };
  EXPECT_TRUE(tier.degraded());  // the first connect failed
  EXPECT_FALSE(tier.readable());
  EXPECT_EQ(tries(), 1u);
  auto c = make_chunk(g, test_ns(3), 1);
  clock.advance(std::chrono::milliseconds(401));  // past every window: a call still does not probe
  EXPECT_EQ(tier.put(c.key, c.hashes, c.payload).code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier.exists_prefix(c.key.ns, {&c.key.hash, 1}), 0u);
  EXPECT_GE(tier.stats().fast_fails, 2u);
  EXPECT_EQ(wait_for_tries(2), 2u);  // the prober's try, the window being over
  EXPECT_TRUE(tier.degraded());
  clock.advance(std::chrono::milliseconds(199));  // the second window is twice the first
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(tries(), 2u);
  clock.advance(std::chrono::milliseconds(2));
  EXPECT_EQ(wait_for_tries(3), 3u);
  ASSERT_TRUE(server.restart().ok());
  clock.advance(std::chrono::milliseconds(400));
  for (int i = 0; i < 6000 && tier.degraded(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(tier.degraded()) << "the prober's PING should have found the server back";
  EXPECT_TRUE(tier.put(c.key, c.hashes, c.payload).ok());
  EXPECT_EQ(tier.stats().degraded_episodes, 1u);
}

// A Redis out of memory (maxmemory with noeviction) refuses writes, not reads: the tier stops
// writing for a backoff window and keeps serving what the server holds. An OOM made the whole
// tier degraded, lookups returned nothing, and the shared cache stopped serving too.
TEST(RemoteTierLifecycle, AnOomPausesWritesAndKeepsServingReads) {
  const ChunkGeometry g = small_geometry(16);  // 32 KiB entries
  RedisServer s;
  ASSERT_TRUE(s.start({"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}).ok());
  ManualClock clock;
  auto o = RemoteTierOptions::from_url(s.url() + "?backoff_ms=100&backoff_max_ms=400", g);
  ASSERT_TRUE(o.ok());
  o->clock = &clock;
  auto t = RemoteTier::create(*o);
  ASSERT_TRUE(t.ok());
  RemoteTier& tier = **t;
  std::vector<TestChunk> stored;
  Status last;
  for (uint32_t i = 0; i < 200 && last.ok(); ++i) {
    auto c = make_chunk(g, test_ns(42), i);
    last = tier.put(c.key, c.hashes, c.payload);
    if (last.ok()) stored.push_back(std::move(c));
  }
  ASSERT_EQ(last.code(), StatusCode::kNoSpace) << last.to_string();
  ASSERT_FALSE(stored.empty());
  EXPECT_TRUE(tier.degraded()) << "callers store nothing more here for now";
  EXPECT_TRUE(tier.readable());
  EXPECT_EQ(tier.stats().degraded_episodes, 1u);
  std::vector<std::byte> out(g.max_payload_bytes());
  for (const auto& c : stored) {
    ASSERT_TRUE(tier.get(c.key, out).ok());
    EXPECT_TRUE(std::equal(c.payload.begin(), c.payload.end(), out.begin()));
  }
  std::vector<PageHash> keys;
  for (const auto& c : stored) keys.push_back(c.key.hash);
  EXPECT_EQ(tier.exists_prefix(stored[0].key.ns, keys), stored.size());
  auto more = make_chunk(g, test_ns(42), 999);
  const uint64_t ooms = tier.remote_stats().oom_errors;
  EXPECT_EQ(tier.put(more.key, more.hashes, more.payload).code(), StatusCode::kNoSpace);
  EXPECT_EQ(tier.remote_stats().oom_errors, ooms) << "refused without asking Redis, within the window";
  clock.advance(std::chrono::milliseconds(101));
  EXPECT_FALSE(tier.degraded());  // the window is over: the next SET asks again
  EXPECT_EQ(tier.put(more.key, more.hashes, more.payload).code(), StatusCode::kNoSpace);
  EXPECT_EQ(tier.remote_stats().oom_errors, ooms + 1);
}

// Standalone fallbacks: when the server in use dies, the tier moves to the next one given
// (docs/REMOTE.md). The address learned at the start was never asked for again: every call went
// back to the dead server until a restart of kvtier.
TEST(RemoteTierLifecycle, FailsOverToTheNextStandaloneServerWhenOneDies) {
  RedisServer first, second;
  ASSERT_TRUE(first.start().ok());
  ASSERT_TRUE(second.start().ok());
  const ChunkGeometry g = small_geometry();
  auto t = make_remote("redis://" + first.address() + "," + second.address() + "?cluster=off&backoff_ms=20&backoff_max_ms=100", g);
  ASSERT_TRUE(t);
  auto c = make_chunk(g, test_ns(1), 1);
  ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  first.kill();
  auto d = make_chunk(g, test_ns(1), 2);
  EXPECT_TRUE(wait_recovered(*t, d)) << "the tier stayed on the dead server";
  std::vector<std::byte> out(d.payload.size());
  ASSERT_TRUE(t->get(d.key, out).ok());
  EXPECT_EQ(out, d.payload);
  EXPECT_FALSE(t->exists(c.key));  // it was on the first server only
}

TEST(RemoteTierLifecycle, AuthIsSentAndAWrongPasswordDegrades) {
  RedisServer s;
  ASSERT_TRUE(s.start({"--requirepass", "hunter2"}).ok());
  const ChunkGeometry g = small_geometry();
  auto good = make_remote("redis://hunter2@" + s.address(), g);
  ASSERT_TRUE(good);
  auto c = make_chunk(g, test_ns(1), 1);
  ASSERT_TRUE(good->put(c.key, c.hashes, c.payload).ok());
  EXPECT_TRUE(good->exists(c.key));
  auto bad = make_remote("redis://wrong@" + s.address(), g);
  ASSERT_TRUE(bad);
  EXPECT_TRUE(bad->degraded());
  EXPECT_FALSE(bad->exists(c.key));
}

TEST(RemoteTierLifecycle, OomRepliesAreNoSpaceAndEvictionNeverServesWrongBytes) {
  const ChunkGeometry g = small_geometry(16);  // 32 KiB entries
  {
    RedisServer s;
    ASSERT_TRUE(s.start({"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}).ok());
    auto t = make_remote(s.url() + "?backoff_ms=10&backoff_max_ms=20", g);
    ASSERT_TRUE(t);
    Status last;
    for (uint32_t i = 0; i < 200 && last.ok(); ++i) {
      auto c = make_chunk(g, test_ns(40), i);
      last = t->put(c.key, c.hashes, c.payload);
    }
    EXPECT_EQ(last.code(), StatusCode::kNoSpace) << last.to_string();
    EXPECT_GE(t->remote_stats().oom_errors, 1u);
    EXPECT_NE(t->stats().last_error.find("out of memory"), std::string::npos) << t->stats().last_error;
  }
  {
    RedisServer s;
    ASSERT_TRUE(s.start({"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"}).ok());
    auto t = make_remote(s.url(), g);
    ASSERT_TRUE(t);
    std::vector<TestChunk> chunks;
    for (uint32_t i = 0; i < 250; ++i) {  // ~8 MiB into 4 MiB
      chunks.push_back(make_chunk(g, test_ns(41), i));
      ASSERT_TRUE(t->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok()) << i;
    }
    size_t present = 0;
    std::vector<std::byte> out(g.max_payload_bytes());
    for (auto& c : chunks) {
      auto r = t->get(c.key, out);
      if (r.ok()) {
        ++present;
        EXPECT_TRUE(std::equal(c.payload.begin(), c.payload.end(), out.begin()));
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
      }
    }
    EXPECT_GT(present, 0u);
    EXPECT_LT(present, chunks.size());  // Redis evicted some: its maxmemory is the capacity
    EXPECT_FALSE(t->degraded());
  }
}

// ------------------------------------------- a server that misbehaves ----

namespace scripted {

// A Redis stand-in on loopback: each connection runs `serve(fd, n)` (n: the connection's number)
// on a thread of its own. Stopping closes the listener and waits for the connections' threads.
class ScriptedRedis {
 public:
  explicit ScriptedRedis(std::function<void(int fd, int n)> serve) : serve_(std::move(serve)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      for (int n = 0;; ++n) {
        const int fd = ::accept(listener_, nullptr, nullptr);
        if (fd < 0) return;  // shut down
        connections_.emplace_back([this, fd, n] {
          serve_(fd, n);
          ::close(fd);
        });
      }
    });
  }
  ~ScriptedRedis() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    for (std::thread& t : connections_) t.join();
  }
  uint16_t port() const { return port_; }

 private:
  std::function<void(int, int)> serve_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // the acceptor's until it has joined
};

// Reads what the client sent, once some bytes arrived (up to 60 s); false when it hung up.
bool read_request(int fd) {
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  return ::poll(&p, 1, 60000) == 1 && ::recv(fd, buf, sizeof buf, 0) > 0;
}

// The next command the client sent (a RESP array of bulk strings), its arguments; empty when it hung up.
std::vector<std::string> read_command(int fd, std::string& buf) {
  for (;;) {
    size_t at = 0;
    auto line = [&]() -> std::optional<long> {  // "<sigil><number>\r\n"
      const size_t end = buf.find("\r\n", at);
      if (end == std::string::npos) return std::nullopt;
      const long n = std::stol(buf.substr(at + 1, end - at - 1));
      at = end + 2;
      return n;
    };
    std::vector<std::string> args;
    std::optional<long> n = line();
    for (long i = 0; n && i < *n; ++i) {
      const std::optional<long> len = line();
      if (!len || buf.size() < at + size_t(*len) + 2) {
        n.reset();
        break;
      }
      args.push_back(buf.substr(at, size_t(*len)));
      at += size_t(*len) + 2;
    }
    if (n) {
      buf.erase(0, at);
      return args;
    }
    pollfd p{fd, POLLIN, 0};
    char more[4096];
    if (::poll(&p, 1, 60000) != 1) return {};
    const ssize_t got = ::recv(fd, more, sizeof more, 0);
    if (got <= 0) return {};
    buf.append(more, size_t(got));
  }
}

RedisClientOptions standalone(uint16_t port, uint32_t pool_size) {
  RedisClientOptions o;
  o.seeds = {RedisEndpoint{"127.0.0.1", port}};
  o.cluster = RedisClusterMode::kOff;
  o.command_timeout = std::chrono::milliseconds(300);
  o.pool_size = pool_size;
  return o;
}

// The options of a client of a one-node cluster at `port`, whose replies no timeout cuts short.
RedisClientOptions cluster_of_one(uint16_t port) {
  RedisClientOptions o = standalone(port, 1);
  o.cluster = RedisClusterMode::kOn;
  o.command_timeout = std::chrono::milliseconds(60000);
  return o;
}

// CLUSTER SLOTS' reply: every slot on 127.0.0.1:<port>.
std::string all_slots_at(const std::string& port) {
  std::string reply = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:";
  reply += port;
  reply += "\r\n";
  return reply;
}

}  // namespace scripted

// A chunk found shorter than its ranged read expected is read again whole, in a second round;
// where the first round's transport failed (the connection dropped at a later key), it was left
// reported read (OK, no pages), with nothing written into it.
TEST(RemoteTierScripted, AShortChunkInARoundWhoseTransportFailedIsNotReportedRead) {
  const ChunkGeometry g = small_geometry();
  const auto a = make_chunk(g, test_ns(1), 1, 2), b = make_chunk(g, test_ns(1), 2);
  std::vector<std::byte> entry(chunk_entry_layout(g, 2, 1).entry_bytes);
  ASSERT_TRUE(encode_chunk_entry(g, a.key, a.hashes, a.payload, 1, 1, entry).ok());
  std::mutex keys_mu;  // set once the tier can name them
  std::string key_a, key_b;
  scripted::ScriptedRedis server([&](int fd, int) {
    std::string buf;
    for (std::vector<std::string> args = scripted::read_command(fd, buf); !args.empty();
         args = scripted::read_command(fd, buf)) {
      std::lock_guard lk(keys_mu);
      if (args.size() == 4 && args[0] == "GETRANGE" && args[1] == key_a) {  // a's entry, as Redis slices it
        const size_t lo = std::stoul(args[2]), hi = std::min<size_t>(std::stoul(args[3]), entry.size() - 1);
        const std::string v(reinterpret_cast<const char*>(entry.data()) + lo, hi + 1 - lo);
        const std::string reply = "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
        if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) != ssize_t(reply.size())) return;
      } else if (std::find(args.begin(), args.end(), key_b) != args.end()) {
        return;  // the connection drops
      } else if (::send(fd, "-ERR not scripted\r\n", 19, MSG_NOSIGNAL) != 19) {
        return;
      }
    }
  });
  auto t = make_remote("redis://127.0.0.1:" + std::to_string(server.port()) + "?cluster=off&timeout_ms=2000", g);
  ASSERT_TRUE(t);
  {
    std::lock_guard lk(keys_mu);
    key_a = t->key_of(a.key), key_b = t->key_of(b.key);
  }
  const std::byte fill{0x5a};
  std::vector<std::byte> pa(g.layer_bytes(g.chunk_pages), fill), pb(g.layer_bytes(g.chunk_pages), fill);
  std::vector<GetOp> ops{{a.key, 1, 1, pa}, {b.key, 1, 1, pb}};  // expected whole: a is read again
  t->get_batch(ops);
  EXPECT_FALSE(ops[1].status.ok());
  EXPECT_FALSE(ops[0].status.ok()) << "reported read with " << ops[0].num_pages << " pages";
  EXPECT_EQ(t->stats().checksum_failures, 0u);
}

TEST(RedisSlots, ClusterSlotsWithAPortOutOfRangeIsRefused) {
  auto slots_reply = [](const std::string& port) {
    const std::string resp = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + port + "\r\n";
    redisReader* reader = redisReaderCreate();
    EXPECT_EQ(redisReaderFeed(reader, resp.data(), resp.size()), REDIS_OK);
    void* reply = nullptr;
    EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
    redisReaderFree(reader);
    RedisReplyPtr owned(static_cast<redisReply*>(reply));
    return parse_cluster_slots(owned.get(), "127.0.0.1");
  };
  ASSERT_TRUE(slots_reply("7000").ok());
  EXPECT_EQ(slots_reply("7000")->nodes[0].port, 7000);
  for (const char* bad : {"70000", "0", "-1"}) {  // 70000 was taken as 4464 (its low 16 bits)
    const auto map = slots_reply(bad);
    ASSERT_FALSE(map.ok()) << bad;
    EXPECT_EQ(map.status().code(), StatusCode::kCorruption);
  }
}

// A cluster node whose CLUSTER SLOTS turns malformed after a MOVED: the client keeps the map it
// has and asks again at the next MOVED, not before every call (each was an extra round trip).
TEST(RedisClientDeadline, AFailedTopologyRefreshIsNotRepeatedOnEveryCall) {
  std::atomic<int> slots_asked{0}, gets{0};
  std::atomic<uint16_t> port{0};  // the server's, read by its connection (the socket is no synchronization to TSan)
  scripted::ScriptedRedis server([&](int fd, int) {
    std::string buf;
    for (auto cmd = scripted::read_command(fd, buf); !cmd.empty(); cmd = scripted::read_command(fd, buf)) {
      std::string reply = "$-1\r\n";
      if (cmd[0] == "CLUSTER") {
        const std::string p = slots_asked++ == 0 ? std::to_string(port.load()) : "70000";
        reply = scripted::all_slots_at(p);
      } else if (gets++ == 0) {
        reply = "-MOVED 3999 127.0.0.1:" + std::to_string(port.load()) + "\r\n";
      }
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) != ssize_t(reply.size())) return;
    }
  });
  port = server.port();
  auto client = RedisClient::create(scripted::cluster_of_one(port.load()));
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 6; ++i) {
    auto r = (*client)->command({"GET", "k"});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().to_string();
  }
  EXPECT_EQ(slots_asked.load(), 2);  // the first map, and one refresh after the MOVED
  EXPECT_EQ(gets.load(), 7);         // the MOVED one went again
}

// A server that sends its reply a byte at a time, each byte well within the
// timeout, times out once the whole reply is late: hiredis's own timeout
// bounds each read, and a trickling Redis stalled every load for as long as
// it pleased (a review saw 36.9 s for one completion) without ever
// degrading the tier.
TEST(RedisClientDeadline, AReplyTrickledSlowerThanTheTimeoutTimesOut) {
  scripted::ScriptedRedis server([](int fd, int) {
    if (!scripted::read_request(fd)) return;
    for (char byte : std::string("$10\r\n0123456789\r\n"))  // 17 bytes, 50 ms apart: 850 ms
      if (std::this_thread::sleep_for(std::chrono::milliseconds(50)); ::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) return;
  });
  auto client = RedisClient::create(scripted::standalone(server.port(), 1));
  ASSERT_TRUE(client.ok());
  auto r = (*client)->command({"GET", "k"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().to_string().find("timeout"), std::string::npos) << r.status().to_string();
  EXPECT_EQ((*client)->stats().timeouts, 1u);
}

// A server answering each reply of a pipeline well inside the reply timeout, but the pipeline as a
// whole slowly, fails the call at its call timeout: the reply timeout alone let such a server hold a
// caller (the scheduler, loading a batch) for the pipeline's length times it without ever degrading.
TEST(RedisClientDeadline, APipelineAnsweredSlowlyReplyByReplyFailsAtTheCallTimeout) {
  constexpr int kCommands = 8;
  scripted::ScriptedRedis server([&](int fd, int) {
    std::string buf;
    for (int i = 0; i < kCommands; ++i)
      if (scripted::read_command(fd, buf).empty()) return;
    for (int i = 0; i + 1 < kCommands; ++i) {  // 400 ms apart: 2.8 s
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      if (::send(fd, "$-1\r\n", 5, MSG_NOSIGNAL) != 5) return;
    }
    (void)scripted::read_request(fd);  // the last reply never comes: the call can only end by a timeout
  });
  auto o = scripted::standalone(server.port(), 1);
  o.command_timeout = std::chrono::milliseconds(60000);  // no reply but the last is late
  o.call_timeout = std::chrono::milliseconds(1000);
  auto client = RedisClient::create(o);
  ASSERT_TRUE(client.ok());
  std::vector<RedisCommand> cmds(kCommands);
  for (auto& c : cmds) c.args = {"GET", "k"};
  const Status st = (*client)->run(cmds);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.to_string().find("the call's 1000 ms ran out"), std::string::npos) << st.to_string();
  EXPECT_FALSE(cmds.back().status.ok());
  EXPECT_EQ((*client)->stats().timeouts, 1u);
}

// A cluster node that answers every command with ASK to another address makes the session connect to
// each; those connections close when the call ends, as the map names none of them: a confused or
// hostile node could make every session keep a connection open per address it named.
TEST(RedisClientDeadline, ConnectionsAnAskOpenedCloseWhenTheCallEnds) {
  constexpr int kTargets = 3;
  std::mutex mu;
  std::condition_variable cv;
  int hung_up = 0;
  std::vector<std::unique_ptr<scripted::ScriptedRedis>> targets;
  for (int i = 0; i < kTargets; ++i)
    targets.push_back(std::make_unique<scripted::ScriptedRedis>([&](int fd, int) {
      std::string buf;
      for (auto cmd = scripted::read_command(fd, buf); !cmd.empty(); cmd = scripted::read_command(fd, buf)) {
        const std::string reply = cmd[0] == "ASKING" ? "+OK\r\n" : "$-1\r\n";
        if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) != ssize_t(reply.size())) return;
      }
      char byte;
      if (::recv(fd, &byte, 1, MSG_DONTWAIT) != 0) return;  // read_command's 60 s passed: no hang-up
      std::lock_guard lk(mu);
      ++hung_up;
      cv.notify_all();
    }));
  std::vector<uint16_t> target_ports;
  for (auto& t : targets) target_ports.push_back(t->port());
  std::atomic<uint16_t> port{0};  // the node's, read by its connection (the socket is no synchronization to TSan)
  scripted::ScriptedRedis node([&](int fd, int) {
    std::string buf;
    size_t asks = 0;
    for (auto cmd = scripted::read_command(fd, buf); !cmd.empty(); cmd = scripted::read_command(fd, buf)) {
      std::string reply = scripted::all_slots_at(std::to_string(port.load()));
      if (cmd[0] != "CLUSTER") {
        reply = "-ASK 3999 127.0.0.1:";
        reply += std::to_string(target_ports[asks++ % target_ports.size()]);
        reply += "\r\n";
      }
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) != ssize_t(reply.size())) return;
    }
  });
  port = node.port();
  auto client = RedisClient::create(scripted::cluster_of_one(port.load()));
  ASSERT_TRUE(client.ok());
  std::vector<RedisCommand> cmds(kTargets);
  for (auto& c : cmds) c.args = {"GET", "k"};
  ASSERT_TRUE((*client)->run(cmds).ok());
  for (auto& c : cmds) EXPECT_EQ(c.reply->type, REDIS_REPLY_NIL);
  EXPECT_EQ((*client)->stats().ask, uint64_t(kTargets));
  std::unique_lock lk(mu);
  EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return hung_up == kTargets; }))
      << hung_up << " of the " << kTargets << " connections the ASKs opened were closed";
}

// A server that serves corrupt entries and never answers their DEL: the first DEL's timeout degrades
// the tier, and the batch's other corrupt entries are not deleted one call each (every DEL waited its
// own timeout on a server already failing).
TEST(RedisClientDeadline, AFailedDelOfACorruptEntryIsNotRepeatedForTheRestOfTheBatch) {
  std::atomic<int> dels{0};
  scripted::ScriptedRedis server([&](int fd, int) {
    std::string buf;
    for (auto cmd = scripted::read_command(fd, buf); !cmd.empty(); cmd = scripted::read_command(fd, buf)) {
      if (cmd[0] == "DEL") {
        ++dels;
        (void)scripted::read_request(fd);  // never answered: until the client hangs up
        return;
      }
      const std::string reply = "$25\r\nnot a kvtier entry at all\r\n";
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) != ssize_t(reply.size())) return;
    }
  });
  const ChunkGeometry g = small_geometry();
  auto t = make_remote("redis://127.0.0.1:" + std::to_string(server.port()) +
                           "?cluster=off&range_reads=0&timeout_ms=2000&backoff_ms=60000&backoff_max_ms=60000",  // only the DEL waits it out
                       g);
  ASSERT_TRUE(t);
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(g.max_payload_bytes()));
  std::vector<GetOp> ops;
  for (uint32_t i = 0; i < 3; ++i) ops.push_back(GetOp{make_chunk(g, test_ns(60), i).key, 0, kAllLayers, bufs[i]});
  t->get_batch(ops);
  for (const GetOp& op : ops) EXPECT_FALSE(op.status.ok());
  EXPECT_EQ(t->stats().checksum_failures, 3u);  // each counted and reported removed
  EXPECT_EQ(dels.load(), 1);
}

// A reply longer than the client takes fails its command as a broken connection would, after at
// most about that many bytes: hiredis buffers whatever length a bulk string claims, so a server
// answering a GET with 512 MiB (wrong or hostile) grew the process by all of it, and more than
// once over a pipeline. (The remote tier bounds its client to one chunk entry.)
// A server that answers a GET with `head` and then `piece` up to `count` times (until the client
// hangs up), and a client bounded at 1 MiB a reply: the reply is cut off, little of it read.
void expect_reply_cut_off(const std::string& head, const std::string& piece, int count) {
  std::atomic<uint64_t> sent{0};
  scripted::ScriptedRedis server([&](int fd, int) {
    if (!scripted::read_request(fd)) return;
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) != ssize_t(head.size())) return;
    for (int i = 0; i < count; ++i) {
      const ssize_t n = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += uint64_t(n);
    }
  });
  auto o = scripted::standalone(server.port(), 1);
  o.command_timeout = std::chrono::milliseconds(120000);  // cut off by its length, not by time
  o.max_reply_bytes = size_t(1) << 20;
  auto client = RedisClient::create(o);
  ASSERT_TRUE(client.ok());
  auto r = (*client)->command({"GET", "k"});
  ASSERT_FALSE(r.ok()) << "a reply of " << sent.load() << " bytes was taken";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().to_string().find("longer than"), std::string::npos) << r.status().to_string();
  EXPECT_LT((*client)->stats().transport_errors, 2u);
  client->reset();  // closes its connection: the server's sends fail
  EXPECT_LT(sent.load(), uint64_t(64) << 20) << "the client read on past its bound";
}

TEST(RedisClientDeadline, AReplyLongerThanTheBoundIsCutOff) {
  expect_reply_cut_off("$536870912\r\n", std::string(size_t(1) << 20, 'x'), 512);  // 512 MiB
}

// The same bound holds for an array, whose elements hiredis parses (and keeps) as they arrive:
// the bytes it had not parsed stayed small, so 512 MiB of 64 KiB elements were all read and
// returned as the reply to a GET.
TEST(RedisClientDeadline, AnArrayReplyLongerThanTheBoundIsCutOff) {
  expect_reply_cut_off("*8192\r\n", "$65536\r\n" + std::string(size_t(1) << 16, 'x') + "\r\n", 8192);
}

// An array header claiming 2^31 elements, 13 bytes on the wire: hiredis 0.14 allocated the array
// from the header and walked every slot to free it, 5 s of the engine's thread per reply. It is
// refused before hiredis reads it.
TEST(RedisClientDeadline, AnArrayHeaderClaimingMoreElementsThanAnyReplyIsRefused) {
  scripted::ScriptedRedis server([&](int fd, int) {
    if (!scripted::read_request(fd)) return;
    (void)::send(fd, "*2147483647\r\n", 13, MSG_NOSIGNAL);
    scripted::read_request(fd);  // until the client hangs up
  });
  auto client = RedisClient::create(scripted::standalone(server.port(), 1));
  ASSERT_TRUE(client.ok());
  auto r = (*client)->command({"GET", "k"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("array reply of more than"), std::string::npos) << r.status().to_string();
}

// The guard follows the stream in pieces of any size, skips bulk payloads (whatever they hold) and nils.
TEST(RedisWire, TheArrayGuardReadsHeadersOnly) {
  const std::string ok = "$11\r\n*9999999999\r\n$-1\r\n*-1\r\n*3\r\n:1\r\n+OK\r\n-ERR x\r\n*65536\r\n";
  const std::string bad = ok + "$3\r\nabc\r\n*65537\r\n";
  for (size_t piece : {size_t(1), size_t(2), size_t(5), ok.size()}) {
    redis_wire::ArrayHeaderGuard g, h;
    bool g_ok = true, h_ok = true;
    for (size_t i = 0; i < bad.size(); i += piece) {
      if (i < ok.size()) g_ok = g_ok && g.scan(std::string_view(ok).substr(i, piece));
      h_ok = h_ok && h.scan(std::string_view(bad).substr(i, piece));
    }
    EXPECT_TRUE(g_ok) << piece;
    EXPECT_FALSE(h_ok) << piece;
  }
}

// Callers queued for a pooled connection when one fails fail at once: they
// would only queue up for a server that is likely gone (each reconnect
// waiting its own timeout) while the tier already backs off.
TEST(RedisClientDeadline, CallersWaitingForAConnectionFailWhenOneFails) {
  std::mutex mu;
  std::condition_variable cv;
  bool first_arrived = false, hang_up = false;
  scripted::ScriptedRedis server([&](int fd, int n) {
    if (!scripted::read_request(fd)) return;
    if (n > 0) {  // a later connection: every command answered at once
      do (void)::send(fd, "+PONG\r\n", 7, MSG_NOSIGNAL);
      while (scripted::read_request(fd));
      return;
    }
    std::unique_lock lk(mu);
    first_arrived = true;
    cv.notify_all();
    cv.wait(lk, [&] { return hang_up; });  // then the connection closes unanswered
  });
  auto o = scripted::standalone(server.port(), 1);
  o.command_timeout = std::chrono::milliseconds(60000);  // the first call fails by the hang-up, not a timeout
  auto made = RedisClient::create(o);
  ASSERT_TRUE(made.ok());
  RedisClient& client = **made;
  Status first;
  std::thread holder([&] { first = client.command({"PING"}, 0).status(); });
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return first_arrived; });
  }
  Status second;
  std::thread waiter([&] { second = client.command({"PING"}, 0).status(); });
  for (int i = 0; i < 60000 && client.stats().pool_waiting == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(client.stats().pool_waiting, 1u);
  {
    std::lock_guard lk(mu);
    hang_up = true;
    cv.notify_all();
  }
  holder.join();
  waiter.join();
  EXPECT_EQ(first.code(), StatusCode::kUnavailable) << first.to_string();
  EXPECT_EQ(second.code(), StatusCode::kUnavailable) << second.to_string();
  EXPECT_NE(second.to_string().find("waited"), std::string::npos) << second.to_string();
  EXPECT_EQ(client.stats().failed_waits, 1u);
  EXPECT_TRUE(client.command({"PING"}, 0).ok());  // a later call reconnects
}

}  // namespace
}  // namespace kvtier
