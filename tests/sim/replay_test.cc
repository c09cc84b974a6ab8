// kvtier replay: trace formats, malformed lines, namespaces, tiers, timing,
// the exactness of the one-token-per-page replay, sweep outputs, and the
// pinned figures on the shared Mooncake trace. Only ratios and counts are
// asserted, never speed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "sim/mooncake_trace.h"
#include "sim/replay.h"
#include "test_data.h"

namespace kvtier {
namespace {

ReplayOptions opts(uint32_t P = 16) {
  ReplayOptions o = default_replay_options();
  o.model = replay_model_preset("llama-3-8b", DType::kBF16, P).value();
  return o;
}

std::string mc(double ts, uint32_t len, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " + std::to_string(len) +
         ", \"output_length\": 4, \"hash_ids\": [" + ids + "]}\n";
}

TEST(ReplayTrace, ReadsBothFormats) {
  auto m = parse_replay_trace(mc(0, 700, "0, 1") + "\n" + mc(5, 10, "0"), TraceReadOptions{});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->requests.size(), 2u);
  EXPECT_EQ(m->requests[0].input_length, 700u);
  EXPECT_EQ(m->ids(m->requests[0]).size(), 2u);

  TraceReadOptions k;
  k.format = TraceFormat::kKvtier;
  k.block_tokens = 16;
  auto t = parse_replay_trace(
      "{\"timestamp\": 1, \"tokens\": [1, 2, 3], \"cache_salt\": \"a\"}\n"
      "{\"timestamp\": 2, \"hash_ids\": [4, 5]}\n"
      "{\"timestamp\": 3, \"hash_ids\": [4], \"input_length\": 7, \"cache_salt\": \"a\"}\n",
      k);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_TRUE(t->requests[0].has_tokens);
  EXPECT_EQ(t->requests[0].input_length, 3u);
  EXPECT_EQ(t->requests[1].input_length, 32u);  // every block whole when input_length is absent
  EXPECT_EQ(t->requests[2].input_length, 7u);
  EXPECT_EQ(t->requests[0].salt, t->requests[2].salt);
  EXPECT_EQ(t->requests[1].salt, 0u);
  EXPECT_EQ(t->salts.size(), 2u);
}

// A request past 2^24 tokens is refused by its line: a replay holds each request's tokens and
// page hashes, and one hash id of 2^32-1 tokens (--block-tokens) aborted with bad_alloc.
TEST(ReplayTrace, ARequestPastTwoToThe24TokensIsRefused) {
  TraceReadOptions o;
  o.block_tokens = 1u << 25;
  auto t = parse_replay_trace(mc(0, 10, "0") + mc(0, (1u << 24) + 1, "0"), o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find("2^24"), std::string::npos) << t.status().to_string();
  EXPECT_TRUE(parse_replay_trace(mc(0, 1u << 24, "0"), o).ok());
}

// A block larger than its prompt expands the prompt's tokens only: one hash id of 2^31 tokens
// (--block-tokens) before a 100-token prompt allocated the whole block (8 GiB).
TEST(ReplayTrace, APromptShorterThanItsBlockExpandsItsOwnTokensOnly) {
  TraceReadOptions o;
  o.block_tokens = 1u << 31;
  auto t = parse_replay_trace(mc(0, 100, "7"), o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<TokenId> tokens;
  ASSERT_TRUE(expand_request(*t, t->requests[0], tokens).ok());
  ASSERT_EQ(tokens.size(), 100u);
  std::vector<TokenId> block(100);
  expand_block(7, block);
  EXPECT_EQ(tokens, block);
  EXPECT_LE(tokens.capacity(), 1024u);
}

TEST(ReplayTrace, MalformedLinesNameTheirLineOrAreSkipped) {
  const std::string good = mc(0, 10, "0");
  const std::string bad_mooncake[] = {"not json\n", "[1]\n", "{\"timestamp\": 0}\n", mc(0, 1025, "0, 1"),
                                      "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, "
                                      "\"hash_ids\": [0]}\n",
                                      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                                      "\"hash_ids\": [\"x\"]}\n"};
  for (const std::string& bad : bad_mooncake) {
    const std::string text = good + "\n" + bad + good;
    auto t = parse_replay_trace(text, TraceReadOptions{});
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status().to_string();
    TraceReadOptions skip;
    skip.skip_bad_lines = true;
    auto s = parse_replay_trace(text, skip);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->requests.size(), 2u);
    EXPECT_EQ(s->skipped_lines, 1u);
    EXPECT_NE(s->first_skipped.find("line 3"), std::string::npos);
  }
  TraceReadOptions k;
  k.format = TraceFormat::kKvtier;
  const char* bad_kvtier[] = {
      "{\"timestamp\": 0, \"tokens\": [1], \"hash_ids\": [1]}\n",  // both
      "{\"timestamp\": 0}\n",                                       // neither
      "{\"timestamp\": 0, \"tokens\": [-1]}\n",
      "{\"timestamp\": 0, \"tokens\": [1, 2], \"input_length\": 3}\n",
      "{\"timestamp\": 0, \"tokens\": [1], \"cache_salt\": 5}\n",
  };
  for (const char* bad : bad_kvtier) {
    auto t = parse_replay_trace(std::string("{\"timestamp\": 0, \"tokens\": [1]}\n") + bad, k);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().to_string();
  }
  EXPECT_EQ(read_replay_trace("/nonexistent/trace.jsonl", TraceReadOptions{}).status().code(),
            StatusCode::kNotFound);
}

TEST(Replay, CacheSaltsNeverShareCache) {
  TraceReadOptions k;
  k.format = TraceFormat::kKvtier;
  std::string toks;
  for (int i = 0; i < 64; ++i) {
    if (i) toks += ", ";
    toks += std::to_string(i + 7);
  }
  const std::string a = "{\"timestamp\": 0, \"tokens\": [" + toks + "], \"cache_salt\": \"alice\"}\n";
  const std::string b = "{\"timestamp\": 1, \"tokens\": [" + toks + "], \"cache_salt\": \"bob\"}\n";
  const std::string n = "{\"timestamp\": 2, \"tokens\": [" + toks + "]}\n";
  auto t = parse_replay_trace(a + b + n + a, k);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto r = run_replay(opts(), *t);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->compressed);
  // Only the fourth request (alice again) hits: 63 tokens before the last one, 3 whole pages.
  EXPECT_EQ(r->hit_tokens, 48u);
  EXPECT_EQ(r->max_token_hit_ratio, r->token_hit_ratio);
}

