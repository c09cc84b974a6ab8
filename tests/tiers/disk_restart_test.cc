// DiskTier restart over a directory that holds more than this tier's own
// regions: foreign files, regions of another geometry, format version or
// region size, and headers whose sizes lie. The tier opens, serves its own
// good regions, counts what it skipped, and leaves those files untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <sys/stat.h>
#include <unistd.h>

#include "common/page_hash.h"
#include "tier_test_util.h"
#include "tiers/disk_region_format.h"
#include "tiers/disk_tier.h"

namespace kvtier {
namespace {

using namespace testing_util;

DiskTierOptions options_for(const std::string& dir, const ChunkGeometry& g) {
  const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  return DiskTierOptions{.geometry = g, .dir = dir, .region_bytes = 4096 + 2 * entry, .capacity_bytes = 64 * (4096 + 2 * entry),
                         .queue_depth = 8, .sync_writes = false};
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string region_name(const std::string& dir, uint32_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "/region-%08x.kvr", id);
  return dir + name;
}

// Writes `count` chunks of namespace `ns` into a tier on `dir` and closes it.
std::vector<TestChunk> fill(const std::string& dir, const ChunkGeometry& g, uint64_t ns, uint32_t count) {
  auto t = DiskTier::create(options_for(dir, g));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < count; ++i) {
    chunks.push_back(make_chunk(g, test_ns(ns), i));
    EXPECT_TRUE((*t)->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok());
  }
  EXPECT_TRUE((*t)->flush().ok());
  return chunks;
}

void expect_served(DiskTier& t, const std::vector<TestChunk>& chunks) {
  for (const TestChunk& c : chunks) {
    std::vector<std::byte> out(c.payload.size());
    auto r = t.get(c.key, out);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(out, c.payload);
  }
}

// A copy of region 0 as region `id`, its header rewritten by `edit` (checksum recomputed).
template <class Edit>
void plant_edited_region(const std::string& dir, uint32_t id, Edit edit) {
  std::string bytes = file_bytes(region_name(dir, 0));
  ASSERT_GE(bytes.size(), kRegionHeaderBlock);
  RegionHeader rh;
  std::memcpy(&rh, bytes.data(), sizeof rh);
  rh.region_id = id;
  edit(rh);
  rh.checksum = checksum64(&rh, offsetof(RegionHeader, checksum));
  std::memcpy(bytes.data(), &rh, sizeof rh);
  write_file(region_name(dir, id), bytes);
}

// The region id a tier on `dir` takes next: past the last of its regions.
uint32_t next_region_id(const std::string& dir) {
  uint32_t next = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    unsigned id = 0;
    if (std::sscanf(e.path().filename().c_str(), "region-%8x.kvr", &id) == 1) next = std::max(next, id + 1);
  }
  return next;
}

TEST(DiskRestart, ForeignFileIsSkippedCountedAndLeftAlone) {
  TempDir dir;
  const auto g = small_geometry();
  const auto chunks = fill(dir.path(), g, 1, 7);
  const uint32_t foreign_id = next_region_id(dir.path());  // the name the tier would create next
  const std::string foreign = region_name(dir.path(), foreign_id);
  const std::string content = "not a region file, but named like one\n" + std::string(10000, 'x');
  write_file(foreign, content);
  {
    auto t = DiskTier::create(options_for(dir.path(), g));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ((*t)->open_report().skipped_regions, 1u);
    EXPECT_EQ((*t)->stats().skipped_files, 1u);  // what /v1/cache/stats and /metrics show
    EXPECT_EQ((*t)->open_report().entries, 7u);
    expect_served(**t, chunks);
    // A new region skips the foreign file's name, never writes over it.
    auto more = make_chunk(g, test_ns(1), 100);
    ASSERT_TRUE((*t)->put(more.key, more.hashes, more.payload).ok());
    ASSERT_TRUE((*t)->flush().ok());
    auto where = (*t)->locate(more.key);
    ASSERT_TRUE(where.ok());
    EXPECT_EQ(where->first.value(), foreign_id + 1);
  }
  EXPECT_EQ(file_bytes(foreign), content);
}

