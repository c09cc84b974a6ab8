#include <gtest/gtest.h>

#include "cuda/copy_engine.h"
#include "cuda/cuda_engine.h"
#include "cuda_test_support.h"
#include "model_variants.h"
#include "engine/engine_fixture.h"
#include "engine/sampler.h"
#include "tiers/chunk_format.h"

namespace kvtier::cuda {
namespace {

using engine::Logits;
using engine::SequenceKV;
using engine::testing::preset_model;
using engine::testing::random_tokens;
using engine::testing::rel_error;

// The CPU reference engine and a CUDA engine on the same model.
struct Pair {
  engine::testing::Rig cpu;
  std::unique_ptr<BlockPool> dpool;
  std::unique_ptr<CudaEngine> gpu;

  Pair(const char* model, DType kv, uint32_t pages, DType weights = DType::kF32)
      : cpu(preset_model(model), kv, pages) {
    DeviceMemoryOptions dm;
    dm.backend = MemoryBackend::kCuda;
    dm.alignment = 256;
    auto p = BlockPool::create({.geometry = cpu.pool->geometry(), .num_pages = pages, .memory = dm, .allow_device_only = true});
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    dpool = std::move(*p);
    auto e = CudaEngine::create(cpu.model, *dpool, {.weights = weights});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    gpu = std::move(*e);
  }
  SequenceKV gpu_sequence(uint32_t tokens) {
    SequenceKV s;
    EXPECT_TRUE(dpool->allocate(gpu->pages_for(tokens), s.pages).ok());
    return s;
  }
};

// Greedy continuation with decode on either engine.
template <class E>
std::vector<TokenId> greedy(E& e, SequenceKV& seq, std::span<const float> first, uint32_t n,
                            std::vector<std::vector<float>>& rows) {
  std::vector<TokenId> out;
  std::vector<float> cur(first.begin(), first.end());
  for (uint32_t i = 0; i < n; ++i) {
    const TokenId t = engine::argmax(cur);
    out.push_back(t);
    SequenceKV* s = &seq;
    auto r = e.decode(std::span(&s, 1), std::span(&t, 1));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) break;
    cur.assign(r->data.begin(), r->data.end());
    rows.push_back(cur);
  }
  return out;
}

// Runs without a GPU: a host pool is refused before any device work.
TEST(CudaEngineArgs, RejectsHostPool) {
  engine::testing::Rig cpu(preset_model("tiny"), DType::kF32, 4);
  EXPECT_EQ(CudaEngine::create(cpu.model, *cpu.pool).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaEngine::create(cpu.model, *cpu.pool, {.prefill_chunk = 0}).status().code(), StatusCode::kInvalidArgument);
}

// Runs without a GPU: what the kernels do not implement is refused by name;
// Llama 3.1 scaling only changes the shared RoPE table, so it passes that check.
TEST(CudaEngineArgs, RefusesQwen2ByName) {
  for (const char* variant : {"qwen2", "llama3-scaled"}) {
    engine::testing::Rig cpu(*kvtier::testing::model_variant(variant, 3), DType::kF32, 4);
    const Status st = CudaEngine::create(cpu.model, *cpu.pool).status();
    if (std::string(variant) == "qwen2") {
      EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.to_string();
      EXPECT_NE(st.message().find("'qwen2'"), std::string::npos) << st.to_string();
    } else {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();  // the host pool, as above
    }
  }
}

struct Case {
  const char* model;
  DType kv;
  uint32_t len;
  double bound;  // max |gpu - cpu| / max |cpu| over logits rows
};

class CudaExactness : public ::testing::TestWithParam<Case> {};

// Prefill logits within `bound` of the CPU engine and greedy tokens identical.
// The bound is float rounding: summation order differs (cuBLAS, block
// reductions, online softmax chunking), never the math.
TEST_P(CudaExactness, MatchesCpuEngine) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const Case c = GetParam();
  const uint32_t cont = 16;
  Pair pr(c.model, c.kv, 2 * ((c.len + cont) / 16 + 1) + 4);
  const auto tokens = random_tokens(c.len, pr.cpu.model->config().vocab_size, c.len + 3);
  SequenceKV cs = pr.cpu.sequence(c.len + cont), gs = pr.gpu_sequence(c.len + cont);
  auto lc = pr.cpu.engine->prefill(cs, tokens, 0, {.all_logits = true});
  auto lg = pr.gpu->prefill(gs, tokens, 0, {.all_logits = true});
  ASSERT_TRUE(lc.ok()) << lc.status().to_string();
  ASSERT_TRUE(lg.ok()) << lg.status().to_string();
  ASSERT_EQ(lg->rows, lc->rows);
  double worst = 0;
  for (uint32_t i = 0; i < lc->rows; ++i) worst = std::max(worst, rel_error(lg->row(i), lc->row(i)));
  EXPECT_LT(worst, c.bound) << "prefill logits";
  std::vector<std::vector<float>> rc, rg;
  const auto tc = greedy(*pr.cpu.engine, cs, lc->last(), cont, rc);
  const auto tg = greedy(*pr.gpu, gs, lg->last(), cont, rg);
  EXPECT_EQ(tg, tc) << "greedy tokens";
  for (size_t i = 0; i < std::min(rc.size(), rg.size()); ++i) EXPECT_LT(rel_error(rg[i], rc[i]), c.bound) << "decode " << i;
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaExactness,
                         ::testing::Values(Case{"tiny", DType::kF32, 200, 1e-4}, Case{"tiny", DType::kF16, 200, 1e-3},
                                           Case{"small", DType::kF32, 300, 1e-4}, Case{"small", DType::kBF16, 300, 1e-2}),
                         [](const auto& info) {
                           return std::string(info.param.model) + "_" + std::string(dtype_name(info.param.kv));
                         });

