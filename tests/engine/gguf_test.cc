#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/gguf.h"
#include "engine/quantize.h"
#include "engine_fixture.h"
#include "model_variants.h"

namespace kvtier::engine {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kvtier_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<char> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

Result<std::shared_ptr<const Model>> parse(const std::vector<char>& b) {
  return parse_gguf(std::span(reinterpret_cast<const std::byte*>(b.data()), b.size()), "test.gguf");
}

Logits logits_of(std::shared_ptr<const Model> m, const std::vector<TokenId>& tokens) {
  testing::Rig rig(std::move(m), DType::kF32, 8);
  SequenceKV s = rig.sequence(uint32_t(tokens.size()));
  return *rig.engine->prefill(s, tokens, 0, {.all_logits = true});
}

// Byte offset just past a tensor's name in its tensor-info record.
size_t after_name(const std::vector<char>& b, const std::string& name) {
  const std::string needle = name;
  for (size_t i = 8; i + needle.size() <= b.size(); ++i) {
    uint64_t len;
    std::memcpy(&len, &b[i - 8], 8);
    if (len == needle.size() && std::memcmp(&b[i], needle.data(), needle.size()) == 0) return i + needle.size();
  }
  ADD_FAILURE() << "tensor info of " << name << " not found";
  return 0;
}

class GgufRoundTrip : public ::testing::TestWithParam<const char*> {};

// F32, F16 and BF16 copies of a synthetic model are exact: same fingerprint (the weights' f32
// values), and the same logits — bit for bit from F32; F16/BF16 weights stay 16-bit in memory and
// their kernel sums in another order, so their logits agree to f32 rounding.
TEST_P(GgufRoundTrip, LoadsBackIdentical) {
  auto model = testing::preset_model("tiny", 5);
  const std::string path = temp_path(GetParam());
  ASSERT_TRUE(write_gguf(*model, path, {.weight_type = parse_weight_format(GetParam())->type}).ok());
  auto loaded = load_gguf(path);
  fs::remove(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)->config(), model->config());
  EXPECT_EQ((*loaded)->fingerprint(), model->fingerprint());
  EXPECT_EQ((*loaded)->vocab().tokens, model->vocab().tokens);
  EXPECT_EQ((*loaded)->vocab().types, model->vocab().types);
  const auto tokens = testing::random_tokens(40, model->config().vocab_size, 1);
  if (std::string_view(GetParam()) == "f32") {
    EXPECT_EQ(logits_of(*loaded, tokens).data, logits_of(model, tokens).data);
  } else {
    EXPECT_EQ((*loaded)->weights().layers[0].wqkv.parts()[0].type(), parse_weight_format(GetParam())->type);
    EXPECT_LT(testing::rel_error(logits_of(*loaded, tokens).data, logits_of(model, tokens).data), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufRoundTrip, ::testing::Values("f32", "f16", "bf16"));

TEST(Gguf, Q8_0LoadsClose) {
  auto model = testing::preset_model("tiny", 5);
  const std::string path = temp_path("q8");
  ASSERT_TRUE(write_gguf(*model, path, {.weight_type = GgufType::kQ8_0}).ok());
  auto loaded = load_gguf(path);
  fs::remove(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_NE((*loaded)->fingerprint(), model->fingerprint());
  EXPECT_LT(testing::rel_error((*loaded)->weights().layers[0].wqkv.to_f32(), model->weights().layers[0].wqkv.to_f32()), 1e-2);
  const auto tokens = testing::random_tokens(30, model->config().vocab_size, 2);
  EXPECT_LT(testing::rel_error(logits_of(*loaded, tokens).data, logits_of(model, tokens).data), 0.1);
}

TEST(Gguf, TiedEmbeddingsOmitOutputTensor) {
  auto cfg = *model_preset("tiny");
  cfg.tied_embeddings = true;
  auto model = *Model::synthetic(cfg, 3);
  const std::string path = temp_path("tied");
  ASSERT_TRUE(write_gguf(*model, path).ok());
  const auto bytes = read_all(path);
  fs::remove(path);
  const std::string name = "output.weight";
  const std::string record = std::string("\x0d\0\0\0\0\0\0\0", 8) + name;  // length-prefixed tensor name
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()).find(record), std::string::npos);
  EXPECT_NE(std::string(bytes.begin(), bytes.end()).find("attn_output.weight"), std::string::npos);
  auto loaded = parse(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE((*loaded)->config().tied_embeddings);
  EXPECT_EQ((*loaded)->fingerprint(), model->fingerprint());
}

class GgufVariant : public ::testing::TestWithParam<std::string> {};

// Each architecture variant survives a round trip through a GGUF file written
// with the keys and tensors llama.cpp uses for it: same config (architecture,
// scaling, factors), fingerprint and logits.
TEST_P(GgufVariant, RoundTripsWithLlamaCppKeys) {
  auto model = kvtier::testing::model_variant(GetParam(), 5);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::string path = temp_path("variant-" + GetParam());
  ASSERT_TRUE(write_gguf(**model, path).ok());
  const auto bytes = read_all(path);
  fs::remove(path);
  const std::string text(bytes.begin(), bytes.end());
  const ModelConfig& c = (*model)->config();
  EXPECT_NE(text.find(std::string(arch_name(c.arch)) + ".embedding_length"), std::string::npos);
  EXPECT_EQ(text.find("blk.0.attn_k.bias") != std::string::npos, c.arch == Arch::kQwen2);
  EXPECT_EQ(text.find("rope_freqs.weight") != std::string::npos, GetParam() == "llama3-scaled");
  EXPECT_EQ(text.find(".rope.scaling.type") != std::string::npos, GetParam() == "linear-scaled");
  auto loaded = parse(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)->config(), c);
  EXPECT_EQ((*loaded)->fingerprint(), (*model)->fingerprint());
  const auto tokens = testing::random_tokens(40, c.vocab_size, 1);
  EXPECT_EQ(logits_of(*loaded, tokens).data, logits_of(*model, tokens).data);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufVariant, ::testing::ValuesIn(kvtier::testing::model_variant_names()));

// The fingerprint (the cache namespace) tells the variants apart, so their KV
// is never shared; plain llama fingerprints are what they were before variants.
TEST(Gguf, VariantsHaveDistinctFingerprints) {
  std::vector<PageHash> seen;
  for (const std::string& v : kvtier::testing::model_variant_names()) {
    auto m = kvtier::testing::model_variant(v, 5);
    ASSERT_TRUE(m.ok());
    for (const PageHash& other : seen) EXPECT_NE((*m)->fingerprint(), other) << v;
    seen.push_back((*m)->fingerprint());
  }
  EXPECT_EQ(seen.front(), testing::preset_model("tiny", 5)->fingerprint());
}

class GgufBroken : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::preset_model("tiny", 5);
    const std::string path = temp_path("broken");
    ASSERT_TRUE(write_gguf(*model_, path).ok());
    good_ = read_all(path);
    fs::remove(path);
    ASSERT_TRUE(parse(good_).ok());
  }
  void expect_error(const std::vector<char>& b, StatusCode code, const std::string& words) {
    auto r = parse(b);
    ASSERT_FALSE(r.ok()) << "accepted a broken file (" << words << ")";
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().to_string();
  }
  std::shared_ptr<const Model> model_;
  std::vector<char> good_;
};