// Names a tier would create are never opened when they exist: a symlink named like its next
// region (its target outside the directory was truncated and filled with KV), and a file named
// like the last region but one (the ids ran on from it to ffffffff, a name a restart refuses, then
// wrapped over region 0).
TEST(DiskRestart, ASymlinkOrAHighIdNamedLikeARegionIsNeverWrittenThrough) {
  TempDir dir, outside;
  const auto g = small_geometry();
  fill(dir.path(), g, 1, 2);
  const std::string victim = outside.path() + "/victim.txt", high = region_name(dir.path(), 0xfffffffe);
  write_file(victim, "the operator's file\n");
  std::filesystem::create_symlink(victim, region_name(dir.path(), next_region_id(dir.path())));
  write_file(high, "junk\n");
  write_file(region_name(dir.path(), 0xfffffff0), "");  // empty: torn, removed, and no push of the ids either
  std::vector<TestChunk> chunks;
  {
    auto t = DiskTier::create(options_for(dir.path(), g));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ((*t)->open_report().skipped_regions, 2u);
    for (uint32_t i = 0; i < 12; ++i) {  // several new regions
      chunks.push_back(make_chunk(g, test_ns(2), i));
      ASSERT_TRUE((*t)->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok());
    }
    ASSERT_TRUE((*t)->flush().ok());
  }
  EXPECT_EQ(file_bytes(victim), "the operator's file\n");
  EXPECT_EQ(file_bytes(high), "junk\n");
  EXPECT_FALSE(std::filesystem::exists(region_name(dir.path(), 0xffffffff)));
  auto t = DiskTier::create(options_for(dir.path(), g));  // and a restart serves every chunk
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  expect_served(**t, chunks);
}

// The bytes of the region files in `dir`.
uint64_t region_files_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("region-", 0) == 0) n += e.file_size();
  return n;
}

// The capacity holds in bytes across restarts with a smaller region size: regions kept from a run
// with larger ones each counted as one of today's regions (twice the capacity right after open,
// and more as new regions were added).
TEST(DiskRestart, RegionsOfALargerRegionSizeCountAsTheirBytes) {
  TempDir dir;
  const auto g = small_geometry();
  DiskTierOptions big = options_for(dir.path(), g);
  big.region_bytes = 4096 + 8 * (big.region_bytes - 4096) / 2;  // eight entries a region
  big.capacity_bytes = 8 * big.region_bytes;
  {
    auto t = DiskTier::create(big);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    for (uint32_t i = 0; i < 48; ++i) {
      const TestChunk c = make_chunk(g, test_ns(1), i);
      ASSERT_TRUE((*t)->put(c.key, c.hashes, c.payload).ok());
    }
    ASSERT_TRUE((*t)->flush().ok());
  }
  ASSERT_GT(region_files_bytes(dir.path()), 4 * big.region_bytes);
  DiskTierOptions small = options_for(dir.path(), g);  // two entries a region
  small.capacity_bytes = 4 * small.region_bytes;
  auto t = DiskTier::create(small);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_LE(region_files_bytes(dir.path()), small.capacity_bytes);
  for (uint32_t i = 0; i < 24; ++i) {
    const TestChunk c = make_chunk(g, test_ns(2), i);
    ASSERT_TRUE((*t)->put(c.key, c.hashes, c.payload).ok());
    ASSERT_TRUE((*t)->flush().ok());
    EXPECT_LE(region_files_bytes(dir.path()), small.capacity_bytes) << "after chunk " << i;
  }
}

// One directory is one tier's at a time: a second tier (another server's) is refused with the
// holder's pid while the first lives, and opens once it is gone. Two servers on one directory
// deleted each other's regions as torn, wrote over them under the same ids, and held twice the
// capacity between them.
TEST(DiskRestart, ASecondTierOnTheSameDirectoryIsRefusedWhileTheFirstLives) {
  TempDir dir;
  const auto g = small_geometry();
  auto first = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = DiskTier::create(options_for(dir.path(), g));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("process " + std::to_string(getpid())), std::string::npos)
      << second.status().to_string();
  first->reset();
  EXPECT_TRUE(DiskTier::create(options_for(dir.path(), g)).ok());
}

