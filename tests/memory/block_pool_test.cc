#include <gtest/gtest.h>

#include <map>
#include <random>

#include "memory/block_pool.h"

namespace kvtier {
namespace {

KVGeometry geo() { return KVGeometry{.num_layers = 3, .num_kv_heads = 2, .head_dim = 8, .dtype = DType::kF32, .page_tokens = 4}; }

TEST(BlockPool, LayoutIsPageFirst) {
  auto pool = BlockPool::create({.geometry = geo(), .num_pages = 4}).value();
  const auto& g = pool->geometry();
  PageId p = *pool->allocate();
  EXPECT_EQ(pool->layer(p, LayerIdx(1)) - pool->page(p), static_cast<ptrdiff_t>(g.layer_slice_bytes()));
  EXPECT_EQ(pool->v(p, LayerIdx(2)) - pool->k(p, LayerIdx(2)), static_cast<ptrdiff_t>(g.v_offset_in_layer()));
  PageId q = *pool->allocate();
  EXPECT_EQ(pool->page(q) - pool->page(p), static_cast<ptrdiff_t>(g.page_bytes()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->page(p)) % 64, 0u);
}

TEST(BlockPool, AllocateAllOrNothing) {
  auto pool = BlockPool::create({.geometry = geo(), .num_pages = 3}).value();
  std::vector<PageId> out;
  EXPECT_TRUE(pool->allocate(2, out).ok());
  EXPECT_EQ(pool->allocate(2, out).code(), StatusCode::kNoSpace);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(pool->free_pages(), 1u);
  EXPECT_TRUE(pool->allocate().ok());
  EXPECT_FALSE(pool->allocate().ok());
}

TEST(BlockPool, RefCountsAgainstOracle) {
  auto pool = BlockPool::create({.geometry = geo(), .num_pages = 16}).value();
  std::map<uint32_t, uint32_t> oracle;  // page -> refcount
  std::mt19937 rng(7);
  for (int step = 0; step < 20000; ++step) {
    int op = rng() % 3;
    if (op == 0) {
      auto r = pool->allocate();
      ASSERT_EQ(r.ok(), oracle.size() < 16);
      if (r.ok()) {
        ASSERT_FALSE(oracle.count(r->value()));
        oracle[r->value()] = 1;
      }
    } else if (!oracle.empty()) {
      auto it = std::next(oracle.begin(), rng() % oracle.size());
      if (op == 1) {
        pool->ref(PageId(it->first));
        ++it->second;
      } else {
        pool->unref(PageId(it->first));
        if (--it->second == 0) oracle.erase(it);
      }
    }
    ASSERT_EQ(pool->stats().used_pages, oracle.size());
    for (auto& [p, c] : oracle) ASSERT_EQ(pool->refcount(PageId(p)), c);
  }
}

TEST(BlockPool, RejectsBadOptions) {
  EXPECT_FALSE(BlockPool::create({.geometry = geo(), .num_pages = 0}).ok());
  EXPECT_FALSE(BlockPool::create({.geometry = KVGeometry{}, .num_pages = 4}).ok());
  BlockPoolOptions o{.geometry = geo(), .num_pages = 4};
  o.memory.alignment = 100;
  EXPECT_FALSE(BlockPool::create(o).ok());
  EXPECT_EQ(BlockPoolOptions::pages_for_bytes(geo(), geo().page_bytes() * 5 + 1), 5u);
}

}  // namespace
}  // namespace kvtier
