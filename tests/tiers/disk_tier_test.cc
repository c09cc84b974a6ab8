// DiskTier specifics: restart, corruption, fault injection, crash consistency,
// and the pool → host → disk → host → pool round trip.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "io/fault_file_system.h"
#include "memory/block_pool.h"
#include "tier_test_util.h"
#include "tiers/disk_tier.h"
#include "tiers/host_tier.h"

namespace kvtier {
namespace {

using namespace testing_util;

// A clock that never moves: a degraded tier stays degraded however slow the machine (the recovery
// test drives its own clock).
const ManualClock& still_clock() {
  static const ManualClock clock;
  return clock;
}

DiskTierOptions disk_options(const std::string& dir, const ChunkGeometry& g, FileSystem* fs = nullptr) {
  const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  return DiskTierOptions{.geometry = g, .dir = dir, .region_bytes = 4096 + 2 * entry, .capacity_bytes = 64 * (4096 + 2 * entry),
                         .queue_depth = 8, .sync_writes = false, .fs = fs, .clock = &still_clock()};
}

std::vector<TestChunk> put_all(Tier& t, const ChunkGeometry& g, uint64_t ns, uint32_t count, uint32_t first = 0) {
  std::vector<TestChunk> out;
  for (uint32_t i = first; i < first + count; ++i) {
    out.push_back(make_chunk(g, test_ns(ns), i));
    EXPECT_TRUE(t.put(out.back().key, out.back().hashes, out.back().payload).ok());
  }
  return out;
}

void expect_exact(Tier& t, const TestChunk& c) {
  std::vector<std::byte> out(c.payload.size());
  auto r = t.get(c.key, out);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(out, c.payload);
}

// A chunk of an f32 geometry whose payload is finite values (every codec encodes them).
TestChunk finite_chunk(const ChunkGeometry& g, const PageHash& ns, uint32_t i) {
  TestChunk c = make_chunk(g, ns, i);
  std::mt19937 rng(5 + i);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (size_t at = 0; at < c.payload.size(); at += 4) {
    const float f = dist(rng);
    std::memcpy(c.payload.data() + at, &f, 4);
  }
  return c;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&b, 1);
}

// What a tenant's disk quota counts and trims (KVCache::set_tenant_quotas): bytes per namespace,
// kept through erase, a restart and reclaim; trimming drops the oldest entries of the namespaces
// asked for and nothing else.
TEST(DiskTier, NamespaceBytesAndTrimOldestFirst) {
  TempDir dir;
  auto g = small_geometry();
  const uint64_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  const PageHash a = test_ns(1), b = test_ns(2), c = test_ns(3);
  std::vector<TestChunk> in_a, in_b;
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    in_a = put_all(*t, g, 1, 5);
    in_b = put_all(*t, g, 2, 3);
    EXPECT_EQ(t->namespace_bytes({&a, 1}), 5 * entry);
    EXPECT_EQ(t->namespace_bytes({&b, 1}), 3 * entry);
    const PageHash both[] = {a, b, c};
    EXPECT_EQ(t->namespace_bytes(both), 8 * entry);
    ASSERT_TRUE(t->erase(in_a[4].key).ok());
    EXPECT_EQ(t->namespace_bytes({&a, 1}), 4 * entry);
    ASSERT_TRUE(t->flush().ok());
  }
  // Rebuilt on reopen; an erase is not written to the log, so the erased entry is back.
  auto t = DiskTier::create(disk_options(dir.path(), g)).value();
  EXPECT_EQ(t->namespace_bytes({&a, 1}), 5 * entry);
  EXPECT_EQ(t->namespace_bytes({&b, 1}), 3 * entry);
  EXPECT_EQ(t->trim_namespaces({&a, 1}, 2 * entry + entry / 2), 3u * g.chunk_pages);
  EXPECT_EQ(t->namespace_bytes({&a, 1}), 2 * entry);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(t->exists(in_a[i].key)) << i;
  expect_exact(*t, in_a[3]);
  expect_exact(*t, in_a[4]);
  for (auto& ch : in_b) expect_exact(*t, ch);
  EXPECT_EQ(t->trim_namespaces({&c, 1}, 0), 0u);
  EXPECT_EQ(t->trim_namespaces({&a, 1}, 0), 2u * g.chunk_pages);
  EXPECT_EQ(t->namespace_bytes({&a, 1}), 0u);
  EXPECT_EQ(t->namespace_bytes({&b, 1}), 3 * entry);
  // Reclaim takes the counts with it: fill past capacity with another namespace.
  (void)put_all(*t, g, 3, 200);
  EXPECT_EQ(t->namespace_bytes({&b, 1}), 0u);
  EXPECT_EQ(t->namespace_bytes({&c, 1}), t->stats().entries * entry);
}

// The log's numbering: a reader resumes after the last number it saw; a
// number outside the window, from before a time nobody listened, or from
// the future is a gap.
TEST(KvEventLog, ResumesInsideItsWindowAndReportsEveryGap) {
  KvEventLog log(4, std::chrono::milliseconds(0));  // stops recording as soon as the last listener leaves
  auto event = [](uint64_t i) { return KvEvent{KvEventKind::kStored, TierKind::kHost, TierKind::kHost, KvEventUnit::kPage, PageHash{i, i}}; };
  log.append(event(1));
  EXPECT_EQ(log.seq(), 0u);  // nobody listens
  std::vector<KvEvent> out;
  uint64_t last = 0;
  {
    KvEventLog::Subscription a(log);
    const uint64_t s0 = log.seq();
    for (uint64_t i = 1; i <= 3; ++i) log.append(event(i));
    ASSERT_TRUE(log.read_since(s0, 2, out, last));
    EXPECT_EQ(out, (std::vector<KvEvent>{event(1), event(2)}));
    EXPECT_EQ(last, s0 + 2);
    out.clear();
    ASSERT_TRUE(log.read_since(last, 10, out, last));
    EXPECT_EQ(out, std::vector<KvEvent>{event(3)});
    EXPECT_FALSE(log.wait_past(last, std::chrono::milliseconds(0)));
    for (uint64_t i = 4; i <= 8; ++i) log.append(event(i));  // the window keeps 4: 5..8
    out.clear();
    EXPECT_FALSE(log.read_since(last, 10, out, last));  // 4 fell out
    EXPECT_TRUE(out.empty());
    ASSERT_TRUE(log.read_since(log.seq() - 4, 10, out, last));
    EXPECT_EQ(out.front(), event(5));
    EXPECT_FALSE(log.read_since(log.seq() + 1, 10, out, last));  // not a number this log gave
  }
  const uint64_t before = log.seq();
  log.append(event(9));  // nobody listens: lost
  KvEventLog::Subscription b(log);
  out.clear();
  EXPECT_FALSE(log.read_since(before, 10, out, last));  // so a reader of the old run needs a snapshot
  EXPECT_TRUE(log.read_since(log.seq(), 10, out, last));
  EXPECT_TRUE(out.empty());
}

// Numbers from another log (the same server before a restart) are gaps, never this log's.
TEST(KvEventLog, ANumberFromAnotherRunIsAGap) {
  auto event = [](uint64_t i) { return KvEvent{KvEventKind::kStored, TierKind::kDisk, TierKind::kDisk, KvEventUnit::kChunk, PageHash{i, 1}}; };
  KvEventLog before, after;
  KvEventLog::Subscription a(before), b(after);
  for (uint64_t i = 0; i < 3; ++i) before.append(event(i));
  for (uint64_t i = 0; i < 5; ++i) after.append(event(i));
  std::vector<KvEvent> out;
  uint64_t last = 0;
  EXPECT_FALSE(after.read_since(before.seq(), 10, out, last));
  EXPECT_FALSE(after.read_since(before.seq() - 2, 10, out, last));
  EXPECT_TRUE(out.empty());
  EXPECT_LT(after.seq(), uint64_t(1) << 53);  // exact as a JSON number anywhere
}