// On a filesystem without O_DIRECT (tmpfs before Linux 6.6, ramfs, FUSE) a region is created
// buffered: the exclusive O_DIRECT open created the file before it failed, and the buffered retry
// found the name taken, for every id (the server could not start there). /dev/shm is such a
// filesystem on kernels before 6.6; on later ones this only checks the O_DIRECT path.
TEST(DiskRestart, RegionsAreCreatedWhereODirectIsRefused) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string dir = "/dev/shm/kvtier-disk-restart-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const auto g = small_geometry();
  {
    DiskTierOptions o = options_for(dir, g);
    o.direct_io = true;
    auto t = DiskTier::create(o);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const TestChunk c = make_chunk(g, test_ns(1), 1);
    ASSERT_TRUE((*t)->put(c.key, c.hashes, c.payload).ok());
    ASSERT_TRUE((*t)->flush().ok());
    expect_served(**t, {c});
    EXPECT_FALSE((*t)->degraded());
  }
  EXPECT_LE(std::distance(std::filesystem::directory_iterator(dir), {}), 3);  // a region or two and the lock
  std::filesystem::remove_all(dir);
}

// A FIFO named like a region is skipped: opening it for reading waited for a writer forever, and
// the server never started (nor stopped on SIGTERM).
TEST(DiskRestart, AFifoNamedLikeARegionIsSkippedWithoutWaiting) {
  TempDir dir;
  const auto g = small_geometry();
  const auto chunks = fill(dir.path(), g, 1, 3);
  ASSERT_EQ(mkfifo(region_name(dir.path(), 0x20).c_str(), 0644), 0);
  auto t = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().skipped_regions, 1u);
  expect_served(**t, chunks);
}

TEST(DiskRestart, RegionsOfAnotherGeometryAreSkippedNotFatal) {
  TempDir dir;
  const auto g = small_geometry();
  auto other = g;
  other.kv.num_layers = 2;
  const auto theirs = fill(dir.path(), other, 2, 3);
  std::map<std::string, std::string> before;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename() != "kvtier.lock") before[e.path().string()] = file_bytes(e.path().string());
  ASSERT_FALSE(before.empty());

  const auto ours = fill(dir.path(), g, 1, 5);  // opens over the other tier's regions
  auto t = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().skipped_regions, before.size());
  EXPECT_EQ((*t)->open_report().entries, 5u);
  expect_served(**t, ours);
  for (const TestChunk& c : theirs) EXPECT_EQ((*t)->exists_prefix(c.key.ns, std::span(&c.key.hash, 1)), 0u);
  t->reset();
  for (const auto& [path, bytes] : before) EXPECT_EQ(file_bytes(path), bytes) << path;

  // And the other geometry still finds its own chunks next to ours.
  auto back = DiskTier::create(options_for(dir.path(), other));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ((*back)->open_report().entries, 3u);
  expect_served(**back, theirs);
}

TEST(DiskRestart, HeadersWithHugeSizesOrOtherVersionsAreSkipped) {
  TempDir dir;
  const auto g = small_geometry();
  const auto chunks = fill(dir.path(), g, 1, 2);  // one region: 2 entries fill it
  plant_edited_region(dir.path(), 0x10, [](RegionHeader& rh) { rh.region_bytes = uint64_t(1) << 62; });
  plant_edited_region(dir.path(), 0x11, [](RegionHeader& rh) { rh.chunk_pages = UINT32_MAX; });
  plant_edited_region(dir.path(), 0x12, [](RegionHeader& rh) { rh.version = 2; });
  plant_edited_region(dir.path(), 0x13, [](RegionHeader& rh) { rh.region_bytes = 4097; });
  plant_edited_region(dir.path(), 0x14, [](RegionHeader& rh) { rh.region_id = 0x99; });
  std::map<std::string, std::string> planted;
  for (uint32_t id = 0x10; id <= 0x14; ++id) planted[region_name(dir.path(), id)] = file_bytes(region_name(dir.path(), id));

  auto t = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().skipped_regions, planted.size());
  EXPECT_EQ((*t)->open_report().regions, 1u);
  expect_served(**t, chunks);
  for (const TestChunk& c : chunks) EXPECT_EQ((*t)->locate(c.key)->first.value(), 0u);  // served from region 0 only
  t->reset();
  for (const auto& [path, bytes] : planted) EXPECT_EQ(file_bytes(path), bytes) << path;
}

