// Layer-wise loading on and off (KVCacheOptions::layerwise, `--no-layerwise`):
// with it, prefill may start on layer 0 while later layers still load;
// without it, a lease's waits return only once every layer is in place.
// A remote tier that holds back every layer but the first makes the
// difference visible by order of events, not by timing.
#include "cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kChunkPages = 4;

std::shared_ptr<HeldUpperLayersTier> held_remote(std::chrono::milliseconds hold) {
  const KVGeometry g = engine::model_preset("tiny")->kv_geometry(DType::kF32, 16);
  return std::make_shared<HeldUpperLayersTier>(ChunkGeometry{g, kChunkPages}, hold);
}

// Serves `prompt` once, then drops the device and host copies: its next lookup loads from the remote tier only.
CacheLease lease_loading_from_remote(CacheRig& rig, std::span<const TokenId> prompt) {
  rig.cached(prompt, 1);
  EXPECT_TRUE(rig.cache->drain().ok());
  EXPECT_TRUE(rig.cache->flush().ok());
  auto look = rig.cache->lookup(rig.ns, prompt);
  EXPECT_TRUE(look.ok()) << look.status().to_string();
  EXPECT_GT(look->remote_pages, 0u);
  const Plan plan = rig.cache->plan(*look);
  auto lease = rig.cache->apply(std::move(*look), plan);
  EXPECT_TRUE(lease.ok()) << lease.status().to_string();
  return std::move(*lease);
}

RigOptions remote_only(std::shared_ptr<Tier> remote, bool layerwise) {
  RigOptions o;
  o.disk = false;
  o.chunk_pages = kChunkPages;
  o.remote = std::move(remote);
  o.layerwise = layerwise;
  return o;
}

TEST(Layerwise, OnLayerZeroIsServedWhileLaterLayersStillLoad) {
  auto remote = held_remote(std::chrono::minutes(10));
  CacheRig rig(remote_only(remote, /*layerwise=*/true));
  auto prompt = CacheRig::random_tokens(16 * 16 + 3, 21);
  CacheLease lease = lease_loading_from_remote(rig, prompt);
  const std::unique_ptr<HeldUpperLayersTier, void (*)(HeldUpperLayersTier*)> open_on_exit(
      remote.get(), [](HeldUpperLayersTier* t) { t->open(); });  // before the lease waits for its loads
  ASSERT_TRUE(lease.wait_layer(LayerIdx(0)).ok());
  EXPECT_FALSE(lease.loads_done()) << "layer 0 waited for the held layers";
}

TEST(Layerwise, OffNoLayerIsServedBeforeEveryLayerIsIn) {
  auto remote = held_remote(std::chrono::milliseconds(300));
  CacheRig rig(remote_only(remote, /*layerwise=*/false));
  auto prompt = CacheRig::random_tokens(16 * 16 + 3, 22);
  Outcome ref = rig.reference(prompt, 8);
  CacheLease lease = lease_loading_from_remote(rig, prompt);
  ASSERT_TRUE(lease.wait_front_layer(LayerIdx(0)).ok());
  ASSERT_TRUE(lease.wait_layer(LayerIdx(0)).ok());
  EXPECT_TRUE(lease.loads_done()) << "layer 0 was served while later layers were still loading";
  // The whole request through cached_prefill: every cached token came from the remote tier, output unchanged.
  Outcome hit = rig.drive(lease, prompt, 8, /*commit=*/false);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[static_cast<size_t>(TierKind::kRemote)], 16u * 16);
  expect_same(hit, ref, 1e-5);
}

}  // namespace
}  // namespace kvtier::testing