// With a linger, a listener that comes back (a router reconnecting) resumes: what happened
// while it was away is still numbered after its last number. Past the linger the log stops.
TEST(KvEventLog, AListenerThatComesBackWithinTheLingerResumes) {
  ManualClock clock;
  KvEventLog log(16, std::chrono::seconds(60), &clock);
  auto event = [](uint64_t i) { return KvEvent{KvEventKind::kRemoved, TierKind::kDevice, TierKind::kDevice, KvEventUnit::kPage, PageHash{i, 0}}; };
  uint64_t seen = 0;
  {
    KvEventLog::Subscription a(log);
    log.append(event(1));
    seen = log.seq();
  }
  clock.advance(std::chrono::seconds(59));
  log.append(event(2));  // nobody listens, but the log lingers
  std::vector<KvEvent> out;
  uint64_t last = 0;
  {
    KvEventLog::Subscription again(log);
    ASSERT_TRUE(log.read_since(seen, 10, out, last));
    EXPECT_EQ(out, std::vector<KvEvent>{event(2)});
    seen = last;
  }
  clock.advance(std::chrono::seconds(61));
  log.append(event(3));  // past the linger: not recorded, and the log stops
  EXPECT_FALSE(log.active());
  EXPECT_EQ(log.seq(), seen);
  KvEventLog::Subscription late(log);
  EXPECT_FALSE(log.read_since(seen, 10, out, last));  // what it missed is gone: a snapshot is needed
}

// Chunk events (tiers/kv_events.h): nothing while no one listens; then every
// chunk stored, erased, reclaimed or found corrupt, by the hash of its last page.
TEST(DiskTier, ChunkEventsReportStoresAndEveryWayAnEntryLeaves) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  auto log = std::make_shared<KvEventLog>();
  auto t = DiskTier::create(disk_options(dir.path(), g, &fs)).value();
  t->set_event_log(log);
  (void)put_all(*t, g, 1, 2);  // no listener: not recorded
  EXPECT_EQ(log->seq(), 0u);

  KvEventLog::Subscription listening(*log);
  const uint64_t start = log->seq();
  auto chunks = put_all(*t, g, 1, 3, 10);
  ASSERT_TRUE(t->erase(chunks[0].key).ok());
  ASSERT_TRUE(t->flush().ok());
  fs.add_rule({.kind = FaultKind::kFlipBytes, .op = FaultOp::kRead, .times = 1, .path_contains = "region-"});
  std::vector<std::byte> out(chunks[1].payload.size());
  ASSERT_EQ(t->get(chunks[1].key, out).status().code(), StatusCode::kCorruption);
  fs.clear_rules();

  std::vector<KvEvent> ev;
  uint64_t last = 0;
  ASSERT_TRUE(log->read_since(start, 100, ev, last));
  auto chunk = [](KvEventKind k, const TestChunk& c) {
    return KvEvent{k, TierKind::kDisk, TierKind::kDisk, KvEventUnit::kChunk, c.key.hash};
  };
  const std::vector<KvEvent> want = {chunk(KvEventKind::kStored, chunks[0]), chunk(KvEventKind::kStored, chunks[1]),
                                     chunk(KvEventKind::kStored, chunks[2]), chunk(KvEventKind::kRemoved, chunks[0]),
                                     chunk(KvEventKind::kRemoved, chunks[1])};
  EXPECT_EQ(ev, want);
  EXPECT_EQ(last, log->seq());
  std::vector<PageHash> held = t->held_chunks();
  EXPECT_EQ(held.size(), 3u);  // the two put before anyone listened, and chunks[2]
  EXPECT_NE(std::find(held.begin(), held.end(), chunks[2].key.hash), held.end());

  // Reclaim: filling the tier past its capacity removes the oldest region's entries, each reported.
  ev.clear();
  const uint64_t before = log->seq();
  (void)put_all(*t, g, 2, 200);
  ASSERT_TRUE(log->read_since(before, 1000, ev, last));
  const auto removed = std::count_if(ev.begin(), ev.end(), [](const KvEvent& e) { return e.kind == KvEventKind::kRemoved; });
  EXPECT_EQ(uint64_t(removed), t->stats().evictions);
  EXPECT_GT(removed, 0);
  EXPECT_EQ(t->held_chunks().size(), t->stats().entries);
}

TEST(DiskTier, WarmRestartServesWhatWasDurable) {
  TempDir dir;
  auto g = small_geometry();
  std::vector<TestChunk> chunks;
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    chunks = put_all(*t, g, 1, 7);
    ASSERT_TRUE(t->flush().ok());
  }
  auto t = DiskTier::create(disk_options(dir.path(), g)).value();
  EXPECT_EQ(t->open_report().entries, 7u);
  EXPECT_EQ(t->open_report().dropped_corrupt + t->open_report().dropped_torn, 0u);
  for (auto& c : chunks) expect_exact(*t, c);
  // New writes go to a new region; everything keeps working.
  auto more = put_all(*t, g, 1, 3, 100);
  ASSERT_TRUE(t->flush().ok());
  for (auto& c : more) expect_exact(*t, c);
  // A tier of another geometry opens on the directory (after this one: a directory is one
  // tier's at a time) without misreading or removing these regions (disk_restart_test covers
  // the details).
  t.reset();
  auto other = g;
  other.kv.num_layers = 2;
  auto foreign = DiskTier::create(disk_options(dir.path(), other));
  ASSERT_TRUE(foreign.ok()) << foreign.status().to_string();
  EXPECT_EQ((*foreign)->open_report().entries, 0u);
  EXPECT_GT((*foreign)->open_report().skipped_regions, 0u);
}

// A tier reopened with another codec counts each entry at its own size: raw
// entries written before the switch are not counted at q8's size (a tenant's
// quota would then keep several times its bytes).
TEST(DiskTier, EntriesKeepTheirOwnSizeAfterTheCodecChanges) {
  TempDir dir;
  ChunkGeometry g{KVGeometry{.num_layers = 4, .num_kv_heads = 2, .head_dim = 32, .dtype = DType::kF32, .page_tokens = 4}, 4};
  const uint64_t raw_entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  const PageHash ns = test_ns(1);
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    (void)put_all(*t, g, 1, 3);
    ASSERT_TRUE(t->flush().ok());
  }
  ChunkGeometry q8 = g;
  q8.codec = KvCodec::kQ8;
  ASSERT_LT(chunk_entry_layout(q8, q8.chunk_pages, 4096).entry_bytes, raw_entry);
  auto opts = disk_options(dir.path(), q8);
  opts.accept_lossy = true;
  auto t = DiskTier::create(opts).value();
  ASSERT_EQ(t->open_report().entries, 3u);
  EXPECT_EQ(t->namespace_bytes({&ns, 1}), 3 * raw_entry);
  EXPECT_EQ(t->trim_namespaces({&ns, 1}, 2 * raw_entry), 1u * g.chunk_pages);
  EXPECT_EQ(t->namespace_bytes({&ns, 1}), 2 * raw_entry);
}

// An entry the tier refuses is absent to put as well as to get: after a restart with an exact
// codec, a q8 entry of a chunk does not stop the exact copy from being stored (before, put saw the
// key held, stored nothing and said Ok, and the prefix was recomputed on every later hit), and the
// exact copy is the one a further restart serves.
TEST(DiskTier, AnExactPutReplacesARefusedLossyEntry) {
  TempDir dir;
  ChunkGeometry g{KVGeometry{.num_layers = 4, .num_kv_heads = 2, .head_dim = 32, .dtype = DType::kF32, .page_tokens = 4}, 4};
  ChunkGeometry q8 = g;
  q8.codec = KvCodec::kQ8;
  const TestChunk c = finite_chunk(g, test_ns(1), 0);
  {
    auto opts = disk_options(dir.path(), q8);
    opts.accept_lossy = true;
    auto t = DiskTier::create(opts).value();
    ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
    ASSERT_TRUE(t->flush().ok());
  }
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    ASSERT_EQ(t->open_report().entries, 1u);
    EXPECT_FALSE(t->exists(c.key));
    ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
    EXPECT_TRUE(t->exists(c.key));
    expect_exact(*t, c);
    ASSERT_TRUE(t->flush().ok());
  }
  auto t = DiskTier::create(disk_options(dir.path(), g)).value();
  EXPECT_TRUE(t->exists(c.key));
  expect_exact(*t, c);
}

