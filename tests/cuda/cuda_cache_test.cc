// KVCache on the GPU: the pool in CUDA memory, the CudaEngine computing, the
// host tier in pinned memory, and chunks on disk. A prompt served from each
// tier gives the output of a full GPU recompute, and the same greedy tokens
// as the CPU engine.
#include "cuda_test_support.h"
#include "runtime/cache_rig.h"

namespace kvtier::testing {
namespace {

constexpr int kSteps = 16;
constexpr uint32_t kDevice = 0, kHost = 1, kDisk = 2;

RigOptions on_gpu(DType dtype) {
  RigOptions o;
  o.dtype = dtype;
  o.device = MemoryBackend::kCuda;
  return o;
}

class CudaKVCache : public ::testing::TestWithParam<DType> {};

TEST_P(CudaKVCache, EveryTierEqualsRecompute) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  CacheRig rig(on_gpu(GetParam()));
  ASSERT_TRUE(rig.cache && rig.engine);
  auto prompt = CacheRig::random_tokens(16 * 20 + 5, 11);
  const Outcome ref = rig.reference(prompt, kSteps);
  // Same model and prompt on the CPU engine: greedy tokens agree.
  CacheRig cpu(RigOptions{.dtype = GetParam(), .disk = false});
  const Outcome cpu_ref = cpu.reference(prompt, kSteps);
  EXPECT_EQ(ref.tokens, cpu_ref.tokens);

  rig.cached(prompt, kSteps);  // miss: computed, committed, written through to host and disk
  ASSERT_TRUE(rig.cache->drain().ok());
  const Outcome dev = rig.cached(prompt, kSteps);
  EXPECT_EQ(dev.report.reused_tokens_by_tier[kDevice], 320u);
  expect_same(dev, ref, 1e-4);

  ASSERT_TRUE(rig.cache->evict(TierKind::kDevice, UINT32_MAX).ok());
  const Outcome host = rig.cached(prompt, kSteps);
  EXPECT_EQ(host.report.reused_tokens_by_tier[kHost], 320u);
  expect_same(host, ref, 1e-4);

  ASSERT_TRUE(rig.cache->drain().ok());
  ASSERT_TRUE(rig.cache->flush().ok());  // device and host dropped; disk keeps whole chunks
  const Outcome disk = rig.cached(prompt, kSteps);
  EXPECT_EQ(disk.report.reused_tokens_by_tier[kDisk], 320u);  // 5 chunks of 4 pages
  expect_same(disk, ref, 1e-4);
}

// Device pages demoted to the pinned host tier under pressure (write-back)
// come back bit-exact: many prompts through a pool that holds two of them.
TEST_P(CudaKVCache, WriteBackDemotionUnderPressure) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  RigOptions o = on_gpu(GetParam());
  o.device_pages = 48;
  o.disk = false;
  o.write_policy = WritePolicy::kWriteBack;
  CacheRig rig(o);
  ASSERT_TRUE(rig.cache && rig.engine);
  std::vector<std::vector<TokenId>> prompts;
  std::vector<Outcome> refs;
  for (uint32_t i = 0; i < 4; ++i) {
    prompts.push_back(CacheRig::random_tokens(16 * 18 + 3, 100 + i));
    refs.push_back(rig.reference(prompts.back(), 4));
  }
  for (int round = 0; round < 2; ++round)
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Outcome out = rig.cached(prompts[i], 4);
      if (round == 1) {
        EXPECT_GT(out.report.reused_tokens(), 0u) << "prompt " << i;
        expect_same(out, refs[i], 1e-4);
      }
    }
  EXPECT_GT(rig.cache->stats().demoted_pages, 0u);
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, CudaKVCache, ::testing::Values(DType::kF32, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kvtier::testing