// A hash-id trace and the same trace spelled out as tokens replay identically
// (the one-token-per-page replay is exact), across tiers and policies.
TEST(Replay, OneTokenPerPageIsExact) {
  std::string mooncake, kvtier;
  std::vector<TokenId> blk(64);
  uint32_t seed = 7;
  auto rnd = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 8); };
  for (int i = 0; i < 300; ++i) {
    const uint32_t nblocks = 1 + rnd() % 8, len = (nblocks - 1) * 64 + 1 + rnd() % 64;
    std::string ids, toks;
    std::vector<TokenId> prompt;
    for (uint32_t b = 0; b < nblocks; ++b) {
      const uint64_t id = b < 3 ? (i % 5) * 10 + b : 1000 + rnd() % 40 * 8 + b;  // shared prefixes
      if (b) ids += ", ";
      ids += std::to_string(id);
      expand_block(id, blk);
      prompt.insert(prompt.end(), blk.begin(), blk.end());
    }
    prompt.resize(len);
    for (size_t j = 0; j < prompt.size(); ++j) {
      if (j) toks += ",";
      toks += std::to_string(prompt[j]);
    }
    mooncake += mc(i * 3.0, len, ids);
    kvtier += "{\"timestamp\": " + std::to_string(i * 3.0) + ", \"tokens\": [" + toks + "]}\n";
  }
  TraceReadOptions mo;
  mo.block_tokens = 64;
  TraceReadOptions ko = mo;
  ko.format = TraceFormat::kKvtier;
  auto a = parse_replay_trace(mooncake, mo);
  auto b = parse_replay_trace(kvtier, ko);
  ASSERT_TRUE(a.ok() && b.ok());
  for (WritePolicy wp : {WritePolicy::kWriteThrough, WritePolicy::kSelective}) {
    for (EvictionPolicyKind ev : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kSlru}) {
      ReplayOptions o = opts();
      o.device = Capacity::tokens(2000);
      o.host = Capacity::tokens(6000);
      o.disk = Capacity::tokens(8192);
      o.remote = Capacity::tokens(16384);
      o.write_policy = wp;
      o.eviction = ev;
      auto ra = run_replay(o, *a);
      auto rb = run_replay(o, *b);
      ASSERT_TRUE(ra.ok() && rb.ok());
      EXPECT_TRUE(ra->compressed);
      EXPECT_FALSE(rb->compressed);
      EXPECT_GT(ra->hit_tokens, 0u);
      EXPECT_EQ(ra->hit_tokens, rb->hit_tokens);
      EXPECT_EQ(ra->hit_tokens_by_tier, rb->hit_tokens_by_tier);
      EXPECT_EQ(ra->evictions, rb->evictions);
      EXPECT_EQ(ra->bytes_stored, rb->bytes_stored);
      EXPECT_DOUBLE_EQ(ra->ttft_cached_s.mean, rb->ttft_cached_s.mean);
      EXPECT_DOUBLE_EQ(ra->max_token_hit_ratio, rb->max_token_hit_ratio);
    }
  }
}