TEST(DiskRestart, ReadsStopAtTheRegionSize) {
  TempDir dir;
  const auto g = small_geometry();
  const auto chunks = fill(dir.path(), g, 1, 2);
  // A region of ours grown far past its size (sparse): what lies past
  // region_bytes is not part of the region and is never read.
  std::filesystem::resize_file(region_name(dir.path(), 0), uint64_t(64) << 30);
  auto t = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().entries, 2u);
  EXPECT_EQ((*t)->open_report().dropped_corrupt + (*t)->open_report().dropped_torn, 0u);
  expect_served(**t, chunks);
}

// An entry header rewritten with a consistent checksum (what a crafted file
// can do) whose entry_bytes wraps the scan's offset around 2^64 back onto
// the first entry: the scan used to accept it and loop between the two forever.
TEST(DiskRestart, ForgedEntryLengthEndsTheScanInsteadOfLooping) {
  TempDir dir;
  const auto g = small_geometry();
  const auto chunks = fill(dir.path(), g, 1, 2);
  const std::string path = region_name(dir.path(), 0);
  std::string bytes = file_bytes(path);
  const uint64_t second = kRegionHeaderBlock + chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  ChunkHeader h;
  std::memcpy(&h, bytes.data() + second, sizeof h);
  h.entry_bytes = uint64_t(0) - (second - kRegionHeaderBlock);  // second + entry_bytes wraps to the first entry
  std::memcpy(bytes.data() + second, &h, sizeof h);
  const uint64_t head = checksum64(bytes.data() + second, offsetof(ChunkHeader, header_checksum));
  h.header_checksum = checksum64(bytes.data() + second + sizeof h, h.meta_bytes - sizeof h, head);
  std::memcpy(bytes.data() + second + offsetof(ChunkHeader, header_checksum), &h.header_checksum, 8);
  write_file(path, bytes);

  auto t = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().entries, 1u);
  EXPECT_EQ((*t)->open_report().dropped_corrupt, 1u);
  expect_served(**t, {chunks[0]});
}

TEST(DiskRestart, OurRegionWithACorruptHeaderIsRemovedAsBefore) {
  TempDir dir;
  const auto g = small_geometry();
  fill(dir.path(), g, 1, 2);
  const std::string path = region_name(dir.path(), 0);
  std::string bytes = file_bytes(path);
  bytes[20] ^= 0x5A;  // inside the checksummed header: ours, but torn
  write_file(path, bytes);
  const std::string zeros_path = region_name(dir.path(), 7);
  write_file(zeros_path, std::string(4096, '\0'));  // created, killed before its header landed
  auto t = DiskTier::create(options_for(dir.path(), g));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().dropped_torn, 2u);
  EXPECT_EQ((*t)->open_report().skipped_regions, 0u);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(zeros_path));
}

// A file named like a region but larger than any region this tier writes is not a torn one of its
// own, whatever its first bytes: it is left alone and counted (a 100 GiB sparse file of zeros was
// removed as "torn, ours").
TEST(DiskRestart, AFileLargerThanARegionIsNeverRemovedAsTorn) {
  TempDir dir;
  const auto g = small_geometry();
  const DiskTierOptions o = options_for(dir.path(), g);
  const std::string big = region_name(dir.path(), 9);
  { std::ofstream(big).put('\0'); }
  std::filesystem::resize_file(big, o.region_bytes * 4);  // sparse: zeros where a header would be
  auto t = DiskTier::create(o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->open_report().dropped_torn, 0u);
  EXPECT_EQ((*t)->open_report().skipped_regions, 1u);
  EXPECT_TRUE(std::filesystem::exists(big));
  EXPECT_EQ(std::filesystem::file_size(big), o.region_bytes * 4);
}

}  // namespace
}  // namespace kvtier