// Every region file stays open while the tier lives: a capacity of more regions than the process
// may open files is refused when the tier is made, naming the limit (before, the tier was made, and
// once its regions took the last descriptors a put failed with EMFILE, the tier was degraded for
// good and the server could not accept a connection); a soft limit below the hard one is raised.
TEST(DiskTier, ACapacityOfMoreRegionsThanOpenFilesIsRefusedWhenMade) {
  TempDir dir;
  const ChunkGeometry g = small_geometry();
  auto with_regions = [&](uint32_t regions) {
    DiskTierOptions o = disk_options(dir.path(), g);
    o.capacity_bytes = uint64_t(regions) * o.region_bytes;
    return o;
  };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // exit codes: 0 as expected; 2-4 which check failed; 5 the limits could not be set
    rlimit lim{300, 600};
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(5);
    auto refused = DiskTier::create(with_regions(400));  // 401 + 256 > 600
    if (refused.ok() || refused.status().message().find("ulimit -n") == std::string::npos) ::_exit(2);
    auto made = DiskTier::create(with_regions(200));  // 201 + 256 > 300, < 600: the soft limit is raised
    if (!made.ok()) ::_exit(3);
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur < 457) ::_exit(4);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 5) GTEST_SKIP() << "cannot set RLIMIT_NOFILE to 300/600 here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Only the region names the tier writes are its regions. An upper-case
// spelling of an id is left alone: read as a second region 10, its entries
// replaced the real one's in the index but were never reclaimed with it, so
// they outlived every eviction.
TEST(DiskTier, OnlyItsOwnRegionNamesAreRead) {
  TempDir dir;
  auto g = small_geometry();
  std::vector<TestChunk> chunks;
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    chunks = put_all(*t, g, 1, 22);  // two chunks a region: regions 0 to 10 (0xa)
    ASSERT_TRUE(t->flush().ok());
  }
  const std::string copy = dir.path() + "/region-0000000A.kvr";
  std::filesystem::copy_file(dir.path() + "/region-0000000a.kvr", copy);
  auto t = DiskTier::create(disk_options(dir.path(), g)).value();
  EXPECT_EQ(t->open_report().entries, 22u);
  EXPECT_EQ(t->open_report().skipped_regions, 0u);  // not even looked at
  expect_exact(*t, chunks[20]);
  (void)put_all(*t, g, 2, 200);  // every old region is reclaimed
  EXPECT_FALSE(t->exists(chunks[20].key));
  EXPECT_FALSE(t->exists(chunks[21].key));
  EXPECT_TRUE(std::filesystem::exists(copy));
}

// flush() with sync_writes makes a new region's directory entry durable too:
// a failed directory sync is its error, and the next flush tries it again.
TEST(DiskTier, FlushSyncsTheDirectoryAfterANewRegion) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  auto opts = disk_options(dir.path(), g, &fs);
  opts.sync_writes = true;
  auto t = DiskTier::create(opts).value();
  (void)put_all(*t, g, 1, 1);
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kSync, .nth = 2});  // the region file's sync, then the directory's
  EXPECT_FALSE(t->flush().ok());
  const uint64_t syncs = fs.calls(FaultOp::kSync);
  EXPECT_TRUE(t->flush().ok());
  EXPECT_EQ(fs.calls(FaultOp::kSync), syncs + 2);  // the file and, again, the directory
  EXPECT_TRUE(t->flush().ok());
  EXPECT_EQ(fs.calls(FaultOp::kSync), syncs + 3);  // no new region: the file only
}

// A queue whose ring failed is never handed another batch (requests may be
// left in it): reads and the writer each make a new one, and keep working.
TEST(DiskTier, AQueueWhoseRingFailedIsNotReused) {
  TempDir dir;
  auto g = small_geometry();
  std::vector<TestChunk> chunks;
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    chunks = put_all(*t, g, 1, 4);  // two regions on disk
    ASSERT_TRUE(t->flush().ok());
  }
  FaultFileSystem fs(FileSystem::posix());
  auto t = DiskTier::create(disk_options(dir.path(), g, &fs)).value();
  for (int i = 0; i < 2; ++i) expect_exact(*t, chunks[i]);
  const uint64_t healthy = fs.calls(FaultOp::kQueue);
  EXPECT_EQ(healthy, 1u);  // one read queue, reused
  fs.add_rule({.kind = FaultKind::kBrokenRing, .op = FaultOp::kAny, .nth = 1, .times = 0});
  for (int i = 0; i < 2; ++i) expect_exact(*t, chunks[2 + i]);
  EXPECT_EQ(fs.calls(FaultOp::kQueue), healthy + 1);  // the reused one broke on the first read: the second made another
  auto more = put_all(*t, g, 2, 6);                   // the writer's queue breaks too: three regions need new ones
  ASSERT_TRUE(t->flush().ok());
  EXPECT_GE(fs.calls(FaultOp::kQueue), healthy + 3);
  fs.clear_rules();
  for (auto& c : more) expect_exact(*t, c);
}

// A caller that gives its pages gets the layers there, every codec, from
// the file (through the tier's bounce buffer) or from an open region's
// buffer: the same bytes as through `out`, only the layers asked for, `out`
// untouched. Asked for them as they land (on_ready), it hears of each layer
// in order, once its bytes are in the pages.
TEST(DiskTier, LayersPassingThroughItsBuffersLandInTheCallersPages) {
  for (KvCodec codec : {KvCodec::kNone, KvCodec::kQ8, KvCodec::kF16}) {
    SCOPED_TRACE(std::string(kv_codec_name(codec)));
    TempDir dir;
    ChunkGeometry g{KVGeometry{.num_layers = 4, .num_kv_heads = 2, .head_dim = 32, .dtype = DType::kF32, .page_tokens = 4},
                    4, codec};
    const TestChunk c = finite_chunk(g, test_ns(9), 1);
    auto opts = disk_options(dir.path(), g);
    opts.accept_lossy = true;
    for (bool reopened : {false, true})
      for (bool as_they_land : {false, true}) {
        SCOPED_TRACE(reopened ? "read from the file" : "served from the open region's buffer");
        SCOPED_TRACE(as_they_land ? "reported as they land" : "not reported");
        auto t = DiskTier::create(opts).value();
        if (!reopened) {
          ASSERT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
        }
        ASSERT_TRUE(t->flush().ok());
        // Layers 1 and 2 through `out` (the reference), then into separate pages.
        const size_t slice = g.kv.layer_slice_bytes(), lb = g.layer_bytes(4);
        std::vector<std::byte> out(2 * lb);
        GetOp ref{.key = c.key, .first_layer = 1, .num_layers = 2, .out = out};
        t->get_batch({&ref, 1});
        ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();
        EXPECT_FALSE(ref.placed);
        std::vector<std::vector<std::byte>> pages(4, std::vector<std::byte>(g.kv.page_bytes(), std::byte{0x7F}));
        std::vector<std::byte*> ptrs;
        for (auto& p : pages) ptrs.push_back(p.data());
        auto layer_in_pages = [&](uint32_t l) {
          for (uint32_t p = 0; p < 4; ++p)
            if (std::memcmp(pages[p].data() + l * slice, out.data() + (l - 1) * lb + p * slice, slice) != 0) return false;
          return true;
        };
        std::vector<std::byte> untouched(2 * lb, std::byte{0x11}), staging = untouched;
        GetOp op{.key = c.key, .first_layer = 1, .num_layers = 2, .out = staging};
        op.pages = ptrs;
        std::vector<uint32_t> reported;
        if (as_they_land)
          op.on_ready = [&](uint32_t end, bool placed) {
            EXPECT_TRUE(placed);
            for (uint32_t l = reported.empty() ? 1 : reported.back(); l < end; ++l) EXPECT_TRUE(layer_in_pages(l)) << l;
            reported.push_back(end);
          };
        t->get_batch({&op, 1});
        ASSERT_TRUE(op.status.ok()) << op.status.to_string();
        EXPECT_TRUE(op.placed);
        EXPECT_EQ(staging, untouched);
        if (as_they_land) {
          ASSERT_FALSE(reported.empty());
          EXPECT_TRUE(std::is_sorted(reported.begin(), reported.end()));
          EXPECT_EQ(std::adjacent_find(reported.begin(), reported.end()), reported.end()) << "an end reported twice";
          EXPECT_EQ(reported.back(), 3u);
          if (reopened && g.stored_layer_bytes(4, codec) % kIoAlign == 0) {  // layers read on their own: reported one by one
            EXPECT_EQ(reported.size(), 2u) << "read from the file: each layer as it lands";
          }
        }
        for (uint32_t p = 0; p < 4; ++p)
          for (uint32_t l = 0; l < 4; ++l) {
            const std::byte* got = pages[p].data() + l * slice;
            if (l == 0 || l == 3) {
              EXPECT_TRUE(std::all_of(got, got + slice, [](std::byte b) { return b == std::byte{0x7F}; })) << p << " " << l;
            } else {
              EXPECT_EQ(std::memcmp(got, out.data() + (l - 1) * lb + p * slice, slice), 0) << p << " " << l;
            }
          }
        // A caller whose page count differs gets the layers in `out`, unplaced.
        GetOp fewer{.key = c.key, .first_layer = 1, .num_layers = 2, .out = staging};
        fewer.pages = std::span<std::byte* const>(ptrs).first(3);
        t->get_batch({&fewer, 1});
        ASSERT_TRUE(fewer.status.ok());
        EXPECT_FALSE(fewer.placed);
        EXPECT_EQ(staging, out);
      }
  }
}