TEST(Replay, LowerTiersCatchWhatTheDeviceDrops) {
  std::string text;
  for (int round = 0; round < 3; ++round)
    for (int c = 0; c < 20; ++c) {
      std::string ids;
      for (int b = 0; b < 8; ++b) {
        if (b) ids += ", ";
        ids += std::to_string(c * 100 + b);
      }
      text += mc(round * 1000.0 + c, 8 * 512, ids);
    }
  auto t = parse_replay_trace(text, TraceReadOptions{});
  ASSERT_TRUE(t.ok());
  ReplayOptions o = opts();
  o.device = Capacity::tokens(3 * 4096);
  auto dev_only = run_replay(o, *t);
  ASSERT_TRUE(dev_only.ok());
  EXPECT_EQ(dev_only->hit_tokens, 0u);  // 20 cycling prompts never fit in 3 prompts' worth of LRU
  EXPECT_NEAR(dev_only->max_token_hit_ratio, 2.0 / 3 * 4095.0 / 4096 * (4096 - 16) / 4096 * 4096 / 4080, 0.01);

  o.host = Capacity::of_bytes(uint64_t(30 * 4096) * o.model.geometry.bytes_per_token());
  auto host = run_replay(o, *t);
  ASSERT_TRUE(host.ok());
  EXPECT_NEAR(host->token_hit_ratio, host->max_token_hit_ratio, 1e-9);
  EXPECT_GT(host->hit_ratio_by_tier[1], 0.6);
  EXPECT_GT(host->bytes_loaded[1], 0u);
  EXPECT_GT(host->bytes_stored[1], 0u);
  EXPECT_GT(host->evictions[0], 0u);
  EXPECT_LT(host->ttft_cached_s.mean, host->ttft_uncached_s.mean);
  EXPECT_GT(host->prefill_compute_saved, 0.5);

  o.host = Capacity{};
  o.disk = Capacity::tokens(30 * 4096);
  o.disk_region_bytes = size_t(256) << 20;  // seven 32 MiB chunk entries a region (a 64 MiB region holds one)
  auto disk = run_replay(o, *t);
  ASSERT_TRUE(disk.ok());
  EXPECT_GT(disk->hit_ratio_by_tier[2], 0.6);
  EXPECT_GT(disk->bytes_stored[2], 0u);
  {  // A region too small for one chunk entry says which region would do, and that one does.
    ReplayOptions small_region = o;
    small_region.disk_region_bytes = size_t(16) << 20;
    auto refused = run_replay(small_region, *t);
    ASSERT_FALSE(refused.ok());
    const std::string& why = refused.status().message();
    const std::string ask = "give --disk-region (cache.disk_region) at least ";
    ASSERT_NE(why.find(ask), std::string::npos) << why;
    const size_t mib = std::stoul(why.substr(why.find(ask) + ask.size()));
    small_region.disk_region_bytes = mib << 20;
    EXPECT_TRUE(run_replay(small_region, *t).ok()) << mib << " MiB";
    small_region.disk_region_bytes = (mib - 1) << 20;
    EXPECT_FALSE(run_replay(small_region, *t).ok()) << mib - 1 << " MiB";
  }

  o.disk = Capacity::tokens(5 * 4096);  // too small: FIFO reclaims before the next round
  auto small = run_replay(o, *t);
  ASSERT_TRUE(small.ok());
  EXPECT_GT(small->evictions[2], 0u);
  EXPECT_EQ(small->hit_ratio_by_tier[2], 0.0);

  // Write-back, as KVCache: nothing is copied down at commit; device
  // evictions demote to the host, host evictions spill whole chunks to disk.
  o.disk = Capacity{};
  o.host = Capacity::tokens(30 * 4096);
  o.write_policy = WritePolicy::kWriteBack;
  auto wb = run_replay(o, *t);
  ASSERT_TRUE(wb.ok());
  EXPECT_GT(wb->hit_ratio_by_tier[1], 0.6);
  EXPECT_GT(wb->bytes_stored[1], 0u);

  o.host = Capacity::tokens(2 * 4096);
  o.disk = Capacity::tokens(30 * 4096);
  auto wb_disk = run_replay(o, *t);
  ASSERT_TRUE(wb_disk.ok());
  EXPECT_GT(wb_disk->bytes_stored[2], 0u);
  EXPECT_GT(wb_disk->hit_ratio_by_tier[2], 0.5);
}

