#include "cuda/copy_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cuda/copy_kernels.h"
#include "cuda/cuda_memory.h"
#include "cuda_test_support.h"
#include "tiers/chunk_format.h"

namespace kvtier::cuda {
namespace {

using testing::random_kv;

struct Rig {
  KVGeometry g;
  std::unique_ptr<BlockPool> pool;  // device
  std::unique_ptr<CopyEngine> engine;
  std::vector<std::vector<std::byte>> host_pages;  // what each device page should hold

  Rig(KVGeometry geo, uint32_t pages, CopyEngineOptions options = {}) : g(geo) {
    DeviceMemoryOptions dm;
    dm.backend = MemoryBackend::kCuda;
    dm.alignment = 256;
    auto p = BlockPool::create({.geometry = g, .num_pages = pages, .memory = dm, .allow_device_only = true});
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    pool = std::move(*p);
    auto e = CopyEngine::create(*pool, options);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(*e);
  }
  // Fills every page with random bytes, on the device and in host_pages.
  void fill(uint64_t seed) {
    host_pages.clear();
    for (uint32_t i = 0; i < pool->num_pages(); ++i) {
      host_pages.push_back(random_kv(g.page_bytes(), seed + i));
      testing::to_device(pool->page(PageId(i)), host_pages.back().data(), g.page_bytes());
    }
  }
  std::vector<std::byte> read_page(PageId p) {
    std::vector<std::byte> v(g.page_bytes());
    testing::to_host(v.data(), pool->page(p), v.size());
    return v;
  }
  // The CPU reference: gather_pages over host copies of `pages`.
  std::vector<std::byte> cpu_gather(std::span<const PageId> pages) {
    std::vector<const std::byte*> ptrs;
    for (PageId p : pages) ptrs.push_back(host_pages[p.value()].data());
    std::vector<std::byte> out(pages.size() * g.page_bytes());
    gather_pages(g, ptrs, out.data());
    return out;
  }
};

std::unique_ptr<DeviceMemory> pinned(size_t bytes) {
  DeviceMemoryOptions o;
  o.pinned = true;
  auto m = DeviceMemory::allocate(bytes, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<PageId> shuffled_pages(uint32_t n, uint32_t of, uint64_t seed) {
  std::vector<PageId> all;
  for (uint32_t i = 0; i < of; ++i) all.emplace_back(i);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  return all;
}

const KVGeometry kF32{.num_layers = 4, .num_kv_heads = 2, .head_dim = 16, .dtype = DType::kF32, .page_tokens = 16};
const KVGeometry kF16{.num_layers = 3,
                      .num_kv_heads = 1,
                      .head_dim = 18,
                      .dtype = DType::kF16,
                      .page_tokens = 5};  // slice not a multiple of 16

// Runs without a GPU: argument checks come before any device work.
TEST(CopyEngineArgs, RejectsHostPoolsAndBadOptions) {
  auto cpu = BlockPool::create({.geometry = kF32, .num_pages = 2});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(CopyEngine::create(**cpu).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyEngine::create(**cpu, {.staging_bytes = 16}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerEvents::create(0).status().code(), StatusCode::kInvalidArgument);
}

class GatherScatter : public ::testing::TestWithParam<KVGeometry> {};

// Device gather == CPU gather_pages, byte for byte, including more pages than one launch carries.
TEST_P(GatherScatter, DeviceGatherMatchesCpuGather) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const uint32_t total = kMaxPagesPerLaunch + 100, n = kMaxPagesPerLaunch + 37;
  Rig rig(GetParam(), total);
  rig.fill(11);
  const auto pages = shuffled_pages(n, total, 5);
  auto packed = DeviceMemory::allocate(n * rig.g.page_bytes(), {.backend = MemoryBackend::kCuda, .alignment = 256});
  ASSERT_TRUE(packed.ok());
  ASSERT_TRUE(rig.engine->gather_to_device(pages, (*packed)->data(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> got(n * rig.g.page_bytes());
  testing::to_host(got.data(), (*packed)->data(), got.size());
  EXPECT_TRUE(got == rig.cpu_gather(pages));
}

// Device scatter of a layer-major buffer == CPU scatter_layers.
TEST_P(GatherScatter, DeviceScatterMatchesCpuScatter) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const uint32_t total = 64, n = 40;
  Rig rig(GetParam(), total);
  rig.fill(21);
  const auto pages = shuffled_pages(n, total, 6);
  const auto chunk = random_kv(n * rig.g.page_bytes(), 99);
  auto packed = DeviceMemory::allocate(chunk.size(), {.backend = MemoryBackend::kCuda, .alignment = 256});
  ASSERT_TRUE(packed.ok());
  testing::to_device((*packed)->data(), chunk.data(), chunk.size());
  ASSERT_TRUE(rig.engine->scatter_from_device((*packed)->data(), pages, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte*> ptrs;
  for (PageId p : pages) ptrs.push_back(rig.host_pages[p.value()].data());
  scatter_layers(rig.g, chunk.data(), 0, rig.g.num_layers, ptrs);
  for (uint32_t i = 0; i < total; ++i) ASSERT_TRUE(rig.read_page(PageId(i)) == rig.host_pages[i]) << "page " << i;
}

// store() then load() into other pages: bit-exact, and the stored chunk
// equals the CPU gather, from pinned chunks and from pageable ones. A small
// staging buffer forces the split paths (several passes per layer, several
// layers per pass).
TEST_P(GatherScatter, StoreThenLoadRoundTripsThroughHostChunks) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const size_t small = 3 * GetParam().layer_slice_bytes() + 8;
  for (size_t staging : {size_t(64) << 20, small})
    for (bool pinned_chunks : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "staging " << staging << " pinned " << pinned_chunks);
      const uint32_t total = 96;
      Rig rig(GetParam(), total, {.staging_bytes = staging});
      rig.fill(31);
      const auto src = shuffled_pages(48, total, 7);
      const std::vector<PageId> a(src.begin(), src.begin() + 16), b(src.begin() + 16, src.end());
      const size_t bytes_a = a.size() * rig.g.page_bytes(), bytes_b = b.size() * rig.g.page_bytes();
      std::unique_ptr<DeviceMemory> pa, pb;
      std::vector<std::byte> va, vb;
      std::byte *ca = nullptr, *cb = nullptr;
      if (pinned_chunks) {
        pa = pinned(bytes_a), pb = pinned(bytes_b);
        ca = pa->data(), cb = pb->data();
      } else {
        va.resize(bytes_a), vb.resize(bytes_b);
        ca = va.data(), cb = vb.data();
      }
      const ChunkStore stores[] = {{a, ca}, {b, cb}};
      ASSERT_TRUE(rig.engine->store(stores).ok());
      ASSERT_TRUE(rig.engine->synchronize_stores().ok());
      EXPECT_EQ(std::memcmp(ca, rig.cpu_gather(a).data(), bytes_a), 0);
      EXPECT_EQ(std::memcmp(cb, rig.cpu_gather(b).data(), bytes_b), 0);

      // Load both chunks into the 48 pages not used above.
      std::vector<PageId> rest;
      for (uint32_t i = 0; i < total; ++i)
        if (std::find(src.begin(), src.end(), PageId(i)) == src.end()) rest.emplace_back(i);
      const std::vector<PageId> da(rest.begin(), rest.begin() + 16), db(rest.begin() + 16, rest.end());
      auto ev = LayerEvents::create(rig.g.num_layers);
      ASSERT_TRUE(ev.ok());
      const ChunkLoad loads[] = {{ca, da}, {cb, db}};
      ASSERT_TRUE(rig.engine->load(loads, **ev).ok());
      ASSERT_TRUE(rig.engine->synchronize_loads().ok());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(rig.read_page(da[i]) == rig.host_pages[a[i].value()]) << i;
      for (size_t i = 0; i < b.size(); ++i) ASSERT_TRUE(rig.read_page(db[i]) == rig.host_pages[b[i].value()]) << i;
    }
}

// A load of many chunks of different lengths, more pages per layer than
// one scatter launch carries, in one batched submission per layer.
TEST_P(GatherScatter, LoadOfManyChunksAcrossLaunches) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const uint32_t total = 2 * kMaxPagesPerLaunch + 64;
  Rig rig(GetParam(), total);
  const auto pages = shuffled_pages(2 * kMaxPagesPerLaunch + 40, total, 9);
  const size_t P = rig.g.page_bytes();
  auto arena = pinned(pages.size() * P);
  const auto payload = random_kv(pages.size() * P, 77);
  std::memcpy(arena->data(), payload.data(), payload.size());
  std::vector<ChunkLoad> loads;
  for (size_t p0 = 0, len = 1; p0 < pages.size(); p0 += len, len = len % 37 + 5) {
    len = std::min(len, pages.size() - p0);
    loads.push_back({arena->data() + p0 * P, std::span<const PageId>(pages).subspan(p0, len)});
  }
  auto ev = LayerEvents::create(rig.g.num_layers);
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(rig.engine->load(loads, **ev).ok());
  ASSERT_TRUE(rig.engine->synchronize_loads().ok());
  for (const ChunkLoad& c : loads) {
    std::vector<std::vector<std::byte>> want(c.pages.size(), std::vector<std::byte>(P));
    std::vector<std::byte*> ptrs;
    for (auto& w : want) ptrs.push_back(w.data());
    scatter_layers(rig.g, c.chunk, 0, rig.g.num_layers, ptrs);
    for (size_t i = 0; i < c.pages.size(); ++i) ASSERT_TRUE(rig.read_page(c.pages[i]) == want[i]) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, GatherScatter, ::testing::Values(kF32, kF16));

// Compute waiting on layer 0 runs while layer 1.. are still held back: the
// load stream is blocked (on the host) right after layer 0 is enqueued.
TEST(LayerEventsOrdering, ComputeWaitsOnlyForItsLayer) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Rig rig(kF32, 32);
  rig.fill(41);
  std::vector<PageId> dst;
  for (uint32_t i = 0; i < 8; ++i) dst.emplace_back(i);
  const auto payload = random_kv(dst.size() * kF32.page_bytes(), 5);
  auto chunk = pinned(payload.size());
  std::memcpy(chunk->data(), payload.data(), payload.size());
  auto ev = LayerEvents::create(kF32.num_layers);
  ASSERT_TRUE(ev.ok());

  std::atomic<bool> open{false};
  // Opens the gate on every exit path, so a failed assertion cannot leave the
  // load stream blocked (the engine's destructor waits for it).
  struct Opener {
    std::atomic<bool>& flag;
    ~Opener() { flag.store(true); }
  } opener{open};
  auto gate = [](void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  };
  LoadOptions lo;
  lo.after_layer = [&](LayerIdx l) -> Status {
    if (l.value() == 0)
      return cuda_status(cudaLaunchHostFunc(rig.engine->load_stream(), gate, &open), "cudaLaunchHostFunc");
    return Status::Ok();
  };
  const ChunkLoad loads[] = {{chunk->data(), dst}};
  ASSERT_TRUE(rig.engine->load(loads, **ev, lo).ok());

  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE((*ev)->wait_on(LayerIdx(0), compute).ok());
  // "Compute" on layer 0: copy layer 0 of the first page out.
  std::vector<std::byte> layer0(kF32.layer_slice_bytes());
  ASSERT_EQ(cudaMemcpyAsync(layer0.data(), rig.pool->layer(dst[0], LayerIdx(0)), layer0.size(), cudaMemcpyDeviceToHost,
                            compute),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);                   // would hang if it waited on later layers
  EXPECT_EQ(std::memcmp(layer0.data(), payload.data(), layer0.size()), 0);  // chunk layer 0, page 0
  auto last = (*ev)->ready(LayerIdx(kF32.num_layers - 1));
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(*last) << "the last layer arrived although the load stream is gated";

  open.store(true);
  ASSERT_TRUE((*ev)->synchronize(LayerIdx(kF32.num_layers - 1)).ok());
  for (uint32_t l = 0; l < kF32.num_layers; ++l) EXPECT_TRUE(*(*ev)->ready(LayerIdx(l)));
  ASSERT_EQ(cudaStreamDestroy(compute), cudaSuccess);
}

}  // namespace
}  // namespace kvtier::cuda
