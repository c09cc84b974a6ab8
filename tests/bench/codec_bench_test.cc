// `kvtier bench codec` on a model small enough for a test: the tiny preset
// with head_dim 32 (the lossy codecs group 32 values of a head), written as
// a GGUF file. Checks the report's shape and its exact figures — sizes from
// the formats, `none` against itself and a full recompute — never wall time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "codec_bench.h"
#include "engine/gguf.h"
#include "engine/model.h"

namespace kvtier::bench {
namespace {

class CodecBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kvtier-codec-bench-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "disk");
    auto cfg = *engine::model_preset("tiny");
    cfg.num_heads = 2;
    cfg.head_dim = 32;
    auto model = engine::Model::synthetic(cfg, 5);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_path_ = (dir_ / "tiny-hd32.gguf").string();
    ASSERT_TRUE(engine::write_gguf(**model, model_path_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  CodecBenchOptions small_run() const {
    CodecBenchOptions o;
    o.model = model_path_;
    o.prefixes = {512, 256};
    o.suffix_tokens = 16;
    o.prompts = 2;
    o.gen_tokens = 8;
    o.rounds = 1;
    o.disk_dir = (dir_ / "disk").string();
    o.threads = 1;
    return o;
  }

  std::filesystem::path dir_;
  std::string model_path_;
};

TEST_F(CodecBenchTest, ReportsEveryCodecWithExactSizesAndNoneEqualToRecompute) {
  auto r = run_codec_bench(small_run(), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->error_prefix_tokens, 256u);  // the shortest prefix
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "disk")) << "the scratch disk tiers must be removed";

  const auto j = nlohmann::json::parse(r->to_json());
  EXPECT_EQ(j["error_prefix_tokens"], 256);
  EXPECT_EQ(j["raw_bytes_per_token"], 512);  // 2 layers x (K, V) x 2 heads x 32 x 2 bytes
  ASSERT_EQ(j["codecs"].size(), 6u);
  const char* names[] = {"none", "f16", "k16v8", "q8", "k8v4", "q4"};
  // The f16 pool (64 bytes per 32 values) against f16 (the same), k16v8 (K 64 + V 34 per 2 x 32), q8 (34),
  // k8v4 (K 34 + V 18 per 2 x 32) and q4 (18).
  const double ratios[] = {1.0, 1.0, 128.0 / 98.0, 64.0 / 34.0, 128.0 / 52.0, 64.0 / 18.0};
  for (size_t c = 0; c < 6; ++c) {
    const auto& row = j["codecs"][c];
    SCOPED_TRACE(names[c]);
    EXPECT_EQ(row["codec"], names[c]);
    EXPECT_DOUBLE_EQ(row["compression_ratio"].get<double>(), ratios[c]);
    for (const char* k : {"encode_gbps", "decode_gbps", "memcpy_gbps", "load_ms_256", "load_ms_512", "ttft_ms_256",
                          "ttft_ms_512", "load_ratio_vs_none_256", "ttft_ratio_vs_none_512", "entry_bytes_per_token",
                          "load_gbps_256"}) {
      ASSERT_TRUE(row.contains(k)) << k;
      EXPECT_GT(row[k].get<double>(), 0.0) << k;
    }
    for (const char* k : {"max_abs_logit_diff", "mean_abs_logit_diff", "kl", "kl_max", "top1_agreement",
                          "greedy_agreement", "greedy_identical_prompts", "greedy_common_prefix_tokens",
                          "greedy_flip_margin_max"})
      ASSERT_TRUE(row.contains(k)) << k;
  }
  const auto& none = j["codecs"][0];
  EXPECT_EQ(none["load_ratio_vs_none_256"], 1.0);
  // Errors are against the `none` hit: zero for itself.
  EXPECT_EQ(none["max_abs_logit_diff"], 0.0);
  EXPECT_EQ(none["kl"], 0.0);
  EXPECT_EQ(none["greedy_agreement"], 1.0);
  EXPECT_EQ(none["greedy_identical_prompts"], 1.0);
  EXPECT_EQ(none["greedy_common_prefix_tokens"], 8.0);
  EXPECT_EQ(none["greedy_flip_margin_max"], 0.0);  // nothing differed
  // On this f16 pool the f16 codec stores the same bits: no error at all.
  const auto& f16 = j["codecs"][1];
  EXPECT_EQ(f16["max_abs_logit_diff"], 0.0);
  EXPECT_EQ(f16["greedy_agreement"], 1.0);
  EXPECT_GT(j["reference_margin_median"].get<double>(), 0.0);
  // The `none` hit is a full recompute up to f32 rounding (the suffix computed in another batch), as in
  // the cache exactness tests: the same greedy tokens, logits within a hair.
  EXPECT_EQ(j["none_vs_recompute_greedy_identical_prompts"], 1.0);
  EXPECT_LE(j["none_vs_recompute_max_abs_logit_diff"].get<double>(), 1e-4);
  EXPECT_LT(j["none_vs_recompute_kl"].get<double>(), 1e-9);
  // Every codec that rounds this pool ran (its logits moved) and stays close.
  for (size_t c = 2; c < 6; ++c) {
    const auto& row = j["codecs"][c];
    SCOPED_TRACE(names[c]);
    EXPECT_GT(row["max_abs_logit_diff"].get<double>(), 0.0);
    EXPECT_GT(row["kl"].get<double>(), 0.0);
    EXPECT_LT(row["kl"].get<double>(), 1e-2);
  }
  EXPECT_GT(r->reference_top1_prob, 0.0);
  EXPECT_NE(r->to_table().find("q4"), std::string::npos);
}

TEST_F(CodecBenchTest, RefusesBadOptionsAndModelsTheCodecsCannotEncode) {
  CodecBenchOptions o = small_run();
  o.prefixes = {300};  // not whole disk chunks
  EXPECT_EQ(run_codec_bench(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o = small_run();
  o.rounds = 0;
  EXPECT_EQ(run_codec_bench(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o = small_run();
  o.model = "tiny";  // head_dim 16
  auto r = run_codec_bench(o, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("head_dim"), std::string::npos) << r.status().to_string();
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "disk"));
}

}  // namespace
}  // namespace kvtier::bench
