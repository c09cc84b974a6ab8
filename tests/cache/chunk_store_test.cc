// ChunkStore: batch exists/get/set over host, disk and remote-shaped tiers,
// fastest first, and interoperable with a KVCache's disk tier (the same keys
// and payloads).
#include "cache/chunk_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include <filesystem>
#include <random>

#include "runtime/cache_rig.h"

namespace kvtier {
namespace {

ChunkGeometry small_chunks() {
  return ChunkGeometry{KVGeometry{.num_layers = 2, .num_kv_heads = 2, .head_dim = 8, .dtype = DType::kF32, .page_tokens = 4}, 2};
}

struct Chunk {
  ChunkKey key;
  std::vector<PageHash> pages;
  std::vector<std::byte> payload;
};

Chunk make_chunk(const ChunkGeometry& g, uint64_t id) {
  Chunk c;
  c.key = ChunkKey{PageHash{7, 7}, PageHash{id, id * 31 + 1}};
  c.pages = {PageHash{id, 0}, c.key.hash};
  c.payload.resize(g.payload_bytes(2));
  std::mt19937 rng{static_cast<uint32_t>(id)};
  for (auto& b : c.payload) b = std::byte(rng());
  return c;
}

class ChunkStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kvtier-chunk-store-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ChunkStoreTest, SetThenExistsAndGetAcrossTiersFastestFirst) {
  const ChunkGeometry g = small_chunks();
  ChunkStoreOptions o;
  o.geometry = g;
  o.host_bytes = 4 * g.kv.page_bytes();  // two chunks: older ones leave the host, stay on disk
  o.disk_dir = dir_.string();
  o.disk_region_bytes = 1 << 20;
  o.disk_bytes = 4 << 20;
  auto store = ChunkStore::create(o);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  std::vector<Chunk> chunks;
  for (uint64_t i = 1; i <= 4; ++i) chunks.push_back(make_chunk(g, i));
  std::vector<PutOp> puts;
  for (auto& c : chunks) puts.push_back(PutOp{c.key, c.pages, c.payload, {}});
  (*store)->set(puts);
  for (auto& p : puts) EXPECT_TRUE(p.status.ok()) << p.status.to_string();
  ASSERT_TRUE((*store)->flush().ok());

  std::vector<PageHash> keys;
  for (auto& c : chunks) keys.push_back(c.key.hash);
  EXPECT_EQ((*store)->exists(PageHash{7, 7}, keys), 4u);
  EXPECT_EQ((*store)->exists(PageHash{8, 8}, keys), 0u);  // another namespace
  keys.insert(keys.begin() + 2, PageHash{99, 99});
  EXPECT_EQ((*store)->exists(PageHash{7, 7}, keys), 2u);  // leading hits only

  std::vector<std::vector<std::byte>> out(5, std::vector<std::byte>(g.max_payload_bytes()));
  std::vector<GetOp> gets;
  for (size_t i = 0; i < 4; ++i) gets.push_back(GetOp{.key = chunks[i].key, .out = out[i]});
  gets.push_back(GetOp{.key = ChunkKey{PageHash{7, 7}, PageHash{99, 99}}, .out = out[4]});
  (*store)->get(gets);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(gets[i].status.ok()) << i << " " << gets[i].status.to_string();
    EXPECT_EQ(gets[i].num_pages, 2u);
    EXPECT_EQ(out[i], chunks[i].payload);
  }
  EXPECT_EQ(gets[4].status.code(), StatusCode::kNotFound);
  const ChunkStoreStats s = (*store)->stats();
  EXPECT_EQ(s.get_hits_by_tier[size_t(TierKind::kHost)], 2u);  // the two newest
  EXPECT_EQ(s.get_hits_by_tier[size_t(TierKind::kDisk)], 2u);
  EXPECT_EQ(s.get_misses, 1u);
  EXPECT_EQ(s.sets, 4u);
  EXPECT_EQ(s.set_failures, 0u);
}