TEST_F(GgufBroken, BadMagicAndVersion) {
  auto b = good_;
  b[0] = 'X';
  expect_error(b, StatusCode::kCorruption, "bad magic");
  b = good_;
  b[4] = 2;
  expect_error(b, StatusCode::kUnimplemented, "version 2");
  expect_error({}, StatusCode::kCorruption, "too short");
}

TEST_F(GgufBroken, TruncatedAnywhere) {
  for (size_t cut : {size_t(5), size_t(20), size_t(100), good_.size() / 20, good_.size() / 2, good_.size() - 40}) {
    std::vector<char> b(good_.begin(), good_.begin() + cut);
    auto r = parse(b);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().to_string();
  }
}

TEST_F(GgufBroken, WrongArchitecture) {
  auto b = good_;
  const std::string s(b.begin(), b.end());
  const size_t at = s.find("llama", s.find("general.architecture"));
  ASSERT_NE(at, std::string::npos);
  std::memcpy(&b[at], "mamba", 5);
  expect_error(b, StatusCode::kUnimplemented, "architecture 'mamba'");
}

// A qwen2 file without a layer's bias, and a RoPE scaling type the engine
// does not implement, are refused by name.
TEST_F(GgufBroken, MissingBiasAndUnknownRopeScaling) {
  for (const char* variant : {"qwen2", "linear-scaled"}) {
    const std::string path = temp_path(variant);
    ASSERT_TRUE(write_gguf(**kvtier::testing::model_variant(variant, 5), path).ok());
    auto b = read_all(path);
    fs::remove(path);
    std::string s(b.begin(), b.end());
    if (std::string(variant) == "qwen2") {
      std::memcpy(&b[after_name(b, "blk.1.attn_v.bias") - 4], "bia2", 4);
      expect_error(b, StatusCode::kCorruption, "missing tensor 'blk.1.attn_v.bias'");
    } else {
      const size_t at = s.find("linear", s.find("rope.scaling.type"));
      ASSERT_NE(at, std::string::npos);
      std::memcpy(&b[at], "yarn  ", 6);
      expect_error(b, StatusCode::kUnimplemented, "RoPE scaling type 'yarn");
    }
  }
}

