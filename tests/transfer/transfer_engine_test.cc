#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "../tiers/tier_test_util.h"
#include "tiers/disk_tier.h"
#include "transfer/transfer_engine.h"

namespace kvtier {
namespace {

using namespace testing_util;

struct Rig {
  TempDir dir;
  ChunkGeometry g = small_geometry();
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<HostTier> host;
  std::unique_ptr<DiskTier> disk;
  std::unique_ptr<TransferEngine> engine;

  explicit Rig(LoadMode mode, uint32_t workers = 2) {
    pool = BlockPool::create({.geometry = g.kv, .num_pages = 256}).value();
    host = HostTier::create({.geometry = g, .capacity_bytes = 128 * g.kv.page_bytes()}).value();
    const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
    disk = DiskTier::create({.geometry = g, .dir = dir.path(), .region_bytes = 4096 + 4 * entry,
                             .capacity_bytes = 64 * (4096 + 4 * entry), .queue_depth = 8, .sync_writes = false})
               .value();
    TransferEngineOptions o{.workers = workers, .load_mode = mode, .pool = pool.get(), .host = host.get()};
    o.tiers[size_t(TierKind::kHost)] = host.get();
    o.tiers[size_t(TierKind::kDisk)] = disk.get();
    engine = TransferEngine::create(o).value();
  }
  // n chunks of namespace ns, put on the disk tier and flushed.
  std::vector<TestChunk> on_disk(const PageHash& ns, uint32_t n) {
    std::vector<TestChunk> chunks;
    for (uint32_t i = 0; i < n; ++i) {
      chunks.push_back(make_chunk(g, ns, i));
      EXPECT_TRUE(disk->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok());
    }
    EXPECT_TRUE(disk->flush().ok());
    return chunks;
  }
  std::vector<PageLoc> alloc_pool(uint32_t n) {
    std::vector<PageId> ids;
    EXPECT_TRUE(pool->allocate(n, ids).ok());
    std::vector<PageLoc> out;
    for (PageId p : ids) out.push_back(PageLoc::pool(p));
    return out;
  }
};

class LoadModes : public ::testing::TestWithParam<LoadMode> {};

TEST_P(LoadModes, LayerWiseLoadFromDiskIsExactPerLayer) {
  Rig rig(GetParam());
  const auto& g = rig.g;
  const std::vector<TestChunk> chunks = rig.on_disk(test_ns(1), 6);
  TransferBatch b;
  for (auto& c : chunks) b.loads.push_back({TierKind::kDisk, c.key, rig.alloc_pool(g.chunk_pages)});
  auto batch = b;  // keep the destinations
  auto h = rig.engine->submit(std::move(b));
  ASSERT_TRUE(h.ok());
  const size_t s = g.kv.layer_slice_bytes();
  for (uint32_t l = 0; l < g.kv.num_layers; ++l) {
    ASSERT_TRUE(h->wait_layer(LayerIdx(l)).ok());
    for (size_t c = 0; c < chunks.size(); ++c)
      for (uint32_t p = 0; p < g.chunk_pages; ++p) {
        const std::byte* want = chunks[c].payload.data() + (l * g.chunk_pages + p) * s;
        ASSERT_EQ(std::memcmp(rig.pool->layer(PageId(batch.loads[c].dst[p].index), LayerIdx(l)), want, s), 0);
      }
  }
  ASSERT_TRUE(h->wait_all().ok());
  auto done = rig.engine->poll_completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, h->id());
  for (auto& st : done[0].loads) EXPECT_TRUE(st.ok());
}

INSTANTIATE_TEST_SUITE_P(Both, LoadModes, ::testing::Values(LoadMode::kWholeChunk, LoadMode::kLayerMajor));

// A disk tier whose reads of layer 1 and later are reported only once the
// test opens it (the bytes are in the pages already; the engine does not know).
class HeldAfterFirstLayerTier final : public Tier {
 public:
  explicit HeldAfterFirstLayerTier(DiskTier& inner) : inner_(inner) {}
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  TierKind kind() const override { return TierKind::kDisk; }
  const ChunkGeometry& geometry() const override { return inner_.geometry(); }
  void put_batch(std::span<PutOp> ops) override { inner_.put_batch(ops); }
  void get_batch(std::span<GetOp> ops) override {
    std::vector<std::function<void(uint32_t, bool)>> callers;
    std::vector<uint32_t> held(ops.size(), 0), told(ops.size(), 0);
    std::vector<bool> placed(ops.size(), false);
    for (size_t i = 0; i < ops.size(); ++i) {
      callers.push_back(std::move(ops[i].on_ready));
      if (!callers[i]) continue;
      ops[i].on_ready = [&, i, first = ops[i].first_layer](uint32_t end, bool p) {
        held[i] = end;
        placed[i] = p;
        if (told[i] < first + 1) callers[i](told[i] = first + 1, p);  // layer `first` now, the rest once open
      };
    }
    inner_.get_batch(ops);
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::minutes(10), [&] { return open_; });
    for (size_t i = 0; i < ops.size(); ++i)
      if (callers[i] && ops[i].status.ok() && held[i] > told[i]) callers[i](held[i], placed[i]);
  }
  size_t exists_prefix(const PageHash& ns, std::span<const PageHash> keys) override { return inner_.exists_prefix(ns, keys); }
  Status erase(const ChunkKey& key) override { return inner_.erase(key); }
  Status flush() override { return inner_.flush(); }
  TierStats stats() const override { return inner_.stats(); }
  bool degraded() const override { return false; }
  bool reports_layers() const override { return true; }