// Encoded entries read from the file pass through bounce buffers that are
// slices of one per-thread arena: a batch of several chunks, some at an
// unaligned layer range, gives each chunk its own bytes, as a get of that
// chunk alone does.
TEST(DiskTier, ABatchOfEncodedChunksGivesEachItsOwnLayers) {
  TempDir dir;
  const ChunkGeometry g{KVGeometry{.num_layers = 3, .num_kv_heads = 2, .head_dim = 32, .dtype = DType::kF32, .page_tokens = 4},
                        4, KvCodec::kQ8};
  auto opts = disk_options(dir.path(), g);
  opts.accept_lossy = true;
  std::vector<TestChunk> chunks;
  {
    auto t = DiskTier::create(opts).value();
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (uint32_t i = 0; i < 6; ++i) {
      chunks.push_back(make_chunk(g, test_ns(4), i));
      for (size_t b = 0; b < chunks.back().payload.size(); b += 4) {  // finite values: q8 encodes them
        const float f = dist(rng);
        std::memcpy(chunks.back().payload.data() + b, &f, 4);
      }
      ASSERT_TRUE(t->put(chunks.back().key, chunks.back().hashes, chunks.back().payload).ok());
    }
    ASSERT_TRUE(t->flush().ok());
  }
  auto t = DiskTier::create(opts).value();  // reopened: every read comes from the file
  const size_t lb = g.layer_bytes(4);
  auto first_layer = [](size_t i) { return uint32_t(i % 2); };  // odd chunks start at layer 1
  std::vector<std::vector<std::byte>> alone;
  for (size_t i = 0; i < chunks.size(); ++i) {
    alone.emplace_back((3 - first_layer(i)) * lb);
    GetOp op{.key = chunks[i].key, .first_layer = first_layer(i), .out = alone.back()};
    t->get_batch({&op, 1});
    ASSERT_TRUE(op.status.ok()) << i << ": " << op.status.to_string();
  }
  for (size_t i = 1; i < chunks.size(); ++i) EXPECT_NE(alone[i], alone[i - 1]);
  std::vector<std::vector<std::byte>> outs;
  std::vector<GetOp> ops;
  for (size_t i = 0; i < chunks.size(); ++i) {
    outs.emplace_back((3 - first_layer(i)) * lb, std::byte{0x33});
    ops.push_back(GetOp{.key = chunks[i].key, .first_layer = first_layer(i), .out = outs.back()});
  }
  t->get_batch(ops);
  for (size_t i = 0; i < chunks.size(); ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << i << ": " << ops[i].status.to_string();
    EXPECT_EQ(ops[i].codec, KvCodec::kQ8);
    EXPECT_EQ(outs[i], alone[i]) << i;
  }
}

TEST(DiskTier, FlippedBytesFailExactlyTheAffectedEntries) {
  TempDir dir;
  auto g = small_geometry();
  std::vector<TestChunk> chunks;
  std::vector<std::pair<RegionId, uint64_t>> where;
  {
    auto t = DiskTier::create(disk_options(dir.path(), g)).value();
    chunks = put_all(*t, g, 2, 6);  // regions hold two chunks each
    ASSERT_TRUE(t->flush().ok());
    for (auto& c : chunks) where.push_back(t->locate(c.key).value());
    for (auto& c : chunks) expect_exact(*t, c);
  }
  const auto lay = chunk_entry_layout(g, g.chunk_pages, 4096);
  // Payload of chunk 1, header (page-hash area) of chunk 3 (the last in its region).
  ASSERT_EQ(where[3].first, where[2].first);
  DiskTierOptions o = disk_options(dir.path(), g);
  auto path = [&](int i) {
    char name[32];
    std::snprintf(name, sizeof name, "/region-%08x.kvr", where[i].first.value());
    return dir.path() + name;
  };
  flip_byte(path(1), where[1].second + lay.payload_offset + g.layer_bytes(g.chunk_pages) * 3 + 17);
  flip_byte(path(3), where[3].second + 130);
  {
    // Lazy verification: the bad payload is found on read, the bad header at open.
    o.verify_on_open = false;
    auto t = DiskTier::create(o).value();
    EXPECT_EQ(t->open_report().dropped_corrupt, 1u);
    EXPECT_FALSE(t->exists(chunks[3].key));
    std::vector<std::byte> out(chunks[1].payload.size());
    EXPECT_EQ(t->get(chunks[1].key, out).status().code(), StatusCode::kCorruption);
    EXPECT_EQ(t->stats().checksum_failures, 2u);
    EXPECT_FALSE(t->exists(chunks[1].key));  // dropped, never served again
    // Only layer 3 was hit: layers 0..2 still verify on their own.
    for (int i : {0, 2, 4, 5}) expect_exact(*t, chunks[i]);
  }
  o.verify_on_open = true;
  auto t = DiskTier::create(o).value();
  EXPECT_EQ(t->open_report().dropped_corrupt, 2u);
  EXPECT_EQ(t->open_report().entries, 4u);
  for (int i : {0, 2, 4, 5}) expect_exact(*t, chunks[i]);
}

// Layer slices of whole 4096-byte blocks: reads go straight into the
// caller's buffer as several I/Os per chunk (one layer each here), and each
// unit is verified as its own I/O completes.
TEST(DiskTier, AlignedChunksAreReadAndVerifiedLayerByLayer) {
  TempDir dir;
  const ChunkGeometry g{KVGeometry{.num_layers = 4, .num_kv_heads = 2, .head_dim = 64, .dtype = DType::kF32, .page_tokens = 4}, 4};
  const size_t lb = g.layer_bytes(g.chunk_pages);
  ASSERT_EQ(lb % 4096, 0u);
  FaultFileSystem fs(FileSystem::posix());
  DiskTierOptions o = disk_options(dir.path(), g, &fs);
  o.io_block_bytes = lb;
  std::vector<TestChunk> chunks;
  std::vector<std::pair<RegionId, uint64_t>> where;
  {
    auto t = DiskTier::create(o).value();
    chunks = put_all(*t, g, 5, 4);
    ASSERT_TRUE(t->flush().ok());
    for (auto& c : chunks) where.push_back(t->locate(c.key).value());
  }
  o.verify_on_open = false;  // the flipped payload byte below is found by the read
  const auto lay = chunk_entry_layout(g, g.chunk_pages, 4096);
  {
    auto t = DiskTier::create(o).value();
    flip_byte(t->region_path(where[1].first), where[1].second + lay.payload_offset + 2 * lb + 100);
  }
  auto t = DiskTier::create(o).value();
  AlignedBuffer out(g.max_payload_bytes());
  // Layers 0..1 of the damaged chunk verify on their own.
  GetOp front{.key = chunks[1].key, .num_layers = 2, .out = out.span()};
  t->get_batch(std::span(&front, 1));
  ASSERT_TRUE(front.status.ok()) << front.status.to_string();
  EXPECT_EQ(std::memcmp(out.data(), chunks[1].payload.data(), 2 * lb), 0);
  // All layers: exact for the good chunks, Corruption for the damaged one, which is then dropped.
  std::vector<AlignedBuffer> outs;
  std::vector<GetOp> ops;
  for (auto& c : chunks) {
    outs.emplace_back(g.max_payload_bytes());
    ops.push_back(GetOp{.key = c.key, .out = outs.back().span()});
  }
  t->get_batch(ops);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i == 1) {
      EXPECT_EQ(ops[i].status.code(), StatusCode::kCorruption);
      continue;
    }
    ASSERT_TRUE(ops[i].status.ok()) << ops[i].status.to_string();
    EXPECT_EQ(std::memcmp(outs[i].data(), chunks[i].payload.data(), chunks[i].payload.size()), 0);
  }
  EXPECT_EQ(t->stats().checksum_failures, 1u);
  EXPECT_FALSE(t->exists(chunks[1].key));
  // A failed read in the middle of a chunk fails that chunk alone.
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kRead, .nth = 3, .times = 1, .path_contains = "region-"});
  GetOp hit{.key = chunks[2].key, .out = outs[2].span()};
  t->get_batch(std::span(&hit, 1));
  EXPECT_EQ(hit.status.code(), StatusCode::kIOError);
  fs.clear_rules();
  for (size_t i : {0, 2, 3}) expect_exact(*t, chunks[i]);
}

