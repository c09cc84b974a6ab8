// DiskTier with the tier secret (DiskTierOptions::auth): entries are written
// authenticated; a restart serves only entries that authenticate under the
// tier's secret (another secret's, or plain entries planted in the
// directory, are dropped and counted as forged), and a payload byte changed
// on disk is caught by the layer tags when it is read.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "tier_test_util.h"
#include "tiers/disk_tier.h"

namespace kvtier {
namespace {

using namespace testing_util;

DiskTierOptions disk_options(const std::string& dir, const ChunkGeometry& g, std::string_view secret) {
  const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096, true).entry_bytes;
  DiskTierOptions o{.geometry = g, .dir = dir, .region_bytes = 4096 + 4 * entry, .capacity_bytes = 16 * (4096 + 4 * entry),
                    .queue_depth = 8, .sync_writes = false};
  if (!secret.empty()) o.auth = ChunkAuth::create(secret).value();
  return o;
}

std::unique_ptr<DiskTier> open_tier(const DiskTierOptions& o) {
  auto t = DiskTier::create(o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<TestChunk> fill(const DiskTierOptions& o, uint32_t count) {
  auto t = open_tier(o);
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < count; ++i) {
    chunks.push_back(make_chunk(o.geometry, test_ns(40), i));
    EXPECT_TRUE(t->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok());
  }
  EXPECT_TRUE(t->flush().ok());
  return chunks;
}

constexpr std::string_view kSecret = "disk tier secret, 16+ bytes";

TEST(DiskAuth, RestartServesOnlyWhatTheSameSecretWrote) {
  TempDir dir;
  const ChunkGeometry g = small_geometry();
  const auto chunks = fill(disk_options(dir.path(), g, kSecret), 3);
  {
    auto t = open_tier(disk_options(dir.path(), g, kSecret));
    EXPECT_EQ(t->open_report().entries, 3u);
    for (const TestChunk& c : chunks) {
      std::vector<std::byte> out(c.payload.size());
      ASSERT_TRUE(t->get(c.key, out).ok());
      EXPECT_EQ(out, c.payload);
    }
  }
  for (std::string_view other : {std::string_view("a different secret of the same length"), std::string_view()}) {
    auto t = open_tier(disk_options(dir.path(), g, other));
    EXPECT_EQ(t->open_report().entries, 0u);
    EXPECT_EQ(t->open_report().dropped_forged, 3u);
    EXPECT_EQ(t->stats().forged_entries, 3u);
    std::vector<std::byte> out(chunks[0].payload.size());
    EXPECT_EQ(t->get(chunks[0].key, out).status().code(), StatusCode::kNotFound);
  }
}

TEST(DiskAuth, PlainEntriesPlantedInTheDirectoryAreNotServed) {
  TempDir dir;
  const ChunkGeometry g = small_geometry();
  const auto planted = fill(disk_options(dir.path(), g, ""), 2);  // a writer without the secret
  auto t = open_tier(disk_options(dir.path(), g, kSecret));
  EXPECT_EQ(t->open_report().entries, 0u);
  EXPECT_EQ(t->stats().forged_entries, 2u);
  EXPECT_FALSE(t->exists(planted[0].key));
}

TEST(DiskAuth, PayloadChangedOnDiskIsCaughtWhenRead) {
  TempDir dir;
  const ChunkGeometry g = small_geometry();
  auto o = disk_options(dir.path(), g, kSecret);
  o.verify_on_open = false;  // only the read can catch it
  const auto chunks = fill(o, 1);
  const TestChunk& c = chunks[0];
  const auto lay = chunk_entry_layout(g, g.chunk_pages, 4096, true);
  uint64_t at = 0;
  {
    auto t = open_tier(o);
    auto where = t->locate(c.key);
    ASSERT_TRUE(where.ok());
    at = where->second + lay.payload_offset;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/region-%08x.kvr", 0u);
  const std::string file = dir.path() + path;
  for (uint64_t pos = 0; pos < c.payload.size(); pos += c.payload.size() / 7 + 1) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at + pos));
    const char orig = char(f.get());
    f.seekp(std::streamoff(at + pos));
    f.put(char(orig ^ 0x04));
    f.close();
    {
      auto t = open_tier(o);
      std::vector<std::byte> out(c.payload.size());
      EXPECT_EQ(t->get(c.key, out).status().code(), StatusCode::kCorruption) << "payload byte " << pos;
      EXPECT_EQ(t->stats().forged_entries, 1u);
    }
    std::fstream back(file, std::ios::in | std::ios::out | std::ios::binary);
    back.seekp(std::streamoff(at + pos));
    back.put(orig);
  }
}

}  // namespace
}  // namespace kvtier