// A tier given more than the trace can fill is sized by the trace's distinct pages: a trace of
// 50 repeats of 2 prompts sized it by every repeat (memory in proportion to the trace's length).
// Capacities in tokens past 2^64 bytes saturate (they wrapped to a cache of a few pages).
TEST(Replay, TiersLargerThanTheTraceHoldItsDistinctPages) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += mc(i, 4096, i % 2 ? "1, 2, 3, 4, 5, 6, 7, 8" : "9, 10, 11, 12, 13, 14, 15, 16");
  auto t = parse_replay_trace(text, TraceReadOptions{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ReplayOptions o = opts();
  o.timing = false;
  o.device = Capacity::tokens(1'000'000'000);
  auto r = run_replay(o, *t);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->capacity_pages[0], 2 * 4096 / 16 + 3);
  EXPECT_EQ(r->evictions[0], 0u);
  EXPECT_NEAR(r->token_hit_ratio, r->max_token_hit_ratio, 1e-9);
  EXPECT_GT(r->token_hit_ratio, 0.9);
  o.device = Capacity::tokens(UINT64_MAX / 4);
  auto huge = run_replay(o, *t);
  ASSERT_TRUE(huge.ok()) << huge.status().to_string();
  EXPECT_EQ(huge->capacity_pages[0], r->capacity_pages[0]);
  EXPECT_EQ(huge->evictions[0], 0u);
  // The same prompts under two salts are pages of two namespaces.
  TraceReadOptions k;
  k.format = TraceFormat::kKvtier;
  k.block_tokens = 512;
  std::string salted;
  for (int i = 0; i < 20; ++i)
    salted += "{\"timestamp\": " + std::to_string(i) + ", \"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 8], \"cache_salt\": \"" +
              (i % 2 ? "a" : "b") + "\"}\n";
  auto st = parse_replay_trace(salted, k);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  auto s = run_replay(o, *st);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->capacity_pages[0], 2 * 4096 / 16 + 3);
  EXPECT_EQ(s->evictions[0], 0u);
}

