// BlockPool over caller-owned memory: pages are the caller's bytes, nothing
// is allocated or zeroed, and bad buffers are refused with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "memory/block_pool.h"
#include "memory/external_memory.h"

namespace kvtier {
namespace {

KVGeometry small_geometry() {
  return KVGeometry{.num_layers = 2, .num_kv_heads = 2, .head_dim = 8, .dtype = DType::kF32, .page_tokens = 4};
}

TEST(ExternalMemory, PoolPagesAreTheCallersBytes) {
  const KVGeometry g = small_geometry();
  alignas(64) static std::byte buf[4 * 2 * 2 * 4 * 2 * 8 * 4];
  std::memset(buf, 0x7F, sizeof(buf));
  BlockPoolOptions o = BlockPoolOptions::on(MemoryBackend::kCpu, g, 4);
  o.external = std::span(buf, sizeof(buf));
  auto pool = BlockPool::create(o);
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  EXPECT_EQ((*pool)->memory().data(), buf);
  EXPECT_EQ((*pool)->memory().size(), sizeof(buf));
  auto p = (*pool)->allocate();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*pool)->page(*p), buf + size_t(p->value()) * g.page_bytes());
  EXPECT_EQ(std::to_integer<int>(*(*pool)->v(*p, LayerIdx(1))), 0x7F);  // not zeroed: the caller's bytes
}

TEST(ExternalMemory, RefusesUnalignedShortOrEmptyBuffers) {
  const KVGeometry g = small_geometry();
  std::vector<std::byte> raw(g.page_bytes() * 4 + 128);
  auto* base = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;
  EXPECT_EQ(adopt_host_memory({}).status().code(), StatusCode::kInvalidArgument);
  auto unaligned = adopt_host_memory(std::span(base + 8, g.page_bytes()));
  EXPECT_EQ(unaligned.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unaligned.status().message().find("aligned"), std::string::npos);
  BlockPoolOptions o = BlockPoolOptions::on(MemoryBackend::kCpu, g, 4);
  o.external = std::span(base, g.page_bytes() * 3);
  EXPECT_EQ(BlockPool::create(o).status().code(), StatusCode::kInvalidArgument);
  o.external = std::span(base, g.page_bytes() * 4);
  EXPECT_TRUE(BlockPool::create(o).ok());
}

}  // namespace
}  // namespace kvtier
