#include <gtest/gtest.h>

#include "cuda/cuda_memory.h"
#include "cuda_test_support.h"
#include "memory/block_pool.h"
#include "tiers/host_tier.h"

namespace kvtier::cuda {
namespace {

using testing::random_bytes;

DeviceMemoryOptions cuda_options() {
  DeviceMemoryOptions o;
  o.backend = MemoryBackend::kCuda;
  o.alignment = 256;
  return o;
}

KVGeometry geometry() { return KVGeometry{.num_layers = 3, .num_kv_heads = 2, .head_dim = 16, .dtype = DType::kF16, .page_tokens = 16}; }

// Runs without a GPU: linking kvtier_cuda registers the backends.
TEST(CudaMemoryRegistration, BackendsAreRegisteredInACudaBuild) {
  EXPECT_TRUE(cuda_options().validate().ok());
  DeviceMemoryOptions pinned;
  pinned.pinned = true;
  EXPECT_TRUE(pinned.validate().ok());
  DeviceMemoryOptions bad = cuda_options();
  bad.lock = true;
  EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument);
}

// Runs without a GPU: no device means a clear error, never a crash.
TEST(CudaMemoryRegistration, NoDeviceIsAnErrorNotACrash) {
  if (device_present()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  auto m = DeviceMemory::allocate(4096, cuda_options());
  EXPECT_FALSE(m.ok());
}

TEST(CudaMemory, DeviceAllocationIsZeroedAndRoundTrips) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  auto m = DeviceMemory::allocate(1 << 20, cuda_options());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->backend(), MemoryBackend::kCuda);
  EXPECT_FALSE((*m)->host_accessible());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*m)->data()) % 256, 0u);
  std::vector<std::byte> back((*m)->size(), std::byte{1});
  testing::to_host(back.data(), (*m)->data(), back.size());
  for (std::byte b : back) ASSERT_EQ(b, std::byte{0});
  const auto src = random_bytes((*m)->size(), 1);
  testing::to_device((*m)->data(), src.data(), src.size());
  testing::to_host(back.data(), (*m)->data(), back.size());
  EXPECT_EQ(back, src);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, (*m)->data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);  // plain device memory, not managed
}

TEST(CudaMemory, BlockPoolOnDeviceNeedsOptIn) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  BlockPoolOptions o{.geometry = geometry(), .num_pages = 8, .memory = cuda_options()};
  EXPECT_EQ(BlockPool::create(o).status().code(), StatusCode::kUnimplemented);
  o.allow_device_only = true;
  auto pool = BlockPool::create(o);
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  auto p = (*pool)->allocate();
  ASSERT_TRUE(p.ok());
  // Page addresses are device addresses inside the allocation.
  const auto page = random_bytes(geometry().page_bytes(), 2);
  testing::to_device((*pool)->page(*p), page.data(), page.size());
  std::vector<std::byte> back(page.size());
  testing::to_host(back.data(), (*pool)->page(*p), back.size());
  EXPECT_EQ(back, page);
}

TEST(CudaMemory, PinnedHostArenaForTheHostTier) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  HostTierOptions o;
  o.geometry = ChunkGeometry{.kv = geometry(), .chunk_pages = 4};
  o.capacity_bytes = 16 * geometry().page_bytes();
  o.memory.pinned = true;
  auto tier = HostTier::create(o);
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  auto slot = (*tier)->allocate_slot();
  ASSERT_TRUE(slot.ok());
  std::byte* s = (*tier)->slot(*slot);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, s), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked, registered with the driver
  // DMA from the slot into device memory and back.
  const auto bytes = random_bytes(geometry().page_bytes(), 3);
  std::memcpy(s, bytes.data(), bytes.size());
  auto dev = DeviceMemory::allocate(bytes.size(), cuda_options());
  ASSERT_TRUE(dev.ok());
  ASSERT_EQ(cudaMemcpy((*dev)->data(), s, bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  std::memset(s, 0, bytes.size());
  ASSERT_EQ(cudaMemcpy(s, (*dev)->data(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(s, bytes.data(), bytes.size()), 0);
}

// DeviceMemory::copy: many small pieces host -> device (batched DMA) ->
// host (the copy kernel when the host side is pinned, in every word size;
// DMA for pageable memory and large pieces). Bytes land exactly, gaps untouched.
TEST(CudaMemory, CopyListsRoundTripByKernelAndByDma) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const size_t kBytes = size_t(8) << 20;
  auto dev = DeviceMemory::allocate(kBytes, cuda_options());
  ASSERT_TRUE(dev.ok());
  DeviceMemoryOptions pin;
  pin.pinned = true;
  auto pinned_in = DeviceMemory::allocate(kBytes, pin), pinned_out = DeviceMemory::allocate(kBytes, pin);
  ASSERT_TRUE(pinned_in.ok() && pinned_out.ok());
  std::vector<std::byte> pageable_in(kBytes), pageable_out(kBytes);
  const auto payload = random_bytes(kBytes, 9);
  struct Case {
    const char* name;
    std::byte* in;
    std::byte* out;
    size_t piece, stride, count;  // `count` pieces of `piece` bytes, `stride` apart
  };
  const Case cases[] = {
      {"kernel down, 16-byte words", (*pinned_in)->data(), (*pinned_out)->data(), 16384, 16384 + 4096, 400},
      {"kernel down, 4-byte words", (*pinned_in)->data(), (*pinned_out)->data(), 1028, 2052, 333},
      {"kernel down, bytes", (*pinned_in)->data() + 1, (*pinned_out)->data() + 3, 77, 101, 500},
      {"dma, pageable", pageable_in.data(), pageable_out.data(), 16384, 20000, 300},
      {"dma, large pieces", (*pinned_in)->data(), (*pinned_out)->data(), size_t(2) << 20, size_t(2) << 20, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::memcpy(c.in, payload.data(), c.stride * c.count - (c.stride - c.piece));
    std::memset(c.out, 0xEE, c.stride * c.count);
    std::vector<ByteCopy> up, down;
    for (size_t i = 0; i < c.count; ++i) {
      up.push_back({(*dev)->data() + i * c.stride, c.in + i * c.stride, c.piece});
      down.push_back({c.out + i * c.stride, (*dev)->data() + i * c.stride, c.piece});
    }
    ASSERT_TRUE((*dev)->copy(up).ok());
    ASSERT_TRUE((*dev)->copy(down).ok());
    for (size_t i = 0; i < c.count; ++i) {
      ASSERT_EQ(std::memcmp(c.out + i * c.stride, c.in + i * c.stride, c.piece), 0) << "piece " << i;
      if (c.stride > c.piece && i + 1 < c.count) {
        ASSERT_EQ(c.out[i * c.stride + c.piece], std::byte{0xEE}) << "gap after piece " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::cuda
