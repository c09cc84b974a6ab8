// A whole model quantised by llama.cpp (tests/data/models/small-seed2-Q4_K_M.gguf,
// see its README): it loads with the types llama-quantize gave each tensor,
// and it runs with logits that differ from the f32 model it was quantised
// from (the `small` preset, seed 2) only by quantisation error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "engine/gguf.h"
#include "engine_fixture.h"
#include "test_data.h"

namespace kvtier::engine {
namespace {

using testing::Rig;

std::string q4_k_m_path() { return testdata::test_data_path("models/small-seed2-Q4_K_M.gguf"); }

// How far a quantised model's next-token distributions are from the f32 model's.
struct Divergence {
  double max_kl = 0, mean_kl = 0;    // KL(f32 || quantised), nats per position
  double max_abs_logit = 0;          // over every logit of every position
  double logit_range = 0;            // max |f32 logit|, for scale
  size_t positions = 0, top1_agree = 0;

  void add(std::span<const float> reference, std::span<const float> quantised) {
    double ref_max = -INFINITY, q_max = -INFINITY;
    size_t ref_arg = 0, q_arg = 0;
    for (size_t k = 0; k < reference.size(); ++k) {
      if (reference[k] > ref_max) ref_max = reference[k], ref_arg = k;
      if (quantised[k] > q_max) q_max = quantised[k], q_arg = k;
      max_abs_logit = std::max(max_abs_logit, std::fabs(double(reference[k]) - quantised[k]));
      logit_range = std::max(logit_range, std::fabs(double(reference[k])));
    }
    double ref_sum = 0, q_sum = 0;
    for (size_t k = 0; k < reference.size(); ++k)
      ref_sum += std::exp(reference[k] - ref_max), q_sum += std::exp(quantised[k] - q_max);
    double kl = 0;
    for (size_t k = 0; k < reference.size(); ++k) {
      const double log_p = reference[k] - ref_max - std::log(ref_sum), log_q = quantised[k] - q_max - std::log(q_sum);
      kl += std::exp(log_p) * (log_p - log_q);
    }
    max_kl = std::max(max_kl, kl);
    mean_kl += (kl - mean_kl) / double(++positions);
    top1_agree += ref_arg == q_arg;
  }
};

class QuantModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = load_gguf(q4_k_m_path());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    quantised_ = new std::shared_ptr<const Model>(*loaded);
    reference_ = new std::shared_ptr<const Model>(testing::preset_model("small", 2));
  }
  static void TearDownTestSuite() {
    delete quantised_, delete reference_;
    quantised_ = reference_ = nullptr;
  }

  static std::shared_ptr<const Model>* quantised_;
  static std::shared_ptr<const Model>* reference_;
};
std::shared_ptr<const Model>* QuantModel::quantised_ = nullptr;
std::shared_ptr<const Model>* QuantModel::reference_ = nullptr;

TEST_F(QuantModel, LoadsWithTheTypesLlamaQuantizeChose) {
  const ModelConfig& q = (*quantised_)->config();
  const ModelConfig& r = (*reference_)->config();
  EXPECT_EQ(q.hidden_size, r.hidden_size);
  EXPECT_EQ(q.num_layers, r.num_layers);
  EXPECT_EQ(q.ffn_size, r.ffn_size);
  EXPECT_EQ(q.vocab_size, r.vocab_size);
  auto tensors = load_gguf_tensors(q4_k_m_path(), /*dequantize=*/false);
  ASSERT_TRUE(tensors.ok()) << tensors.status().to_string();
  std::map<std::string_view, int> counts;
  for (const GgufTensor& t : *tensors) ++counts[quant::info(t.type).name];
  const std::map<std::string_view, int> expected = {{"Q4_K", 45}, {"Q6_K", 5}, {"Q8_0", 4}, {"Q5_0", 4}, {"F32", 17}};
  EXPECT_EQ(counts, expected);
}

