// One conformance suite for every Tier implementation (host, disk; remote later).
#include <gtest/gtest.h>

#include <thread>

#include "tier_test_util.h"
#include "tiers/disk_tier.h"
#include "tiers/host_tier.h"

namespace kvtier {
namespace {

using namespace testing_util;

// Each factory makes a tier whose capacity holds roughly `chunks` full chunks.
struct HostFactory {
  static constexpr bool kDurable = false;
  std::unique_ptr<Tier> make(const ChunkGeometry& g, uint32_t chunks, EvictionOrder order) {
    HostTierOptions o{.geometry = g, .capacity_bytes = chunks * g.chunk_pages * g.kv.page_bytes(), .eviction = order};
    return HostTier::create(o).value();
  }
};

struct DiskFactory {
  static constexpr bool kDurable = true;
  TempDir dir;
  std::unique_ptr<Tier> make(const ChunkGeometry& g, uint32_t chunks, EvictionOrder order) {
    const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
    const size_t region = 4096 + 2 * entry;  // two chunks per region
    DiskTierOptions o{.geometry = g, .dir = dir.path() + "/d", .region_bytes = region,
                      .capacity_bytes = std::max<size_t>(2, chunks / 2) * region, .queue_depth = 8, .reclaim = order,
                      .sync_writes = false};
    auto t = DiskTier::create(o);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return std::move(t).value();
  }
};

template <class F>
class TierConformance : public ::testing::Test {
 protected:
  F factory;
  ChunkGeometry g = small_geometry();
};

using Factories = ::testing::Types<HostFactory, DiskFactory>;
TYPED_TEST_SUITE(TierConformance, Factories);

TYPED_TEST(TierConformance, RoundTripIsBitExactWholeAndLayerRanges) {
  auto tier = this->factory.make(this->g, 16, EvictionOrder::kFifo);
  const auto& g = this->g;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 6; ++i) chunks.push_back(make_chunk(g, test_ns(1), i, 1 + i % g.chunk_pages));
  for (auto& c : chunks) ASSERT_TRUE(tier->put(c.key, c.hashes, c.payload).ok());
  ASSERT_TRUE(tier->flush().ok());
  for (auto& c : chunks) {
    std::vector<std::byte> out(c.payload.size());
    auto n = tier->get(c.key, out);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(*n, c.hashes.size());
    EXPECT_EQ(out, c.payload);
    // Layers 1..2 only: the contiguous layer-major slice.
    const size_t lb = g.layer_bytes(*n);
    std::vector<std::byte> part(2 * lb);
    ASSERT_TRUE(tier->get_layers(c.key, 1, 2, part).ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), c.payload.begin() + lb));
  }
  // Batched get with per-op status, including a miss.
  auto missing = make_chunk(g, test_ns(1), 99);
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(g.max_payload_bytes()));
  std::vector<GetOp> ops{{chunks[0].key, 0, kAllLayers, bufs[0]}, {missing.key, 0, kAllLayers, bufs[1]},
                         {chunks[5].key, 3, 1, bufs[2]}};
  tier->get_batch(ops);
  EXPECT_TRUE(ops[0].status.ok());
  EXPECT_EQ(ops[1].status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(ops[2].status.ok());
  EXPECT_EQ(ops[2].num_layers, 1u);
  auto st = tier->stats();
  EXPECT_EQ(st.entries, 6u);
  EXPECT_GE(st.hits, 8u);
  EXPECT_GE(st.misses, 1u);
  EXPECT_FALSE(tier->degraded());
}