TEST_F(ChunkStoreTest, ReadsWhatAKVCacheWroteToDisk) {
  testing::RigOptions ro;
  ro.disk = true;
  auto prompt = testing::CacheRig::random_tokens(16 * 9 + 3, 5);
  std::vector<ChunkKey> keys;
  std::vector<std::byte> first_page;
  ChunkGeometry g;
  std::string disk_dir;
  {
    testing::CacheRig rig(ro);
    rig.cached(prompt, 0);
    ASSERT_TRUE(rig.cache->drain().ok());
    keys = rig.cache->chunk_keys(rig.ns, prompt);
    g = ChunkGeometry{rig.cache->geometry(), rig.cache->options().chunk_pages};
    auto look = rig.cache->lookup(rig.ns, prompt);
    ASSERT_TRUE(look.ok());
    const PageId p0 = look->match.locations.at(0).device;
    ASSERT_TRUE(p0.valid());
    first_page.assign(rig.cache->pool().page(p0), rig.cache->pool().page(p0) + g.kv.page_bytes());
    disk_dir = rig.cache->options().disk_dir + "-copy";
    std::filesystem::copy(rig.cache->options().disk_dir, disk_dir);
  }
  ChunkStoreOptions o;
  o.geometry = g;
  o.host_bytes = 0;
  o.disk_dir = disk_dir;
  o.disk_region_bytes = 1 << 20;
  o.disk_bytes = 16 << 20;
  auto store = ChunkStore::create(o);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  std::vector<PageHash> hashes;
  for (auto& k : keys) hashes.push_back(k.hash);
  EXPECT_EQ((*store)->exists(keys[0].ns, hashes), keys.size());
  std::vector<std::byte> out(g.max_payload_bytes());
  GetOp op{.key = keys[0], .out = out};
  (*store)->get({&op, 1});
  ASSERT_TRUE(op.status.ok()) << op.status.to_string();
  // Layer-major payload: layer 0 of page 0 is the payload's first slice.
  const size_t slice = g.kv.layer_slice_bytes();
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + slice, first_page.begin()));
  std::filesystem::remove_all(disk_dir);
}

// A get reports what the tier reported: the entry's codec (a q8 entry's layers are an
// approximation, and came back labelled exact), and `placed` when the tier wrote the caller's
// pages itself (the caller read `out`, never written).
TEST_F(ChunkStoreTest, AGetReportsTheEntrysCodecAndWhereItPlacedTheLayers) {
  ChunkGeometry g = small_chunks();
  g.kv.head_dim = 32;  // the q8 codec's block
  ChunkStoreOptions o;
  o.geometry = g;
  o.host_bytes = 0;
  o.disk_dir = dir_.string();
  o.disk_region_bytes = 1 << 20;
  o.disk_bytes = 4 << 20;
  o.disk_codec = KvCodec::kQ8;
  auto store = ChunkStore::create(o);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  Chunk c = make_chunk(g, 1);
  std::vector<float> values(c.payload.size() / 4);
  std::mt19937 rng(1);
  for (float& v : values) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::memcpy(c.payload.data(), values.data(), c.payload.size());
  std::vector<PutOp> puts{PutOp{c.key, c.pages, c.payload, {}}};
  (*store)->set(puts);
  ASSERT_TRUE(puts[0].status.ok()) << puts[0].status.to_string();
  ASSERT_TRUE((*store)->flush().ok());
  std::vector<std::byte> out(g.payload_bytes(2));
  GetOp plain{.key = c.key, .out = out};
  (*store)->get({&plain, 1});
  ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
  EXPECT_EQ(plain.codec, KvCodec::kQ8);
  std::vector<std::byte> p0(g.kv.page_bytes()), p1(g.kv.page_bytes());
  std::byte* pages[] = {p0.data(), p1.data()};
  GetOp into_pages{.key = c.key, .out = out, .pages = pages};
  (*store)->get({&into_pages, 1});
  ASSERT_TRUE(into_pages.status.ok());
  EXPECT_TRUE(into_pages.placed);
  EXPECT_TRUE(std::any_of(p0.begin(), p0.end(), [](std::byte b) { return b != std::byte{0}; }));
}

TEST(ChunkStoreOptionsTest, NeedsATier) {
  ChunkStoreOptions o;
  o.geometry = small_chunks();
  o.host_bytes = 0;
  EXPECT_EQ(ChunkStore::create(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