 private:
  DiskTier& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Layer-major loads from a tier that reports layers as they land are read in
// one stream of many layers: layer 0 is published while the same call still
// holds the later layers, and every layer is exact.
TEST(TransferEngine, AStreamedLoadPublishesItsFirstLayerBeforeTheRest) {
  Rig rig(LoadMode::kLayerMajor);
  const auto& g = rig.g;
  const std::vector<TestChunk> chunks = rig.on_disk(test_ns(3), 6);
  HeldAfterFirstLayerTier held(*rig.disk);
  TransferEngineOptions o = rig.engine->options();
  o.tiers[size_t(TierKind::kDisk)] = &held;
  auto engine = TransferEngine::create(o).value();
  const std::unique_ptr<HeldAfterFirstLayerTier, void (*)(HeldAfterFirstLayerTier*)> open_on_exit(
      &held, [](HeldAfterFirstLayerTier* t) { t->open(); });
  TransferBatch b;
  for (auto& c : chunks) b.loads.push_back({TierKind::kDisk, c.key, rig.alloc_pool(g.chunk_pages)});
  auto batch = b;  // keep the destinations
  auto h = engine->submit(std::move(b));
  ASSERT_TRUE(h.ok());
  const size_t s = g.kv.layer_slice_bytes();
  auto expect_layer = [&](uint32_t l) {
    for (size_t c = 0; c < chunks.size(); ++c)
      for (uint32_t p = 0; p < g.chunk_pages; ++p) {
        const std::byte* want = chunks[c].payload.data() + (l * g.chunk_pages + p) * s;
        ASSERT_EQ(std::memcmp(rig.pool->layer(PageId(batch.loads[c].dst[p].index), LayerIdx(l)), want, s), 0) << l;
      }
  };
  ASSERT_TRUE(h->wait_layer(LayerIdx(0)).ok());
  EXPECT_FALSE(h->done()) << "layer 0 waited for the held layers";
  expect_layer(0);
  held.open();
  ASSERT_TRUE(h->wait_all().ok());
  for (uint32_t l = 0; l < g.kv.num_layers; ++l) expect_layer(l);
  for (auto& st : h->result().loads) EXPECT_TRUE(st.ok());
}

TEST(TransferEngine, StoreCopyLoadRoundTripAndMisses) {
  Rig rig(LoadMode::kWholeChunk);
  const auto& g = rig.g;
  auto src = rig.alloc_pool(g.chunk_pages);
  std::mt19937 rng(3);
  for (auto& p : src)
    for (size_t i = 0; i < g.kv.page_bytes(); ++i) rig.pool->page(PageId(p.index))[i] = std::byte(uint8_t(rng()));
  auto c = make_chunk(g, test_ns(2), 1);
  // pool -> host slots (copies) and pool -> disk (store) in one batch.
  std::vector<SlotId> slots;
  ASSERT_TRUE(rig.host->allocate_slots(g.chunk_pages, slots).ok());
  TransferBatch b;
  for (size_t i = 0; i < src.size(); ++i) b.copies.push_back({src[i], PageLoc::host(slots[i])});
  b.stores.push_back({TierKind::kDisk, c.key, c.hashes, src});
  auto h = rig.engine->submit(std::move(b)).value();
  ASSERT_TRUE(h.wait_all().ok());
  // disk -> pool, host slots -> pool, and a missing chunk.
  auto from_disk = rig.alloc_pool(g.chunk_pages);
  auto from_host = rig.alloc_pool(g.chunk_pages);
  auto for_missing = rig.alloc_pool(g.chunk_pages);
  TransferBatch b2;
  b2.loads.push_back({TierKind::kDisk, c.key, from_disk});
  b2.loads.push_back({TierKind::kDisk, make_chunk(g, test_ns(2), 2).key, for_missing});
  for (size_t i = 0; i < slots.size(); ++i) b2.copies.push_back({PageLoc::host(slots[i]), from_host[i]});
  auto h2 = rig.engine->submit(std::move(b2)).value();
  EXPECT_EQ(h2.wait_layer(LayerIdx(0)).code(), StatusCode::kNotFound);
  EXPECT_EQ(h2.wait_all().code(), StatusCode::kNotFound);
  auto r = h2.result();
  EXPECT_TRUE(r.loads[0].ok());
  EXPECT_EQ(r.loads[1].code(), StatusCode::kNotFound);
  for (auto& st : r.copies) EXPECT_TRUE(st.ok());
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(std::memcmp(rig.pool->page(PageId(src[i].index)), rig.pool->page(PageId(from_disk[i].index)), g.kv.page_bytes()), 0);
    EXPECT_EQ(std::memcmp(rig.pool->page(PageId(src[i].index)), rig.pool->page(PageId(from_host[i].index)), g.kv.page_bytes()), 0);
  }
  EXPECT_EQ(rig.engine->poll_completions().size(), 2u);
}