// Before allocating, the loader compares the resident size of the weights (in
// their file types: 36 MiB, not the 215 MiB of f32) plus what the caller adds
// with the memory it may use, and refuses with a message naming each part.
TEST_F(QuantModel, RefusesWeightsLargerThanTheMemoryLimit) {
  auto r = load_gguf(q4_k_m_path(), {.memory_limit_bytes = 30ull << 20});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace);
  EXPECT_NE(r.status().message().find("weights 36."), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("30.0 MiB allowed"), std::string::npos) << r.status().message();
  auto loaded = load_gguf(q4_k_m_path(), {.memory_limit_bytes = 40ull << 20});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_LT((*loaded)->weights().bytes(), 40ull << 20);
  r = load_gguf(q4_k_m_path(), {.memory_limit_bytes = 40ull << 20, .also_needed = {{"KV pool", 8ull << 20}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("KV pool 8.0 MiB"), std::string::npos) << r.status().message();
}

TEST(MemoryBudget, CgroupRoomReadsMaxAndCurrent) {
  EXPECT_EQ(cgroup_room("max\n", "123\n"), UINT64_MAX);
  EXPECT_EQ(cgroup_room("1000\n", "400\n"), 600u);
  EXPECT_EQ(cgroup_room("1000", "4000"), 0u);
  EXPECT_GT(available_memory_bytes(), 0u);
}

// Parts near 2^64 bytes neither wrap their sum to a fit nor their size to a small one when shown.
TEST(MemoryBudget, HugePartsDoNotWrap) {
  EXPECT_EQ(format_bytes(uint64_t(1) << 63), "8589934592.0 GiB");
  const MemoryPart parts[] = {{"KV pool", uint64_t(1) << 63}, {"host tier", uint64_t(1) << 63}, {"weights", 22u << 20}};
  const Status s = check_fits("model", parts, uint64_t(1) << 40);
  ASSERT_EQ(s.code(), StatusCode::kNoSpace);
  EXPECT_NE(s.message().find("KV pool 8589934592.0 GiB"), std::string::npos) << s.message();
}

// sqrt(mean (a - b)^2) / sqrt(mean b^2)
double relative_rms(std::span<const float> a, std::span<const float> b) {
  double err = 0, ref = 0;
  for (size_t k = 0; k < a.size(); ++k) err += (double(a[k]) - b[k]) * (double(a[k]) - b[k]), ref += double(b[k]) * b[k];
  return ref > 0 ? std::sqrt(err / ref) : std::sqrt(err);
}

// Each matrix, as loaded, is its f32 original plus quantisation noise: a few
// percent of its RMS (a tensor read into the wrong place, or a wrong block
// layout, is off by ~100%). Norm vectors stay F32 and are exact.
TEST_F(QuantModel, WeightsDifferOnlyByQuantisationError) {
  const ModelWeights& q = (*quantised_)->weights();
  const ModelWeights& r = (*reference_)->weights();
  std::vector<std::pair<std::string, double>> errors = {
      {"token_embd", relative_rms(q.token_embd.to_f32(), r.token_embd.to_f32())},
      {"output", relative_rms(q.output.to_f32(), r.output.to_f32())}};
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const LayerWeights &ql = q.layers[l], &rl = r.layers[l];
    EXPECT_EQ(ql.attn_norm, rl.attn_norm);
    EXPECT_EQ(ql.ffn_norm, rl.ffn_norm);
    for (auto [name, a, b] : {std::tuple{"wqkv", &ql.wqkv, &rl.wqkv}, {"wo", &ql.wo, &rl.wo},
                              {"w_gate_up", &ql.w_gate_up, &rl.w_gate_up}, {"w_down", &ql.w_down, &rl.w_down}})
      errors.emplace_back("blk." + std::to_string(l) + "." + name, relative_rms(a->to_f32(), b->to_f32()));
  }
  EXPECT_EQ(q.output_norm, r.output_norm);
  for (const auto& [name, error] : errors) {
    std::printf("%-16s relative RMS error %.4f\n", name.c_str(), error);
    EXPECT_GT(error, 0.0) << name;
    EXPECT_LT(error, 0.15) << name;
  }
}