// A cache hit on the GPU path: the prefix KV computed by the CPU engine is
// gathered into a pinned chunk, loaded layer by layer into device pages by
// the CopyEngine, and the suffix prefill waits per layer on the load's
// events. The result equals a full GPU recompute.
TEST(CudaCachedPrefill, LoadedPrefixEqualsRecompute) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  const uint32_t len = 160, prefix = 128;  // prefix is 8 whole pages
  Pair pr("small", DType::kF32, 40);
  const auto tokens = random_tokens(len, pr.cpu.model->config().vocab_size, 77);
  SequenceKV cs = pr.cpu.sequence(len);
  ASSERT_TRUE(pr.cpu.engine->prefill(cs, std::span(tokens).first(prefix), 0).ok());
  const KVGeometry& g = pr.dpool->geometry();
  const uint32_t np = prefix / g.page_tokens;
  std::vector<const std::byte*> src;
  for (uint32_t i = 0; i < np; ++i) src.push_back(pr.cpu.pool->page(cs.pages[i]));
  DeviceMemoryOptions po;
  po.pinned = true;
  auto chunk = DeviceMemory::allocate(np * g.page_bytes(), po);
  ASSERT_TRUE(chunk.ok());
  gather_pages(g, src, (*chunk)->data());

  auto copy = CopyEngine::create(*pr.dpool);
  ASSERT_TRUE(copy.ok());
  auto ev = LayerEvents::create(g.num_layers);
  ASSERT_TRUE(ev.ok());
  SequenceKV hit = pr.gpu_sequence(len);
  const ChunkLoad loads[] = {{(*chunk)->data(), std::span(hit.pages).first(np)}};
  ASSERT_TRUE((*copy)->load(loads, **ev).ok());
  hit.num_tokens = prefix;
  engine::PrefillOptions po2;
  po2.layer_hook = [&](LayerIdx l) { return (*ev)->wait_on(l, pr.gpu->stream()); };
  auto lh = pr.gpu->prefill(hit, tokens, prefix, po2);
  ASSERT_TRUE(lh.ok()) << lh.status().to_string();

  SequenceKV full = pr.gpu_sequence(len);
  auto lf = pr.gpu->prefill(full, tokens, 0);
  ASSERT_TRUE(lf.ok());
  EXPECT_LT(rel_error(lh->last(), lf->last()), 1e-4);
  EXPECT_EQ(engine::argmax(lh->last()), engine::argmax(lf->last()));
}

// bf16 weights: activations are rounded to bf16 at each GEMM input, so the
// bound is bf16's (about 2^-8 relative per rounding, a few roundings deep).
TEST(CudaBf16Weights, WithinBf16BoundOfCpu) {
  KVTIER_REQUIRE_CUDA_DEVICE();
  Pair pr("small", DType::kF32, 32, DType::kBF16);
  const auto tokens = random_tokens(200, pr.cpu.model->config().vocab_size, 5);
  SequenceKV cs = pr.cpu.sequence(200), gs = pr.gpu_sequence(200);
  auto lc = pr.cpu.engine->prefill(cs, tokens, 0);
  auto lg = pr.gpu->prefill(gs, tokens, 0);
  ASSERT_TRUE(lc.ok() && lg.ok());
  EXPECT_LT(rel_error(lg->last(), lc->last()), 5e-2);
}

}  // namespace
}  // namespace kvtier::cuda
