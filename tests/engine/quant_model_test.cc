// A whole model quantised by llama.cpp (tests/data/models/small-seed2-Q4_K_M.gguf,
// see its README): it loads with the types llama-quantize gave each tensor,
// and it runs with logits that differ from the f32 model it was quantised
// from (the `small` preset, seed 2) only by quantisation error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
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

// Before allocating, the loader compares the f32 size of the weights with the
// memory it may use and refuses with a message saying both.
TEST_F(QuantModel, RefusesWeightsLargerThanTheMemoryLimit) {
  auto r = load_gguf(q4_k_m_path(), {.memory_limit_bytes = 100ull << 20});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace);
  EXPECT_NE(r.status().message().find("Q4_K"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("0.2 GiB as f32"), std::string::npos) << r.status().message();
  EXPECT_TRUE(load_gguf(q4_k_m_path(), {.memory_limit_bytes = 300ull << 20}).ok());
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
      {"token_embd", relative_rms(q.token_embd, r.token_embd)}, {"output", relative_rms(q.output, r.output)}};
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const LayerWeights &ql = q.layers[l], &rl = r.layers[l];
    EXPECT_EQ(ql.attn_norm, rl.attn_norm);
    EXPECT_EQ(ql.ffn_norm, rl.ffn_norm);
    for (auto [name, a, b] : {std::tuple{"wqkv", &ql.wqkv, &rl.wqkv}, {"wo", &ql.wo, &rl.wo},
                              {"w_gate_up", &ql.w_gate_up, &rl.w_gate_up}, {"w_down", &ql.w_down, &rl.w_down}})
      errors.emplace_back("blk." + std::to_string(l) + "." + name, relative_rms(*a, *b));
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
Divergence divergence(std::shared_ptr<const Model> candidate, std::shared_ptr<const Model> reference) {
  Rig cand(candidate, DType::kF32, 8), ref(reference, DType::kF32, 8);
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

}  // namespace
}  // namespace kvtier::engine