TEST(Replay, CapacitiesParseAndValidate) {
  EXPECT_EQ(parse_capacity("3e6")->value, 3000000u);
  EXPECT_FALSE(parse_capacity("3e6")->bytes);
  EXPECT_EQ(parse_capacity("2000tok")->value, 2000u);
  EXPECT_EQ(parse_capacity("80GiB")->value, 80ull << 30);
  EXPECT_TRUE(parse_capacity("1.5TB")->bytes);
  EXPECT_EQ(parse_capacity("1.5TB")->value, 1500000000000ull);
  EXPECT_TRUE(parse_capacity("unlimited")->unlimited);
  EXPECT_FALSE(parse_capacity("lots").ok());
  EXPECT_FALSE(parse_capacity("-5").ok());
  EXPECT_FALSE(parse_capacity("5 furlongs").ok());
  auto l = parse_capacity_list("1e5, 3e5,1e6");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<uint64_t>{100000, 300000, 1000000}));
  EXPECT_FALSE(parse_capacity_list("1e5,,3").ok());
  EXPECT_FALSE(parse_capacity_list("0").ok());
  ReplayOptions o = opts();
  o.device = Capacity::tokens(0);
  EXPECT_FALSE(o.validate().ok());
  o = opts();
  o.disk = Capacity::infinite();
  EXPECT_FALSE(o.validate().ok());
  o = opts();
  o.workers = 0;
  EXPECT_FALSE(o.validate().ok());
}

TEST(TimingModel, PresetsAndQueue) {
  auto m8 = replay_model_preset("llama-3-8b", DType::kBF16, 16);
  ASSERT_TRUE(m8.ok());
  EXPECT_EQ(m8->geometry.num_layers, 32u);
  EXPECT_EQ(m8->geometry.bytes_per_token(), 131072u);  // 32 layers x 2 x 8 heads x 128 x 2 bytes
  EXPECT_NEAR(m8->params, 8.0e9, 0.1e9);
  auto m70 = replay_model_preset("llama-3-70b", DType::kBF16, 16);
  ASSERT_TRUE(m70.ok());
  EXPECT_EQ(m70->geometry.num_layers, 80u);
  EXPECT_NEAR(m70->params, 70.6e9, 0.5e9);
  EXPECT_TRUE(replay_model_preset("tiny", DType::kF32, 16).ok());
  EXPECT_FALSE(replay_model_preset("gpt-5", DType::kF32, 16).ok());
  EXPECT_TRUE(hardware_preset("h100-pcie5").ok());
  EXPECT_TRUE(hardware_preset("a100-pcie4").ok());
  EXPECT_FALSE(hardware_preset("tpu").ok());
  auto c = custom_replay_model(KVGeometry{4, 2, 64, DType::kF16, 16}, 1e9);
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->cost.attn_flops_per_pair, 0);

  // Two workers, three requests arriving together: the third waits for the first.
  const std::vector<double> arrive = {0, 0, 0, 10}, service = {2, 3, 1, 1};
  const auto ttft = simulate_prefill_queue(arrive, service, 2);
  EXPECT_EQ(ttft, (std::vector<double>{2, 3, 3, 1}));
  // More workers than requests: as many as the requests (4e9 were a heap of 4e9 entries).
  EXPECT_EQ(simulate_prefill_queue(arrive, service, 4'000'000'000u), (std::vector<double>{2, 3, 1, 1}));
  const LatencySummary s = summarize_latency({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2);
  EXPECT_DOUBLE_EQ(s.p99, 4);
}

class ReplayOnSharedTrace : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = read_replay_trace(testdata::mooncake_trace_path(), TraceReadOptions{});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    trace_ = new ReplayTrace(std::move(t).value());
  }
  static void TearDownTestSuite() {
    delete trace_;
    trace_ = nullptr;
  }
  static ReplayTrace* trace_;
};
ReplayTrace* ReplayOnSharedTrace::trace_ = nullptr;