// The divergence of `candidate` from `reference` at every position of four
// prompts of 32 random tokens.
Divergence divergence(std::shared_ptr<const Model> candidate, std::shared_ptr<const Model> reference,
                      EngineOptions candidate_options = {}, EngineOptions reference_options = {}) {
  Rig cand(candidate, DType::kF32, 8, 16, candidate_options), ref(reference, DType::kF32, 8, 16, reference_options);
  Divergence d;
  for (uint64_t prompt = 0; prompt < 4; ++prompt) {
    const auto tokens = testing::random_tokens(32, reference->config().vocab_size, 100 + prompt);
    SequenceKV cs = cand.sequence(32), rs = ref.sequence(32);
    auto cl = cand.engine->prefill(cs, tokens, 0, {.all_logits = true});
    auto rl = ref.engine->prefill(rs, tokens, 0, {.all_logits = true});
    EXPECT_TRUE(cl.ok() && rl.ok());
    if (cl.ok() && rl.ok())
      for (uint32_t row = 0; row < rl->rows; ++row) d.add(rl->row(row), cl->row(row));
    cand.release(cs), ref.release(rs);
  }
  return d;
}

void print(const char* what, const Divergence& d) {
  std::printf("%s vs f32 over %zu positions: KL mean %.4f max %.4f nats, max |logit diff| %.3f (f32 logits up to %.2f), "
              "top-1 agreement %zu/%zu\n",
              what, d.positions, d.mean_kl, d.max_kl, d.max_abs_logit, d.logit_range, d.top1_agree, d.positions);
}

// The quantised model's next-token distributions stay close to the f32
// model's, within about 1.5x of what was measured (docs/PERF.md, "Quantized
// weights"). The synthetic model's logits are flat (random weights), so
// top-1 flips between close candidates easily; Q8_0 written by kvtier is the
// scale: errors grow with quantisation noise, not from a loading bug.
TEST_F(QuantModel, LogitsDifferOnlyByQuantisationError) {
  const Divergence q4 = divergence(*quantised_, *reference_);
  print("Q4_K_M (llama.cpp)", q4);
  // The pid keeps concurrent runs (sanitizer builds side by side) off each other's file.
  const std::string q8_path = ::testing::TempDir() + "kvtier-small-seed2-q8_0-" + std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(write_gguf(**reference_, q8_path, {.weight_type = GgufType::kQ8_0}).ok());
  auto q8_model = load_gguf(q8_path);
  std::remove(q8_path.c_str());
  ASSERT_TRUE(q8_model.ok()) << q8_model.status().to_string();
  const Divergence q8 = divergence(*q8_model, *reference_);
  print("Q8_0 (kvtier)", q8);

  EXPECT_GT(q4.max_abs_logit, 0.0) << "identical logits: the fixture was not quantised?";
  EXPECT_LT(q4.mean_kl, 0.09);
  EXPECT_LT(q4.max_kl, 0.15);
  EXPECT_LT(q4.max_abs_logit, 3.0);
  EXPECT_GE(double(q4.top1_agree), 0.5 * double(q4.positions));
  EXPECT_LT(q8.mean_kl, q4.mean_kl / 4) << "Q8_0 must be much closer than Q4_K_M";
}

// The fingerprint keys every cache entry, so it must not depend on how the
// weights are held: the f32 preset's is the one recorded when the Q4_K_M
// fixture was made (tests/data/models/README.md), and the quantized file's
// equals the fingerprint of an f32 copy of its dequantized weights.
TEST_F(QuantModel, FingerprintDoesNotDependOnTheTypeWeightsAreHeldIn) {
  EXPECT_EQ((*reference_)->fingerprint().to_hex(), "e08ac2d9bdf4e44cb08de7e0b13afa44");
  const ModelWeights& q = (*quantised_)->weights();
  ModelWeights widened = q;
  auto widen = [](Linear& m) { m = m.empty() ? Linear() : Linear::f32(m.to_f32(), m.cols()); };
  widen(widened.token_embd), widen(widened.output);
  for (LayerWeights& l : widened.layers) widen(l.wqkv), widen(l.wo), widen(l.w_gate_up), widen(l.w_down);
  EXPECT_NE(widened.bytes(), q.bytes());
  EXPECT_EQ(model_fingerprint((*quantised_)->config(), widened), (*quantised_)->fingerprint());
}