// Region writes are cut at io_block_bytes boundaries of the file, wherever
// a stretch of puts begins: an op straddling one made later reads of the
// region slower (docs/PERF.md). Entries of three 4 KiB blocks written one
// stretch each start at every offset modulo two blocks.
TEST(DiskTier, WritesNeverStraddleAnIoBlockBoundary) {
  TempDir dir;
  const ChunkGeometry g{KVGeometry{.num_layers = 4, .num_kv_heads = 2, .head_dim = 8, .dtype = DType::kF32, .page_tokens = 4}, 4};
  ASSERT_EQ(chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes, 3u * 4096);
  FaultFileSystem fs(FileSystem::posix());
  DiskTierOptions o = disk_options(dir.path(), g, &fs);
  o.region_bytes = 4096 + 16 * 3 * 4096;
  o.io_block_bytes = 2 * 4096;
  o.write_stretch_bytes = 4096;  // every put is its own stretch
  auto t = DiskTier::create(o).value();
  fs.record(true);
  auto chunks = put_all(*t, g, 9, 20);  // crosses into a second region
  ASSERT_TRUE(t->flush().ok());
  size_t writes = 0;
  for (const auto& c : fs.recorded()) {
    if (c.op != FaultOp::kWrite || c.path.find("region-") == std::string::npos) continue;
    ++writes;
    EXPECT_LE(c.len, o.io_block_bytes);
    EXPECT_EQ(c.offset / o.io_block_bytes, (c.offset + c.len - 1) / o.io_block_bytes) << c.offset << "+" << c.len;
  }
  EXPECT_GT(writes, 20u);
  for (auto& c : chunks) expect_exact(*t, c);
}

struct DiskFault {
  FaultKind kind;
  FaultOp op;
  StatusCode expect;  // status of the faulted call
};

class DiskFaults : public ::testing::TestWithParam<DiskFault> {};

TEST_P(DiskFaults, FaultGivesStatusNeverWrongBytes) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  auto t = DiskTier::create(disk_options(dir.path(), g, &fs)).value();
  auto durable = put_all(*t, g, 3, 4);
  ASSERT_TRUE(t->flush().ok());
  const DiskFault f = GetParam();
  fs.add_rule({.kind = f.kind, .op = f.op, .times = 0, .path_contains = "region-", .delay = std::chrono::microseconds(200)});
  if (f.op == FaultOp::kWrite || f.op == FaultOp::kOpen) {
    std::vector<TestChunk> more;
    Status s;
    for (uint32_t i = 50; i < 55 && s.ok(); ++i) {  // crosses into a new region
      more.push_back(make_chunk(g, test_ns(3), i));
      s = t->put(more.back().key, more.back().hashes, more.back().payload);
    }
    if (s.ok()) s = t->flush();
    EXPECT_EQ(s.code(), f.expect) << s.to_string();
    if (f.expect != StatusCode::kOk) {
      EXPECT_TRUE(t->degraded());
      auto c = make_chunk(g, test_ns(3), 77);
      EXPECT_EQ(t->put(c.key, c.hashes, c.payload).code(), StatusCode::kUnavailable);
    }
    fs.clear_rules();
    for (auto& c : durable) expect_exact(*t, c);  // nothing durable lost
    t.reset();
    auto again = DiskTier::create(disk_options(dir.path(), g)).value();
    for (auto& c : durable) expect_exact(*again, c);
    std::vector<std::byte> out(g.max_payload_bytes());
    for (auto& c : more) {  // whatever survived the fault is exact
      auto r = again->get(c.key, out);
      if (r.ok()) {
        EXPECT_TRUE(std::equal(c.payload.begin(), c.payload.end(), out.begin()));
      }
    }
  } else {
    std::vector<std::byte> out(durable[0].payload.size());
    auto r = t->get(durable[0].key, out);
    EXPECT_EQ(r.status().code(), f.expect) << r.status().to_string();
    if (r.ok()) {
      EXPECT_TRUE(std::equal(out.begin(), out.end(), durable[0].payload.begin()));
    }
    fs.clear_rules();
    for (size_t i = 1; i < durable.size(); ++i) expect_exact(*t, durable[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, DiskFaults,
    ::testing::Values(DiskFault{FaultKind::kNoSpace, FaultOp::kWrite, StatusCode::kNoSpace},
                      DiskFault{FaultKind::kError, FaultOp::kWrite, StatusCode::kIOError},
                      DiskFault{FaultKind::kShortIo, FaultOp::kWrite, StatusCode::kIOError},
                      DiskFault{FaultKind::kError, FaultOp::kOpen, StatusCode::kIOError},
                      DiskFault{FaultKind::kError, FaultOp::kRead, StatusCode::kIOError},
                      DiskFault{FaultKind::kShortIo, FaultOp::kRead, StatusCode::kIOError},
                      DiskFault{FaultKind::kFlipBytes, FaultOp::kRead, StatusCode::kCorruption},
                      DiskFault{FaultKind::kDelay, FaultOp::kRead, StatusCode::kOk}));

// Stretches of the active region reach the file while later puts are still
// buffered; a copy of the directory taken then (what a crash would leave)
// reopens with exactly the written entries.
TEST(DiskTier, WrittenStretchesReopenWhileLaterPutsAreBuffered) {
  TempDir dir, copy;
  auto g = small_geometry();
  const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  DiskTierOptions o = disk_options(dir.path(), g);
  o.region_bytes = 4096 + 8 * entry;
  o.write_stretch_bytes = 2 * entry;
  auto t = DiskTier::create(o).value();
  auto chunks = put_all(*t, g, 11, 5);
  ASSERT_TRUE(t->flush().ok());
  auto more = put_all(*t, g, 11, 3, 5);  // 5 and 6 fill a stretch; 7 stays in the buffer
  const std::string region = t->region_path(t->locate(more[0].key).value().first);
  const uint64_t want = 4096 + 7 * entry;
  for (int i = 0; i < 20000 && std::filesystem::file_size(region) < want; ++i) ::usleep(1000);
  ASSERT_GE(std::filesystem::file_size(region), want) << "the filled stretch was never written";
  EXPECT_EQ(std::filesystem::file_size(region), want) << "the unfilled stretch was written";
  std::filesystem::copy(dir.path(), copy.path() + "/d");
  for (auto& c : chunks) expect_exact(*t, c);
  for (auto& c : more) expect_exact(*t, c);  // the buffered one is served from memory
  {
    auto again = DiskTier::create(disk_options(copy.path() + "/d", g)).value();
    EXPECT_EQ(again->open_report().entries, 7u);
    EXPECT_EQ(again->open_report().dropped_corrupt + again->open_report().dropped_torn, 0u);
    for (auto& c : chunks) expect_exact(*again, c);
    expect_exact(*again, more[0]);
    expect_exact(*again, more[1]);
    std::vector<std::byte> out(g.max_payload_bytes());
    EXPECT_EQ(again->get(more[2].key, out).status().code(), StatusCode::kNotFound);
  }
  ASSERT_TRUE(t->flush().ok());
  t.reset();
  auto last = DiskTier::create(disk_options(dir.path(), g)).value();
  for (auto& c : more) expect_exact(*last, c);
}

// A region file cut short while the tier runs: the entries past the cut fail their reads (counted),
// leave the index, and can be stored again; those before it still serve. (They stayed indexed, so
// every later lookup planned a read that failed, and the chunk was never stored again.)
TEST(DiskTier, EntriesPastARegionCutShortLeaveTheIndex) {
  TempDir dir;
  auto g = small_geometry();
  DiskTierOptions o = disk_options(dir.path(), g);
  o.region_bytes = 4096 + 2 * chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;  // two entries a region
  auto t = DiskTier::create(o).value();
  auto chunks = put_all(*t, g, 14, 6);  // regions 0, 1, 2: the first is on disk only
  ASSERT_TRUE(t->flush().ok());
  const auto cut = t->locate(chunks[1].key).value();
  ASSERT_EQ(cut.first, t->locate(chunks[0].key).value().first);
  std::filesystem::resize_file(t->region_path(cut.first), cut.second);  // chunk 1's entry is gone
  std::vector<std::byte> out(g.max_payload_bytes());
  EXPECT_EQ(t->get(chunks[1].key, out).status().code(), StatusCode::kIOError);
  EXPECT_GE(t->stats().io_errors, 1u);
  EXPECT_FALSE(t->exists(chunks[1].key));
  expect_exact(*t, chunks[0]);
  for (int i = 2; i < 6; ++i) expect_exact(*t, chunks[i]);
  ASSERT_TRUE(t->put(chunks[1].key, chunks[1].hashes, chunks[1].payload).ok());
  ASSERT_TRUE(t->flush().ok());
  expect_exact(*t, chunks[1]);
}

// A reclaimed region whose file cannot be removed (immutable, a read-only remount) is counted and
// kept as the last error: it was ignored, and the directory outgrew its capacity unnoticed.
TEST(DiskTier, ARegionThatCannotBeRemovedIsCounted) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  DiskTierOptions o = disk_options(dir.path(), g, &fs);
  const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  o.region_bytes = 4096 + 2 * entry;
  o.capacity_bytes = 3 * o.region_bytes;  // the fourth region reclaims the first
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kRemove, .nth = 1, .times = 0, .path_contains = "region-"});
  auto t = DiskTier::create(o).value();
  auto chunks = put_all(*t, g, 15, 10);
  ASSERT_TRUE(t->flush().ok());
  EXPECT_GT(t->stats().evictions, 0u);
  EXPECT_GT(fs.fired(), 0u);
  EXPECT_GE(t->stats().io_errors, fs.fired());
  EXPECT_NE(t->stats().last_error.find("remove"), std::string::npos) << t->stats().last_error;
  EXPECT_FALSE(t->degraded());  // reads and writes go on
  expect_exact(*t, chunks.back());
}

// A put whose new region's file the file system holds (frozen, hung) does not hold the tier:
// lookups, gets and stats go on meanwhile. (The file was created under the tier's lock, and every
// request's lookup waited behind it: with the old code this test never gets past exists().)
TEST(DiskTier, AStalledRegionCreateHoldsOnlyItsPut) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  DiskTierOptions o = disk_options(dir.path(), g, &fs);
  o.region_bytes = 4096 + 2 * chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;  // two entries a region
  auto t = DiskTier::create(o).value();
  auto chunks = put_all(*t, g, 16, 2);  // the first region, full
  ASSERT_TRUE(t->flush().ok());
  fs.add_rule({.kind = FaultKind::kHold, .op = FaultOp::kOpen, .nth = 1, .times = 1, .path_contains = "region-"});
  auto next = make_chunk(g, test_ns(16), 2);
  std::atomic<bool> put_done{false};
  Status put_status;
  std::thread putter([&] {
    put_status = t->put(next.key, next.hashes, next.payload);  // needs a new region: its open is held
    put_done = true;
  });
  while (fs.fired() == 0) std::this_thread::yield();
  EXPECT_TRUE(t->exists(chunks[0].key));
  expect_exact(*t, chunks[1]);
  EXPECT_EQ(t->stats().entries, 2u);
  EXPECT_FALSE(put_done.load());
  fs.release_held();
  putter.join();
  ASSERT_TRUE(put_status.ok()) << put_status.to_string();
  ASSERT_TRUE(t->flush().ok());
  expect_exact(*t, next);
}

// A write that fails in the writer thread degrades the tier: the failure
// reaches the next put or flush, and no entry whose bytes missed the file is
// served, then or after reopening.
TEST(DiskTier, FailedBackgroundWriteDropsTheLostEntries) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  const size_t entry = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;
  DiskTierOptions o = disk_options(dir.path(), g, &fs);
  o.region_bytes = 4096 + 6 * entry;
  o.write_stretch_bytes = entry;  // one write per put
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kWrite, .nth = 4, .times = 1, .path_contains = "region-"});
  auto t = DiskTier::create(o).value();
  Status first;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 10; ++i) {
    chunks.push_back(make_chunk(g, test_ns(12), i));
    Status s = t->put(chunks.back().key, chunks.back().hashes, chunks.back().payload);
    if (first.ok()) first = s;
  }
  Status f = t->flush();
  if (first.ok()) first = f;
  EXPECT_EQ(first.code(), StatusCode::kIOError) << first.to_string();
  EXPECT_TRUE(t->degraded());
  EXPECT_GE(t->stats().io_errors, 1u);
  EXPECT_NE(t->stats().last_error.find("IOError"), std::string::npos) << t->stats().last_error;  // what degraded it
  EXPECT_EQ(t->flush().code(), StatusCode::kUnavailable);
  auto late = make_chunk(g, test_ns(12), 99);
  EXPECT_EQ(t->put(late.key, late.hashes, late.payload).code(), StatusCode::kUnavailable);
  std::vector<std::byte> out(g.max_payload_bytes());
  for (uint32_t i = 0; i < 3; ++i) expect_exact(*t, chunks[i]);  // written before the failed write
  for (uint32_t i = 3; i < 10; ++i)  // nothing that was not on disk when the failure struck is served
    EXPECT_EQ(t->get(chunks[i].key, out).status().code(), StatusCode::kNotFound) << i;
  t.reset();
  auto again = DiskTier::create(disk_options(dir.path(), g)).value();
  EXPECT_EQ(again->open_report().dropped_corrupt, 0u);
  for (uint32_t i = 0; i < 3; ++i) expect_exact(*again, chunks[i]);
  // The failed write left a hole: the scan of that region ends there. Writes
  // that completed after it (other regions) are intact and may be served.
  EXPECT_EQ(again->get(chunks[3].key, out).status().code(), StatusCode::kNotFound);
  for (uint32_t i = 4; i < 10; ++i) {
    auto r = again->get(chunks[i].key, out);
    if (r.ok()) {
      EXPECT_TRUE(std::equal(chunks[i].payload.begin(), chunks[i].payload.end(), out.begin())) << i;
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << i;
    }
  }
}

// A disk that filled up and then got room again: the tier degraded by the failed write tries
// again once its wait is over, in a new region, and takes writes without a restart; while the disk
// still fails each try degrades it again for twice as long. Nothing lost in between is served.
TEST(DiskTier, ADegradedTierWritesAgainOnceTheDiskHasRoom) {
  TempDir dir;
  auto g = small_geometry();
  FaultFileSystem fs(FileSystem::posix());
  ManualClock clock;
  DiskTierOptions o = disk_options(dir.path(), g, &fs);
  o.clock = &clock;
  o.write_stretch_bytes = chunk_entry_layout(g, g.chunk_pages, 4096).entry_bytes;  // one write per put
  auto t = DiskTier::create(o).value();
  const auto before = put_all(*t, g, 5, 3);
  ASSERT_TRUE(t->flush().ok());
  fs.add_rule({.kind = FaultKind::kNoSpace, .op = FaultOp::kWrite, .times = 0, .path_contains = "region-"});
  auto lost = make_chunk(g, test_ns(5), 10);
  ASSERT_TRUE(t->put(lost.key, lost.hashes, lost.payload).ok());  // accepted; its write fails in the writer
  EXPECT_EQ(t->flush().code(), StatusCode::kNoSpace);
  EXPECT_TRUE(t->degraded());
  EXPECT_EQ(t->stats().degraded_episodes, 1u);
  auto c = make_chunk(g, test_ns(5), 11);
  clock.advance(o.retry_after - std::chrono::milliseconds(1));
  EXPECT_TRUE(t->degraded());
  EXPECT_EQ(t->put(c.key, c.hashes, c.payload).code(), StatusCode::kUnavailable);
  // The wait is over, the disk still full: the try fails at its write and the wait doubles.
  clock.advance(std::chrono::milliseconds(1));
  EXPECT_FALSE(t->degraded());
  EXPECT_TRUE(t->put(c.key, c.hashes, c.payload).ok());
  EXPECT_EQ(t->flush().code(), StatusCode::kNoSpace);
  EXPECT_TRUE(t->degraded());
  EXPECT_EQ(t->stats().degraded_episodes, 2u);
  clock.advance(o.retry_after);
  EXPECT_TRUE(t->degraded()) << "the second wait is twice the first";
  // Room again: the next try writes, and the tier stays healthy.
  fs.clear_rules();
  clock.advance(o.retry_after);
  EXPECT_FALSE(t->degraded());
  const auto after = put_all(*t, g, 5, 4, 20);
  ASSERT_TRUE(t->flush().ok());
  EXPECT_FALSE(t->degraded());
  EXPECT_EQ(t->stats().degraded_episodes, 2u);
  std::vector<std::byte> out(g.max_payload_bytes());
  for (const auto& k : {lost, c}) EXPECT_EQ(t->get(k.key, out).status().code(), StatusCode::kNotFound);
  for (const auto& k : before) expect_exact(*t, k);
  for (const auto& k : after) expect_exact(*t, k);
  t.reset();
  auto again = DiskTier::create(disk_options(dir.path(), g)).value();
  for (const auto& k : before) expect_exact(*again, k);
  for (const auto& k : after) expect_exact(*again, k);
  for (const auto& k : {lost, c}) EXPECT_EQ(again->get(k.key, out).status().code(), StatusCode::kNotFound);
}

// The directory and its files hold every tenant's KV: they are the service user's alone, whatever
// the umask (they were 0755 and 0644, readable by every local user).
TEST(DiskTier, ItsDirectoryAndFilesAreTheOwnersAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/new/cache";
  auto g = small_geometry();
  const mode_t old = ::umask(022);
  auto t = DiskTier::create(disk_options(path, g)).value();
  ::umask(old);
  put_all(*t, g, 7, 3);
  ASSERT_TRUE(t->flush().ok());
  size_t files = 0;
  for (const std::string& p : {dir.path() + "/new", path}) EXPECT_EQ(std::filesystem::status(p).permissions() & std::filesystem::perms::all, std::filesystem::perms::owner_all) << p;
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    ++files;
    EXPECT_EQ(e.status().permissions() & (std::filesystem::perms::group_all | std::filesystem::perms::others_all), std::filesystem::perms::none) << e.path();
  }
  EXPECT_GE(files, 2u);  // a region and the lock
}

TEST(DiskTier, UnusableDirectoryIsAStatus) {
  FaultFileSystem fs(FileSystem::posix());
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kOpen, .times = 0});
  auto g = small_geometry();
  EXPECT_FALSE(DiskTier::create(disk_options("/tmp/kvtier-never-created-dir/x", g, &fs)).ok());
  EXPECT_FALSE(DiskTier::create(disk_options("/proc/kvtier-nope", g)).ok());
}

TEST(DiskTier, FallsBackToBufferedIoOnTmpfs) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP();
  TempDir dir("/dev/shm");
  auto g = small_geometry();
  auto t = DiskTier::create(disk_options(dir.path(), g)).value();
  auto chunks = put_all(*t, g, 5, 5);
  ASSERT_TRUE(t->flush().ok());
  // Older kernels refuse O_DIRECT on tmpfs (the fallback path); newer ones accept it. Both must work.
  RecordProperty("direct_io", t->direct_io_in_effect() ? "yes" : "no");
  for (auto& c : chunks) expect_exact(*t, c);
}

// The crash test's child writes kCrashChunks chunks of one round, flushing after every third and
// reporting over a pipe how many are durable; the parent kills it only after a report, so the
// kill lands between writes on a slow (instrumented, loaded) machine as on a fast one.
constexpr int kCrashRounds = 20;
constexpr uint32_t kCrashChunks = 90;  // 45 regions: a round never reclaims its own regions
constexpr uint32_t kCrashFlushEvery = 3;

[[noreturn]] void write_until_killed(const std::string& dir, const ChunkGeometry& g, uint32_t base, int report_fd) {
  auto t = DiskTier::create(disk_options(dir, g));
  if (!t.ok()) _exit(3);
  for (uint32_t written = 1; written <= kCrashChunks; ++written) {
    auto c = make_chunk(g, test_ns(6), base + written - 1);
    if (!(*t)->put(c.key, c.hashes, c.payload).ok()) _exit(4);
    if (written % kCrashFlushEvery != 0) continue;
    if (!(*t)->flush().ok()) _exit(5);
    if (::write(report_fd, &written, sizeof written) != sizeof written) _exit(6);
  }
  for (;;) ::pause();  // done: wait for the kill like a busy child would
}

// Reads durable-count reports until one reaches `at_least` (or EOF when at_least is 0 and the
// writer is gone); returns the largest count seen, 0 when the child died before reporting.
uint32_t read_durable_reports(int fd, uint32_t at_least) {
  uint32_t durable = 0, report = 0;
  while (at_least == 0 || durable < at_least) {
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, 600'000) <= 0) break;  // a hung child: the assertions below say so
    if (::read(fd, &report, sizeof report) != sizeof report) break;
    durable = std::max(durable, report);
  }
  return durable;
}

TEST(DiskTier, SurvivesSigkillAtRandomMoments) {
  TempDir dir;
  auto g = small_geometry();
  std::mt19937 rng(12345);
  for (int round = 0; round < kCrashRounds; ++round) {
    const uint32_t base = round * 100000;
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      write_until_killed(dir.path(), g, base, fds[1]);
    }
    ::close(fds[1]);
    // Kill after a random number of durable flushes, then a random short delay lands it mid-write.
    const uint32_t target = kCrashFlushEvery * (1 + rng() % (kCrashChunks / kCrashFlushEvery));
    uint32_t durable = read_durable_reports(fds[0], target);
    ::usleep(rng() % 2000);
    ::kill(pid, SIGKILL);
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    durable = std::max(durable, read_durable_reports(fds[0], 0));  // reports sent before the kill
    ::close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited early with " << WEXITSTATUS(wstatus);
    ASSERT_GE(durable, target) << "round " << round << ": the child was killed before its flushes were reported";
    auto t = DiskTier::create(disk_options(dir.path(), g));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    // What is served is bit-exact and a prefix of what was written, holding every reported-durable chunk.
    std::vector<std::byte> out(g.max_payload_bytes());
    uint32_t served = 0;
    for (uint32_t i = 0; i < kCrashChunks; ++i) {
      auto c = make_chunk(g, test_ns(6), base + i);
      auto r = (*t)->get(c.key, out);
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().to_string();
        continue;
      }
      ASSERT_EQ(i, served) << "round " << round << ": chunk " << i << " served after a gap at " << served;
      ASSERT_TRUE(std::equal(c.payload.begin(), c.payload.end(), out.begin())) << "round " << round << " chunk " << i;
      ++served;
    }
    EXPECT_GE(served, durable) << "round " << round << ": a chunk reported durable was lost";
    EXPECT_EQ((*t)->stats().checksum_failures, (*t)->open_report().dropped_corrupt);
  }
}

TEST(DiskTier, PoolToHostToDiskToHostToPoolIsBitExact) {
  TempDir dir;
  auto g = small_geometry();
  auto pool = BlockPool::create({.geometry = g.kv, .num_pages = 16}).value();
  auto host = HostTier::create({.geometry = g, .capacity_bytes = 16 * g.kv.page_bytes()}).value();
  std::vector<PageId> src;
  ASSERT_TRUE(pool->allocate(g.chunk_pages, src).ok());
  std::mt19937 rng(9);
  for (PageId p : src)
    for (size_t i = 0; i < g.kv.page_bytes(); ++i) pool->page(p)[i] = std::byte(uint8_t(rng()));
  // pool -> host slots (one memcpy per page)
  std::vector<SlotId> slots;
  ASSERT_TRUE(host->allocate_slots(g.chunk_pages, slots).ok());
  for (size_t i = 0; i < src.size(); ++i) std::memcpy(host->slot(slots[i]), pool->page(src[i]), g.kv.page_bytes());
  // host -> chunk (gather) -> disk
  std::vector<const std::byte*> pages;
  for (SlotId s : slots) pages.push_back(host->slot(s));
  std::vector<std::byte> chunk(g.max_payload_bytes());
  gather_pages(g.kv, pages, chunk.data());
  auto c = make_chunk(g, test_ns(7), 1);
  {
    auto disk = DiskTier::create(disk_options(dir.path(), g)).value();
    ASSERT_TRUE(disk->put(c.key, c.hashes, chunk).ok());
    ASSERT_TRUE(disk->flush().ok());
  }
  auto disk = DiskTier::create(disk_options(dir.path(), g)).value();  // reread from the file, not the buffer
  std::vector<std::byte> back(chunk.size());
  // disk -> host, layer by layer
  std::vector<SlotId> slots2;
  ASSERT_TRUE(host->allocate_slots(g.chunk_pages, slots2).ok());
  std::vector<std::byte*> dst;
  for (SlotId s : slots2) dst.push_back(host->slot(s));
  const size_t lb = g.layer_bytes(g.chunk_pages);
  for (uint32_t l = 0; l < g.kv.num_layers; ++l) {
    ASSERT_TRUE(disk->get_layers(c.key, l, 1, {back.data(), lb}).ok());
    scatter_layers(g.kv, back.data(), l, 1, dst);
  }
  // host -> pool
  std::vector<PageId> dst_pages;
  ASSERT_TRUE(pool->allocate(g.chunk_pages, dst_pages).ok());
  for (size_t i = 0; i < dst_pages.size(); ++i) std::memcpy(pool->page(dst_pages[i]), host->slot(slots2[i]), g.kv.page_bytes());
  for (size_t i = 0; i < src.size(); ++i)
    for (uint32_t l = 0; l < g.kv.num_layers; ++l)
      EXPECT_EQ(std::memcmp(pool->layer(src[i], LayerIdx(l)), pool->layer(dst_pages[i], LayerIdx(l)), g.kv.layer_slice_bytes()), 0)
          << "page " << i << " layer " << l;
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

using namespace testing_util;

// Retention on disk: a region holding a retained chunk is skipped by reclaim
// until the hold's time is up; holds are capped (the earliest yields); a log
// whose every region is held still takes writes.
TEST(DiskTier, RetainedRegionsSurviveReclaimUntilTheyExpire) {
  TempDir dir;
  const ChunkGeometry g = small_geometry();
  ManualClock clock;
  DiskTierOptions o = disk_options(dir.path(), g);
  o.clock = &clock;
  auto t = std::move(DiskTier::create(o)).value();
  const auto first = put_all(*t, g, 1, 2);  // region 0
  const TestChunk late = make_chunk(g, test_ns(1), 999);
  const ChunkKey keys[] = {first[0].key, first[1].key, late.key};
  EXPECT_EQ(t->retain(keys, clock.now() + std::chrono::seconds(60), 0.5), 2u);  // the leading run it holds
  EXPECT_GT(t->stats().retained_bytes, 0u);
  ASSERT_TRUE(t->put(late.key, late.hashes, late.payload).ok());  // retained before it landed: held now
  put_all(*t, g, 1, 200, 2);  // 100 more regions through a log of 64: FIFO reclaims past region 0
  EXPECT_TRUE(t->exists(first[0].key));
  EXPECT_TRUE(t->exists(first[1].key));
  EXPECT_TRUE(t->exists(late.key));
  EXPECT_GT(t->stats().evictions, 0u);
  clock.advance(std::chrono::seconds(61));
  EXPECT_EQ(t->stats().retained_bytes, 0u);
  put_all(*t, g, 1, 200, 300);
  EXPECT_FALSE(t->exists(first[0].key));

  // The cap: 0.5 of 64 regions; holding 40 regions' chunks makes the 8 earliest yield.
  const auto many = put_all(*t, g, 2, 80);
  for (size_t i = 0; i < many.size(); i += 2) (void)t->retain({&many[i].key, 1}, clock.now() + std::chrono::hours(1), 0.5);
  EXPECT_EQ(t->stats().retain_yields, 8u);
  EXPECT_EQ(t->stats().retained_bytes, 32 * o.region_bytes);
  // Every region held (share 1): writes still go through, reclaiming in order.
  for (size_t i = 0; i < many.size(); i += 2) (void)t->retain({&many[i].key, 1}, clock.now() + std::chrono::hours(1), 1.0);
  const auto more = put_all(*t, g, 3, 200);
  for (size_t i = more.size() - 20; i < more.size(); ++i) expect_exact(*t, more[i]);
  EXPECT_FALSE(t->degraded());
}

// Two puts of one chunk that both wait for a region buffer (a slow disk; two commits of one prefix
// on two transfer workers) store it once: each had checked the index only before waiting, so both
// wrote it and its bytes were counted twice for good (the tenant's disk_bytes never went back to
// zero, and its quota trimmed real entries for the phantom ones). Without overlap (a loaded
// machine) the second put finds the first: the test cannot fail falsely either way.
TEST(DiskTier, TwoPutsOfOneChunkWaitingForABufferStoreItOnce) {
  TempDir dir;
  const ChunkGeometry g{KVGeometry{.num_layers = 2, .num_kv_heads = 2, .head_dim = 32, .dtype = DType::kF32, .page_tokens = 16}, 4};
  FaultFileSystem slow(FileSystem::posix());
  slow.add_rule(FaultRule{.kind = FaultKind::kDelay, .op = FaultOp::kWrite, .nth = 1, .times = 0,
                          .delay = std::chrono::microseconds(100000)});
  DiskTierOptions o;
  o.geometry = g;
  o.dir = dir.path();
  o.region_bytes = 4096 + chunk_entry_layout(g, 4, 4096).entry_bytes;  // one chunk per region
  o.capacity_bytes = 64 * o.region_bytes;
  o.fs = &slow;
  auto t = std::move(DiskTier::create(o)).value();
  const PageHash ns{9, 9};
  std::vector<std::byte> payload(g.payload_bytes(4), std::byte{1});
  auto put = [&](uint64_t id) {
    const ChunkKey key{ns, PageHash{id, id}};
    std::vector<PageHash> pages{PageHash{1, id}, PageHash{2, id}, PageHash{3, id}, key.hash};
    std::vector<PutOp> ops{PutOp{key, pages, payload, {}}};
    t->put_batch(ops);
    return ops[0].status;
  };
  ASSERT_TRUE(put(1).ok());
  ASSERT_TRUE(put(2).ok());  // both buffers busy: the next puts wait for the writer
  std::thread a([&] { EXPECT_TRUE(put(3).ok()); }), b([&] { EXPECT_TRUE(put(3).ok()); });
  a.join();
  b.join();
  ASSERT_TRUE(t->flush().ok());
  EXPECT_EQ(t->stats().entries, 3u);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(t->erase(ChunkKey{ns, PageHash{id, id}}).ok());
  EXPECT_EQ(t->namespace_bytes({&ns, 1}), 0u);
}

// A hold on a chunk not yet written whose time ran out before the chunk landed holds nothing:
// it took a place under the cap and made a live hold yield (RegionReclaimOrder::retain).
TEST(DiskTier, AHoldPastItsTimeWhenItsChunkLandsMakesNoLiveHoldYield) {
  TempDir dir;
  const ChunkGeometry g = small_geometry();
  ManualClock clock;
  DiskTierOptions o = disk_options(dir.path(), g);
  o.clock = &clock;
  auto t = std::move(DiskTier::create(o)).value();
  const TestChunk late = make_chunk(g, test_ns(1), 999);
  EXPECT_EQ(t->retain({&late.key, 1}, clock.now() + std::chrono::seconds(1), 2.0 / 64), 0u);  // pending
  const auto a = put_all(*t, g, 1, 2);  // region 0
  ASSERT_EQ(t->retain({&a[0].key, 1}, clock.now() + std::chrono::hours(1), 2.0 / 64), 1u);
  put_all(*t, g, 1, 2, 2);  // region 1
  const auto b = put_all(*t, g, 1, 2, 4);
  ASSERT_EQ(t->retain({&b[0].key, 1}, clock.now() + std::chrono::hours(1), 2.0 / 64), 1u);
  const uint64_t held = t->stats().retained_bytes;
  clock.advance(std::chrono::seconds(60));
  ASSERT_TRUE(t->put(late.key, late.hashes, late.payload).ok());
  EXPECT_EQ(t->stats().retain_yields, 0u);
  EXPECT_EQ(t->stats().retained_bytes, held);
}

}  // namespace
}  // namespace kvtier