TEST(TransferEngine, RejectsBadBatches) {
  Rig rig(LoadMode::kWholeChunk);
  TransferBatch b;
  b.copies.push_back({PageLoc::pool(PageId(100000)), PageLoc::pool(PageId(0))});
  EXPECT_EQ(rig.engine->submit(std::move(b)).status().code(), StatusCode::kInvalidArgument);
  TransferBatch b2;
  b2.loads.push_back({TierKind::kRemote, {}, rig.alloc_pool(1)});
  EXPECT_EQ(rig.engine->submit(std::move(b2)).status().code(), StatusCode::kInvalidArgument);
  auto empty = rig.engine->submit({}).value();
  EXPECT_TRUE(empty.wait_all().ok());
  EXPECT_TRUE(empty.wait_layer(LayerIdx(3)).ok());
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kRounds = 15;
#else
constexpr int kRounds = 40;
#endif

TEST(TransferEngine, ConcurrentSubmitsCancelsAndHandleDestruction) {
  auto rig = std::make_unique<Rig>(LoadMode::kLayerMajor, 3);
  const auto& g = rig->g;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 8; ++i) {
    chunks.push_back(make_chunk(g, test_ns(5), i));
    ASSERT_TRUE(rig->disk->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok());
  }
  ASSERT_TRUE(rig->disk->flush().ok());
  // Each thread owns a disjoint set of pool pages so destinations never overlap.
  std::vector<std::vector<PageLoc>> pages(4);
  for (auto& p : pages) p = rig->alloc_pool(2 * g.chunk_pages + 1);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int r = 0; r < kRounds; ++r) {
        TransferBatch b;
        std::vector<PageLoc> first(pages[t].begin(), pages[t].begin() + g.chunk_pages);
        std::vector<PageLoc> second(pages[t].begin() + g.chunk_pages, pages[t].begin() + 2 * g.chunk_pages);
        b.loads.push_back({TierKind::kDisk, chunks[rng() % 8].key, first});
        auto sc = make_chunk(g, test_ns(100 + t), r);
        b.stores.push_back({TierKind::kHost, sc.key, sc.hashes, second});
        // The copy writes a page no move of this batch reads: a batch's moves run concurrently.
        b.copies.push_back({second[0], pages[t].back()});
        auto h = rig->engine->submit(std::move(b));
        if (!h.ok()) { ++bad; continue; }
        switch (rng() % 3) {
          case 0: if (!h->wait_all().ok()) ++bad; break;
          case 1: h->cancel(); (void)h->wait_layer(LayerIdx(1)); break;
          default: break;  // destroyed while running: the destructor cancels and waits
        }
        if (h->done() || rng() % 2) {
          auto res = h->result();
          for (auto& s : res.loads) if (!s.ok() && !s.is(StatusCode::kCancelled)) ++bad;
        }
      }
    });
  }
  std::thread poller([&] {
    for (int i = 0; i < 50; ++i) {
      (void)rig->engine->poll_completions();
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  poller.join();
  EXPECT_EQ(bad.load(), 0);
  // Handles that outlive their engine stay safe to wait on.
  TransferBatch b;
  b.loads.push_back({TierKind::kDisk, chunks[0].key, pages[0]});
  pages[0].resize(g.chunk_pages);
  b.loads.back().dst = pages[0];
  auto h = rig->engine->submit(std::move(b)).value();
  rig->engine.reset();
  Status s = h.wait_all();
  EXPECT_TRUE(s.ok() || s.is(StatusCode::kCancelled)) << s.to_string();
}

}  // namespace
}  // namespace kvtier