TEST_F(GgufBroken, UnsupportedTensorType) {
  auto b = good_;
  const size_t at = after_name(b, "blk.0.attn_q.weight") + 4 + 16;  // n_dims, ne[2], then the type
  const uint32_t q8k = 15;  // Q8_K: ggml's dot-product intermediate, never a weight type we read
  std::memcpy(&b[at], &q8k, 4);
  expect_error(b, StatusCode::kUnimplemented, "Q8_K");
}

TEST_F(GgufBroken, InconsistentShapeAndOffsets) {
  auto b = good_;
  size_t at = after_name(b, "blk.0.attn_q.weight") + 4;  // ne[0], ne[1] = 64, 64
  const uint64_t ne[2] = {32, 128};                       // same size, wrong shape
  std::memcpy(&b[at], ne, 16);
  expect_error(b, StatusCode::kCorruption, "shape");

  b = good_;
  at = after_name(b, "blk.1.ffn_down.weight") + 4 + 16 + 4;  // the offset
  uint64_t off;
  std::memcpy(&off, &b[at], 8);
  off += 4;
  std::memcpy(&b[at], &off, 8);
  expect_error(b, StatusCode::kCorruption, "aligned");

  b = good_;
  at = after_name(b, "output_norm.weight") + 4 + 8 + 4;  // 1-D: offset after ne[0] and type
  std::memcpy(&off, &b[at], 8);
  off = 0;  // collides with token_embd at offset 0
  std::memcpy(&b[at], &off, 8);
  expect_error(b, StatusCode::kCorruption, "overlap");
}

// A NaN or an infinity inside a tensor's data (found by the tensor's own
// values, so it never lands in padding) refuses the file.
TEST_F(GgufBroken, NonFiniteWeights) {
  const std::vector<float> w = model_->weights().layers.back().w_down.to_f32();
  const char* head = reinterpret_cast<const char*>(w.data());
  const size_t head_bytes = 8 * sizeof(float);
  const auto at = std::search(good_.begin(), good_.end(), head, head + head_bytes);
  ASSERT_NE(at, good_.end()) << "the last layer's w_down is not in the file as F32";
  ASSERT_EQ(std::search(at + 1, good_.end(), head, head + head_bytes), good_.end()) << "ambiguous pattern";
  const size_t element = size_t(at - good_.begin()) + 3 * sizeof(float);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto b = good_;
    std::memcpy(&b[element], &bad, sizeof bad);
    expect_error(b, StatusCode::kCorruption, "NaN or infinite");
  }
}

TEST(Gguf, MissingFileIsAnError) {
  auto r = load_gguf("/nonexistent/kvtier/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::engine
