// The cache's event log (KVCache::events): page events of the index and chunk
// events of the disk tier, recorded only while someone listens, and a
// snapshot that agrees with them — what GET /v1/cache/events serves a router.
#include <set>

#include "cache_rig.h"
#include "common/page_hash.h"

namespace kvtier::testing {
namespace {

using Hashes = std::set<PageHash>;

// What a follower of the log knows: the hashes in each tier, from the events alone.
struct Follower {
  Hashes tier[kNumTiers];
  size_t moved = 0, removed = 0;
  void apply(const KvEvent& e) {
    auto& t = tier[size_t(e.tier)];
    switch (e.kind) {
      case KvEventKind::kStored: t.insert(e.hash); break;
      case KvEventKind::kMoved:
        ++moved;
        tier[size_t(e.from)].erase(e.hash);
        t.insert(e.hash);
        break;
      case KvEventKind::kRemoved:
        ++removed;
        t.erase(e.hash);
        break;
      case KvEventKind::kCleared: t.clear(); break;
    }
  }
  // Applies everything after `since`; returns the last number.
  uint64_t follow(KVCache& cache, uint64_t since) {
    cache.publish_events();
    std::vector<KvEvent> ev;
    uint64_t last = 0;
    EXPECT_TRUE(cache.events()->read_since(since, 1 << 20, ev, last));
    for (const KvEvent& e : ev) apply(e);
    return last;
  }
};

Hashes as_set(const std::vector<PageHash>& v) { return Hashes(v.begin(), v.end()); }

std::vector<PageHash> prompt_pages(const CacheRig& rig, std::span<const TokenId> prompt) {
  const KVCacheOptions& o = rig.cache->options();
  std::vector<PageHash> out;
  hash_pages(o.hash, namespace_seed(rig.ns, o.hash), prompt.first(prompt.size() - 1), o.geometry.page_tokens, out);
  return out;
}

TEST(CacheEvents, NothingIsRecordedWithoutAListener) {
  CacheRig rig;
  auto prompt = CacheRig::random_tokens(300, 41);
  rig.cached(prompt, 4);
  ASSERT_TRUE(rig.cache->drain().ok());
  rig.cache->publish_events();
  EXPECT_EQ(rig.cache->events()->seq(), 0u);
  EXPECT_FALSE(rig.cache->index().record_events());
}

TEST(CacheEvents, PagesAndChunksReachTheLogAndASnapshotAgrees) {
  CacheRig rig;  // write-through: device, host and disk copies
  KvEventLog::Subscription listening(*rig.cache->events());
  const KvSnapshot empty = rig.cache->event_snapshot();
  EXPECT_TRUE(empty.device.empty() && empty.host.empty() && empty.disk.empty());
  auto prompt = CacheRig::random_tokens(300, 42);
  rig.cached(prompt, 8);
  ASSERT_TRUE(rig.cache->drain().ok());
  Follower f;
  uint64_t seq = f.follow(*rig.cache, empty.seq);

  const auto pages = prompt_pages(rig, prompt);
  ASSERT_EQ(pages.size(), 18u);
  for (const PageHash& h : pages) {
    EXPECT_TRUE(f.tier[0].count(h) && f.tier[1].count(h)) << h.to_hex();
  }
  for (const ChunkKey& k : rig.cache->chunk_keys(rig.ns, prompt)) EXPECT_TRUE(f.tier[2].count(k.hash));
  const KvSnapshot snap = rig.cache->event_snapshot();
  EXPECT_EQ(snap.seq, seq);
  EXPECT_EQ(as_set(snap.device), f.tier[0]);
  EXPECT_EQ(as_set(snap.host), f.tier[1]);
  EXPECT_EQ(as_set(snap.disk), f.tier[2]);

  // Off the device (the host copies stay), then off the host: every page leaves by an event.
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 1000).ok());
  seq = f.follow(*rig.cache, seq);
  EXPECT_TRUE(f.tier[0].empty());
  EXPECT_EQ(f.tier[1].size(), snap.host.size());
  ASSERT_TRUE(rig.cache->flush().ok());
  seq = f.follow(*rig.cache, seq);
  EXPECT_TRUE(f.tier[1].empty());
  EXPECT_EQ(f.tier[2], as_set(snap.disk));  // the disk keeps its chunks
  const KvSnapshot after = rig.cache->event_snapshot();
  EXPECT_TRUE(after.device.empty() && after.host.empty());
  EXPECT_EQ(as_set(after.disk), f.tier[2]);
}

TEST(CacheEvents, WriteBackDemotionIsAMove) {
  RigOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  o.disk = false;
  CacheRig rig(o);
  KvEventLog::Subscription listening(*rig.cache->events());
  const uint64_t start = rig.cache->event_snapshot().seq;
  auto prompt = CacheRig::random_tokens(300, 43);
  rig.cached(prompt, 8);
  Follower f;
  uint64_t seq = f.follow(*rig.cache, start);
  const size_t on_device = f.tier[0].size();
  ASSERT_GE(on_device, 18u);
  EXPECT_TRUE(f.tier[1].empty());
  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, 1000).ok());
  seq = f.follow(*rig.cache, seq);
  EXPECT_EQ(f.moved, on_device);
  EXPECT_EQ(f.removed, 0u);
  EXPECT_TRUE(f.tier[0].empty());
  EXPECT_EQ(f.tier[1].size(), on_device);
  EXPECT_EQ(as_set(rig.cache->event_snapshot().host), f.tier[1]);
}

}  // namespace
}  // namespace kvtier::testing