// Activations quantized per block (the default path) against the exact path
// (weight panels dequantized, f32 products) on the same Q4_K_M weights: the
// extra error is far below the weights' own quantisation error (measured:
// docs/PERF.md, "Quantized engine").
TEST_F(QuantModel, QuantizedActivationsStayCloseToTheExactPath) {
  const Divergence d = divergence(*quantised_, *quantised_, {}, {.exact_weights = true});
  print("Q4_K_M int8 activations vs exact path", d);
  const Divergence q4 = divergence(*quantised_, *reference_);
  EXPECT_GT(d.max_abs_logit, 0.0) << "no difference: is the exact path running?";
  EXPECT_LT(d.mean_kl, q4.mean_kl / 4);
  EXPECT_GE(double(d.top1_agree), 0.9 * double(d.positions));
}

// A decode step writes the K and V a prefill of the same tokens writes, and gives its logits, bit
// for bit: attention rounds a row alike whatever the rows beside it, and so do quantized weights'
// products (Forward::decode_matches_prefill). So a sequence's generated tokens are cached as they
// were decoded, and one recomputed after a preemption goes on as it would have. Prefill chunks of
// 16 rows and of 1,024 (the whole sequence at once); f32 and f16 KV.
TEST_F(QuantModel, ADecodeStepWritesTheKvAPrefillWrites) {
  constexpr uint32_t kPrompt = 37, kGenerated = 40, kAll = kPrompt + kGenerated;
  const auto tokens = testing::random_tokens(kAll, (*quantised_)->config().vocab_size, 11);
  for (const DType dtype : {DType::kF32, DType::kF16})
    for (const uint32_t chunk : {16u, 1024u}) {
      SCOPED_TRACE(std::string(dtype == DType::kF32 ? "f32 KV" : "f16 KV") + ", chunk " + std::to_string(chunk));
      Rig rig(*quantised_, dtype, 32, 16, {.prefill_chunk = chunk});
      EXPECT_TRUE(rig.engine->decode_matches_prefill());
      SequenceKV decoded = rig.sequence(kAll), prefilled = rig.sequence(kAll);
      ASSERT_TRUE(rig.engine->prefill(decoded, std::span(tokens).first(kPrompt), 0).ok());
      Logits last;
      for (uint32_t i = kPrompt; i < kAll; ++i) {
        SequenceKV* one = &decoded;
        auto r = rig.engine->decode(std::span(&one, 1), std::span(&tokens[i], 1));
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        last = std::move(*r);
      }
      auto whole = rig.engine->prefill(prefilled, tokens, 0);
      ASSERT_TRUE(whole.ok()) << whole.status().to_string();
      ASSERT_EQ(whole->data, last.data);  // bit for bit

      const KVGeometry& geo = rig.pool->geometry();
      const size_t row = geo.token_kv_half_bytes();
      for (uint32_t l = 0; l < (*quantised_)->config().num_layers; ++l)
        for (uint32_t pos = 0; pos < kAll; ++pos) {
          const size_t off = size_t(pos % geo.page_tokens) * row;
          const PageId pa = decoded.pages[pos / geo.page_tokens], pb = prefilled.pages[pos / geo.page_tokens];
          ASSERT_EQ(std::memcmp(rig.pool->k(pa, LayerIdx(l)) + off, rig.pool->k(pb, LayerIdx(l)) + off, row), 0)
              << "K, layer " << l << " position " << pos;
          ASSERT_EQ(std::memcmp(rig.pool->v(pa, LayerIdx(l)) + off, rig.pool->v(pb, LayerIdx(l)) + off, row), 0)
              << "V, layer " << l << " position " << pos;
        }
    }
}

// Where BLAS multiplies (F32 weights, or quantized ones on the exact path), a row rounds by batch:
// the engine says decode does not match prefill, and the runtime prefills replies again.
TEST_F(QuantModel, BlasProductsDoNotMatchDecodeToPrefill) {
  EXPECT_FALSE(Rig(*reference_, DType::kF32, 8).engine->decode_matches_prefill());
  EXPECT_FALSE(Rig(*quantised_, DType::kF32, 8, 16, {.exact_weights = true}).engine->decode_matches_prefill());
}

}  // namespace
}  // namespace kvtier::engine
