// Shared helpers for the engine tests: a model, a block pool sized for it,
// an engine, and sequences whose pages come from the pool.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "memory/block_pool.h"

namespace kvtier::engine::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitized = true;
#else
inline constexpr bool kThreadSanitized = false;
#endif
#else
inline constexpr bool kThreadSanitized = false;
#endif

inline std::shared_ptr<const Model> preset_model(const char* name, uint64_t seed = 7) {
  auto c = model_preset(name);
  EXPECT_TRUE(c.ok());
  auto m = Model::synthetic(*c, seed);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return *m;
}

struct Rig {
  std::shared_ptr<const Model> model;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Engine> engine;

  Rig(std::shared_ptr<const Model> m, DType dtype, uint32_t pages, uint32_t page_tokens = 16, EngineOptions eo = {})
      : model(std::move(m)) {
    // OpenBLAS's own threads synchronise outside TSan's view; keep sgemm on the calling thread there.
    if (kThreadSanitized) eo.blas_threads = 1;
    auto p = BlockPool::create({.geometry = model->config().kv_geometry(dtype, page_tokens), .num_pages = pages});
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    pool = std::move(*p);
    auto e = Engine::create(model, *pool, eo);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(*e);
  }

  SequenceKV sequence(uint32_t tokens) {
    SequenceKV s;
    EXPECT_TRUE(pool->allocate(engine->pages_for(tokens), s.pages).ok());
    return s;
  }
  void release(SequenceKV& s) {
    for (PageId p : s.pages) pool->unref(p);
    s.pages.clear();
  }
};

inline std::vector<TokenId> random_tokens(uint32_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = TokenId(rng() % vocab);
  return t;
}

// max |a - b| / max |b|
inline double rel_error(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace kvtier::engine::testing