TYPED_TEST(TierConformance, ExistsPrefixAndNamespacesDoNotMix) {
  auto tier = this->factory.make(this->g, 16, EvictionOrder::kFifo);
  const auto& g = this->g;
  std::vector<TestChunk> a;
  for (uint32_t i = 0; i < 4; ++i) a.push_back(make_chunk(g, test_ns(1), i));
  for (uint32_t i : {0u, 1u, 3u}) ASSERT_TRUE(tier->put(a[i].key, a[i].hashes, a[i].payload).ok());
  std::vector<PageHash> keys;
  for (auto& c : a) keys.push_back(c.key.hash);
  EXPECT_EQ(tier->exists_prefix(test_ns(1), keys), 2u);
  EXPECT_TRUE(tier->exists(a[3].key));
  EXPECT_FALSE(tier->exists(a[2].key));
  // The same page hash under another namespace is a different key.
  EXPECT_EQ(tier->exists_prefix(test_ns(2), keys), 0u);
  std::vector<std::byte> out(a[0].payload.size());
  EXPECT_EQ(tier->get(ChunkKey{test_ns(2), a[0].key.hash}, out).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(tier->erase(a[0].key).ok());
  EXPECT_EQ(tier->exists_prefix(test_ns(1), keys), 0u);
}

TYPED_TEST(TierConformance, RejectsMalformedOps) {
  auto tier = this->factory.make(this->g, 16, EvictionOrder::kFifo);
  auto c = make_chunk(this->g, test_ns(1), 1);
  std::vector<std::byte> short_payload(c.payload.size() - 1);
  EXPECT_EQ(tier->put(c.key, c.hashes, short_payload).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->put(ChunkKey{c.key.ns, c.hashes.front()}, c.hashes, c.payload).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(tier->put(c.key, c.hashes, c.payload).ok());
  ASSERT_TRUE(tier->put(c.key, c.hashes, c.payload).ok());  // idempotent
  std::vector<std::byte> small(10);
  EXPECT_EQ(tier->get(c.key, small).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> out(c.payload.size());
  EXPECT_EQ(tier->get_layers(c.key, 4, 1, out).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(tier->get_layers(c.key, 2, 3, out).status().code(), StatusCode::kOutOfRange);
}

TYPED_TEST(TierConformance, CapacityIsNeverExceededAndFifoEvictsOldestFirst) {
  auto tier = this->factory.make(this->g, 8, EvictionOrder::kFifo);
  const auto& g = this->g;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 40; ++i) {
    chunks.push_back(make_chunk(g, test_ns(3), i));
    ASSERT_TRUE(tier->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok()) << i;
    auto st = tier->stats();
    ASSERT_LE(st.bytes, st.capacity_bytes);
  }
  auto st = tier->stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_LT(st.entries, 40u);
  // FIFO: the survivors are exactly a suffix of the insertion order.
  size_t first_present = 40;
  for (size_t i = 0; i < 40; ++i)
    if (tier->exists(chunks[i].key)) { first_present = i; break; }
  ASSERT_LT(first_present, 40u);
  for (size_t i = first_present; i < 40; ++i) EXPECT_TRUE(tier->exists(chunks[i].key)) << i;
  std::vector<std::byte> out(chunks[39].payload.size());
  ASSERT_TRUE(tier->get(chunks[39].key, out).ok());
  EXPECT_EQ(out, chunks[39].payload);
}

TYPED_TEST(TierConformance, LruKeepsRecentlyReadChunks) {
  auto tier = this->factory.make(this->g, 8, EvictionOrder::kLru);
  const auto& g = this->g;
  std::vector<TestChunk> chunks;
  std::vector<std::byte> out(g.max_payload_bytes());
  auto c0 = make_chunk(g, test_ns(4), 0);
  ASSERT_TRUE(tier->put(c0.key, c0.hashes, c0.payload).ok());
  for (uint32_t i = 1; i < 40; ++i) {
    auto c = make_chunk(g, test_ns(4), i);
    ASSERT_TRUE(tier->put(c.key, c.hashes, c.payload).ok());
    ASSERT_TRUE(tier->get(c0.key, out).ok()) << "chunk 0 was evicted at step " << i;  // keep it hot
    chunks.push_back(std::move(c));
  }
  EXPECT_EQ(out, c0.payload);
  EXPECT_FALSE(tier->exists(chunks[2].key));  // a cold one went instead (disk: a whole cold region)
  EXPECT_GT(tier->stats().evictions, 0u);
}

TYPED_TEST(TierConformance, ConcurrentPutsAndGetsStayExact) {
  auto tier = this->factory.make(this->g, 64, EvictionOrder::kFifo);
  const auto& g = this->g;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> out(g.max_payload_bytes());
      for (uint32_t i = 0; i < 20; ++i) {
        auto c = make_chunk(g, test_ns(10 + t), i);
        if (!tier->put(c.key, c.hashes, c.payload).ok()) ++bad;
        auto back = make_chunk(g, test_ns(10 + t), i / 2);
        auto r = tier->get(back.key, out);
        if (r.ok() && !std::equal(back.payload.begin(), back.payload.end(), out.begin())) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvtier
