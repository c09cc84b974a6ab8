// The replay drives the real KVCache (sim/replay_cache.h). These tests pin
// that down: the payload-less disk tier reclaims as DiskTier does; a
// payload-less cache answers request by request as a cache whose disk tier
// is a real DiskTier; and the figures that moved when the replay stopped
// re-implementing the cache, each with the cache rule that makes the new one right.
#include <gtest/gtest.h>

#include <random>

#include "../tiers/tier_test_util.h"
#include "sim/replay.h"
#include "sim/replay_cache.h"
#include "tiers/disk_tier.h"
#include "sim/metadata_tier.h"

namespace kvtier {
namespace {

using testing_util::TempDir;

// A DiskTier of `regions` regions of `chunks` full chunk entries each.
DiskTierOptions small_disk(const ChunkGeometry& g, const std::string& dir, EvictionOrder order, uint32_t regions = 4,
                           uint32_t chunks = 3) {
  DiskTierOptions d;
  d.geometry = g;
  d.dir = dir;
  d.region_bytes = 4096;  // the header block; entries are 4 KiB-aligned
  d.region_bytes += chunks * d.full_chunk_entry_bytes();
  d.capacity_bytes = regions * d.region_bytes;
  d.direct_io = false;
  d.sync_writes = false;
  d.write_stretch_bytes = 4096;
  d.reclaim = order;
  return d;
}

TEST(MetadataTier, ReclaimsWholeRegionsAsDiskTierDoes) {
  const ChunkGeometry g = testing_util::small_geometry(2);
  for (EvictionOrder order : {EvictionOrder::kFifo, EvictionOrder::kLru}) {
    TempDir dir;
    const DiskTierOptions d = small_disk(g, dir.path(), order);
    ASSERT_EQ(d.chunks_per_region(), 3u);
    auto disk = DiskTier::create(d);
    auto meta = MetadataTier::create({g, TierKind::kDisk, d.max_regions(), d.chunks_per_region(), order});
    ASSERT_TRUE(disk.ok() && meta.ok());
    const PageHash ns = testing_util::test_ns(1);
    std::vector<testing_util::TestChunk> chunks;
    for (uint64_t i = 0; i < 60; ++i) chunks.push_back(testing_util::make_chunk(g, ns, i));
    std::mt19937 rng(order == EvictionOrder::kFifo ? 1 : 2);
    std::vector<std::byte> out(g.payload_bytes(g.chunk_pages));
    size_t next = 0;
    for (int step = 0; step < 200 && next < chunks.size(); ++step) {
      if (rng() % 3 == 0 && next > 0) {  // a read of an earlier chunk (LRU recency)
        const auto& c = chunks[rng() % next];
        EXPECT_EQ((*disk)->get(c.key, out).ok(), (*meta)->get(c.key, out).ok());
      } else {
        const auto& c = chunks[next++];
        ASSERT_TRUE((*disk)->put(c.key, c.hashes, c.payload).ok());
        ASSERT_TRUE((*meta)->put(c.key, c.hashes, c.payload).ok());
      }
      for (size_t k = 0; k < next; ++k)
        ASSERT_EQ((*disk)->exists(chunks[k].key), (*meta)->exists(chunks[k].key)) << "step " << step << " chunk " << k;
    }
    EXPECT_GT((*meta)->stats().evictions, 0u);
    EXPECT_EQ((*disk)->stats().evictions, (*meta)->stats().evictions);
  }
}

// One request through a cache, as ReplayCache::request does.
void drive(KVCache& cache, const Namespace& ns, std::span<const TokenId> prompt, std::array<uint32_t, kNumTiers>& by_tier) {
  auto L = cache.lookup(ns, prompt);
  ASSERT_TRUE(L.ok());
  by_tier = {};
  for (const CachedRun& r : L->runs) by_tier[static_cast<size_t>(r.tier)] += r.pages;
  const Plan plan = cache.planner().use_all(L->runs, L->prompt_tokens);
  auto lease = cache.apply(std::move(*L), plan);
  if (!lease.ok()) {
    by_tier = {};
    return;
  }
  ASSERT_TRUE(cache.commit(*lease, prompt).ok());
}

TEST(ReplayCache, AnswersAsACacheWithARealDiskTier) {
  for (WritePolicy wp : {WritePolicy::kWriteThrough, WritePolicy::kWriteBack, WritePolicy::kSelective}) {
    sim_detail::ReplayCacheOptions ro;
    ro.unit = 1;
    ro.chunk_pages = 4;
    ro.device_pages = 40;
    ro.host_pages = 24;
    ro.write_policy = wp;
    ro.disk_regions = 1;  // replaced below
    auto base = sim_detail::replay_cache_options(ro);
    ASSERT_TRUE(base.ok());
    TempDir dir;
    const DiskTierOptions d =
        small_disk(ChunkGeometry{base->geometry, ro.chunk_pages}, dir.path(), EvictionOrder::kFifo, 5, 2);
    auto meta_disk = MetadataTier::create({d.geometry, TierKind::kDisk, d.max_regions(), d.chunks_per_region(), d.reclaim});
    auto real_disk = DiskTier::create(d);
    ASSERT_TRUE(meta_disk.ok() && real_disk.ok()) << real_disk.status().to_string();
    KVCacheOptions meta_opts = *base, real_opts = *base;
    meta_opts.disk = std::move(meta_disk).value();
    real_opts.disk = std::move(real_disk).value();
    auto meta = KVCache::create(meta_opts);
    auto real = KVCache::create(real_opts);
    ASSERT_TRUE(meta.ok() && real.ok()) << meta.status().to_string() << real.status().to_string();
    std::mt19937 rng(7);
    Namespace ns;
    uint64_t disk_hits = 0;
    for (int i = 0; i < 300; ++i) {
      // Prompts over a few shared heads; lengths end mid-chunk.
      std::vector<TokenId> prompt(3 + rng() % 30);
      const TokenId head = static_cast<TokenId>(rng() % 5);
      for (size_t k = 0; k < prompt.size(); ++k) prompt[k] = k < 8 ? head * 100 + TokenId(k) : TokenId(rng() % 4);
      std::array<uint32_t, kNumTiers> a{}, b{};
      drive(**meta, ns, prompt, a);
      drive(**real, ns, prompt, b);
      ASSERT_EQ(a, b) << write_policy_name(wp) << " request " << i;
      disk_hits += a[2];
    }
    (void)(*meta)->drain();
    (void)(*real)->drain();
    const KVCacheStats sa = (*meta)->stats(), sb = (*real)->stats();
    for (int t = 0; t < kNumTiers; ++t) {
      EXPECT_EQ(sa.evicted_pages_by_tier[t], sb.evicted_pages_by_tier[t]) << t;
      EXPECT_EQ(sa.bytes_stored_by_tier[t], sb.bytes_stored_by_tier[t]) << t;
    }
    EXPECT_EQ(sa.disk.evictions, sb.disk.evictions);
    EXPECT_EQ(sa.spilled_chunks, sb.spilled_chunks);
    EXPECT_EQ(sa.demoted_pages, sb.demoted_pages);
    if (wp != WritePolicy::kSelective) {
      EXPECT_GT(disk_hits, 0u) << write_policy_name(wp);
    }
  }
}

ReplayOptions opts() {
  ReplayOptions o = default_replay_options();
  o.timing = false;
  o.max_pass = false;
  return o;
}

ReplayTrace blocks_trace(const std::vector<std::pair<uint64_t, uint32_t>>& first_id_and_length) {
  ReplayTrace t;
  t.block_tokens = 512;
  for (const auto& [id, len] : first_id_and_length) {
    ReplayRequest r;
    r.timestamp_ms = double(t.requests.size());
    r.offset = t.hash_ids.size();
    r.count = (len + 511) / 512;
    for (uint32_t b = 0; b < r.count; ++b) t.hash_ids.push_back(id + b);
    r.input_length = len;
    t.requests.push_back(r);
  }
  return t;
}

// Old figure: the replay cached the head of a prompt larger than the device
// and the repeat hit it. KVCache needs a pool page for every prompt position
// while the request runs, so it refuses that request (apply is Busy) and
// caches nothing.
TEST(ReplayFiguresThatMoved, APromptLargerThanTheDeviceIsRefused) {
  ReplayOptions o = opts();
  o.device = Capacity::tokens(1024);
  const auto t = blocks_trace({{0, 2000}, {0, 2000}, {100, 600}, {100, 600}});
  auto r = run_replay(o, t);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->refused_requests, 2u);
  EXPECT_EQ(r->hit_tokens, 592u);  // only the small prompt's repeat: (600 - 1) / 16 whole pages
}

// Old figure: no host copy at all when a prompt has more pages than the host
// tier (all or nothing). KVCache::commit copies as many as the host can take,
// the earliest pages first.
TEST(ReplayFiguresThatMoved, WriteThroughCopiesThePagesTheHostCanTake) {
  ReplayOptions o = opts();
  o.device = Capacity::tokens(4096);
  o.host = Capacity::tokens(8 * 16);
  auto r = run_replay(o, blocks_trace({{0, 16 * 16 + 1}}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->bytes_stored[1], 8 * 16 * o.model.geometry.bytes_per_token());
}

// Old figure: disk capacity / chunk bytes chunks, reclaimed one at a time.
// DiskTier holds whole chunk entries (payload plus their header and
// checksums, 4 KiB-aligned) in whole regions: a 64 MiB region holds one
// 32 MiB Llama-3-8B chunk entry, a 256 MiB region seven.
TEST(ReplayFiguresThatMoved, DiskHoldsWholeChunkEntriesInWholeRegions) {
  ReplayOptions o = opts();
  o.device = Capacity::tokens(100000);
  o.disk = Capacity::of_bytes(uint64_t(1) << 30);
  const auto t = blocks_trace({{0, 600}});
  auto r = run_replay(o, t);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->capacity_pages[2], 16u * 1 * 16);  // 16 regions x 1 chunk x 16 pages (was 512 pages)
  o.disk_region_bytes = size_t(256) << 20;
  r = run_replay(o, t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->capacity_pages[2], 4u * 7 * 16);
}

}  // namespace
}  // namespace kvtier