TEST_F(ReplayOnSharedTrace, PinnedHitRatios) {
  ASSERT_NE(trace_, nullptr);
  ReplayOptions o = opts();
  o.device = Capacity::tokens(3000000);
  auto r = run_replay(o, *trace_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->requests, 3993u);
  EXPECT_NEAR(r->max_token_hit_ratio, 0.651, 0.005);
  EXPECT_GE(r->token_hit_ratio, 0.30);
  EXPECT_LE(r->token_hit_ratio, 0.34);
  EXPECT_LT(r->ttft_cached_s.mean, r->ttft_uncached_s.mean);
  EXPECT_GT(r->prefill_compute_saved, 0.2);
  // The JSON report carries the documented fields.
  const std::string j = format_replay_json(*r);
  for (const char* key : {"\"requests\"", "\"tokens\"", "\"token_hit_ratio\"", "\"max_token_hit_ratio\"",
                          "\"hit_ratio_by_tier\"", "\"ttft_ms\"", "\"with_cache\"", "\"without_cache\"", "\"p99\"",
                          "\"elapsed_s\"", "\"bytes_moved\"", "\"evictions\""})
    EXPECT_NE(j.find(key), std::string::npos) << key;
}

// Codecs at equal tier bytes (issue 22): a q8 disk holds 1.88x the chunks
// of a bf16 one in the same bytes (more, here: 15 entries fill a 256 MiB
// region where 7 raw ones do), moves fewer bytes per hit, and hits about as
// often as twice those bytes raw.
TEST_F(ReplayOnSharedTrace, DiskCodecsHoldMoreInTheSameBytes) {
  ASSERT_NE(trace_, nullptr);
  auto run = [&](uint64_t disk_bytes, KvCodec codec) {
    ReplayOptions o = opts();
    o.device = Capacity::tokens(200000);
    o.disk = Capacity::of_bytes(disk_bytes);
    o.disk_codec = codec;
    o.disk_region_bytes = size_t(256) << 20;
    o.max_pass = false;
    o.timing = false;
    auto r = run_replay(o, *trace_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : ReplayReport{};
  };
  const uint64_t bytes = uint64_t(100) << 30;  // 700 k raw tokens of Llama-3-8B: the disk is what limits
  const ReplayReport raw = run(bytes, KvCodec::kNone), q8 = run(bytes, KvCodec::kQ8), q4 = run(bytes, KvCodec::kQ4),
                     raw2 = run(2 * bytes, KvCodec::kNone);
  EXPECT_GT(double(q8.capacity_pages[2]), 1.8 * double(raw.capacity_pages[2]));
  EXPECT_GT(double(q4.capacity_pages[2]), 3.3 * double(raw.capacity_pages[2]));
  EXPECT_GT(q8.hit_ratio_by_tier[2], raw.hit_ratio_by_tier[2]);
  EXPECT_NEAR(q8.hit_ratio_by_tier[2], raw2.hit_ratio_by_tier[2], 0.03);
  EXPECT_GE(q4.hit_ratio_by_tier[2], q8.hit_ratio_by_tier[2]);
  // Bytes over the disk link per disk-hit token: about 1/1.88 of raw.
  const double raw_per = double(raw.bytes_loaded[2]) / double(raw.hit_tokens_by_tier[2]);
  const double q8_per = double(q8.bytes_loaded[2]) / double(q8.hit_tokens_by_tier[2]);
  EXPECT_NEAR(q8_per / raw_per, 34.0 / 64.0, 0.02);
  EXPECT_NE(format_replay_json(q8).find("\"disk\":\"q8\""), std::string::npos);
}

TEST_F(ReplayOnSharedTrace, SweepWritesCsvAndSvg) {
  ASSERT_NE(trace_, nullptr);
  ReplayOptions o = opts();
  o.timing = false;
  const std::vector<uint64_t> caps = {300000, 1000000, 3000000, 10000000};
  auto pts = run_capacity_sweep(o, *trace_, caps);
  ASSERT_TRUE(pts.ok()) << pts.status().to_string();
  ASSERT_EQ(pts->size(), caps.size());
  for (size_t i = 1; i < pts->size(); ++i)
    EXPECT_GE((*pts)[i].report.token_hit_ratio, (*pts)[i - 1].report.token_hit_ratio);  // more cache, more hits
  EXPECT_NEAR((*pts)[0].report.max_token_hit_ratio, 0.651, 0.005);

  const std::string csv = format_sweep_csv(*pts);
  std::vector<std::string> rows;
  for (size_t pos = 0; pos < csv.size();) {
    const size_t end = csv.find('\n', pos);
    rows.push_back(csv.substr(pos, end - pos));
    pos = end + 1;
  }
  ASSERT_EQ(rows.size(), caps.size() + 1);
  EXPECT_EQ(rows[0].rfind("capacity_tokens,token_hit_ratio,", 0), 0u);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(std::count(rows[i].begin(), rows[i].end(), ','), std::count(rows[0].begin(), rows[0].end(), ','));
    EXPECT_EQ(std::stoull(rows[i]), caps[i - 1]);
  }

  const std::string svg = format_sweep_svg(*pts, "hit ratio <test>");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  // XML-ish: every element is closed, in order.
  std::vector<std::string> stack;
  const std::regex tag(R"(<(/?)([a-zA-Z]+)[^>]*?(/?)>)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    if (m[3] == "/") continue;  // self-closing
    if (m[1] == "/") {
      ASSERT_FALSE(stack.empty()) << m[0];
      EXPECT_EQ(stack.back(), m[2].str());
      stack.pop_back();
    } else {
      stack.push_back(m[2]);
    }
  }
  EXPECT_TRUE(stack.empty());
  size_t points = 0;
  for (size_t pos = 0; (pos = svg.find("class=\"point\"", pos)) != std::string::npos; ++pos) ++points;
  EXPECT_EQ(points, caps.size());
  EXPECT_NE(svg.find("log scale"), std::string::npos);
  EXPECT_NE(svg.find("token hit ratio"), std::string::npos);
  EXPECT_NE(svg.find("&lt;test&gt;"), std::string::npos);
  const std::regex poly("points=\"([^\"]*)\"");
  std::smatch pm;
  ASSERT_TRUE(std::regex_search(svg, pm, poly));
  const std::string coords = pm[1];
  EXPECT_EQ(size_t(std::count(coords.begin(), coords.end(), ',')), caps.size());
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// A 4096-token prompt of its own hash ids, with optional hints.
std::string hinted(double ts, int id, const std::string& hints = "") {
  std::string ids;
  for (int b = 0; b < 8; ++b) ids += (b ? ", " : "") + std::to_string(id * 100 + b);
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": 4096, \"output_length\": 4, \"hash_ids\": [" +
         ids + "]" + hints + "}\n";
}

// 20 other prompts, enough to push any unhinted prompt out of device and host.
std::string pressure(double ts0) {
  std::string text;
  for (int c = 1; c <= 20; ++c) text += hinted(ts0 + c, c);
  return text;
}

TEST(ReplayHints, RetainedPrefixSurvivesPressureUntilItExpires) {
  ReplayOptions o = opts();
  o.device = Capacity::tokens(3 * 4096);
  o.host = Capacity::tokens(8 * 4096);
  for (bool hint : {false, true}) {
    const std::string text = hinted(0, 0, hint ? ", \"retain_s\": 600" : "") + pressure(1) + hinted(30, 0) +
                             pressure(700000) + hinted(700030, 0);
    auto t = parse_replay_trace(text, TraceReadOptions{});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto r = run_replay(o, *t);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // Only A's return at 30 s can hit (4080 tokens: whole pages before its last token), and only when retained;
    // by 700 s the hint has run out and pressure takes A as any other prompt.
    EXPECT_EQ(r->hit_tokens, hint ? 4080u : 0u) << "hint " << hint;
    EXPECT_EQ(r->retain_hints, hint ? 1u : 0u);
    EXPECT_EQ(r->retain_expiries, hint ? 1u : 0u);
  }
}

// Without a host tier the hint holds the disk regions of the prefix's whole chunks back from reclaim.
TEST(ReplayHints, RetainedChunksSurviveDiskReclaim) {
  ReplayOptions o = opts();
  o.device = Capacity::tokens(3 * 4096);
  o.disk = Capacity::tokens(8 * 4096);
  o.disk_region_bytes = size_t(256) << 20;  // seven 32 MiB chunk entries a region
  for (bool hint : {false, true}) {
    const std::string text = hinted(0, 0, hint ? ", \"retain_s\": 600" : "") + pressure(1) + hinted(30, 0);
    auto t = parse_replay_trace(text, TraceReadOptions{});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto r = run_replay(o, *t);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // The retained chunks: the whole chunks before the prompt's last token (15 of 16 chunks of 256 tokens)
    // and the tail after them (15 pages of 16 tokens).
    EXPECT_EQ(r->hit_tokens_by_tier[int(TierKind::kDisk)], hint ? 15u * 256 + 15 * 16 : 0u) << "hint " << hint;
    EXPECT_GT(r->evictions[int(TierKind::kDisk)], 0u);
  }
}

TEST(ReplayHints, PrefetchMovesADiskHitToTheHost) {
  ReplayOptions o = opts();
  o.device = Capacity::tokens(3 * 4096);
  o.host = Capacity::tokens(2 * 4096);
  o.disk = Capacity::tokens(64 * 4096);
  o.disk_region_bytes = size_t(256) << 20;
  uint64_t hits[2] = {};
  for (bool hint : {false, true}) {
    const std::string text = hinted(0, 0) + pressure(1) + hinted(30, 0, hint ? ", \"prefetch_at\": 25" : "");
    auto t = parse_replay_trace(text, TraceReadOptions{});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto r = run_replay(o, *t);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // A's whole chunks come back either way: from the disk, or read ahead into the host before it arrives.
    hits[hint] = r->hit_tokens;
    EXPECT_EQ(r->hit_tokens_by_tier[int(TierKind::kHost)], hint ? r->hit_tokens : 0u);
    EXPECT_EQ(r->hit_tokens_by_tier[int(TierKind::kDisk)], hint ? 0u : r->hit_tokens);
    EXPECT_EQ(r->prefetched_pages, hint ? r->hit_tokens / 16 : 0u);
  }
  EXPECT_GT(hits[0], 0u);
  EXPECT_EQ(hits[0], hits[1]);
}

TEST(ReplayHints, BadHintsNameTheirLine) {
  for (const std::string& hints : {std::string(", \"retain_s\": 90000"), std::string(", \"retain_s\": -1"),
                                   std::string(", \"prefetch_at\": 50"), std::string(", \"prefetch_at\": \"soon\"")}) {
    auto t = parse_replay_trace(hinted(0, 0) + hinted(10, 1, hints), TraceReadOptions{});
    ASSERT_FALSE(t.ok()) << hints;
    EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().to_string();
  }
}

}  // namespace
}  // namespace kvtier
