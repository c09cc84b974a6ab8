#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/calibration.h"
#include "runtime/runtime.h"
#include "test_data.h"

namespace kvtier {
namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() : path(std::filesystem::temp_directory_path() / ("kvtier-rt-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

RuntimeOptions tiny(const std::string& dir, bool cache = true) {
  RuntimeOptions o;
  o.model = "tiny";
  o.device_bytes = size_t(4) << 20;
  o.host_bytes = size_t(4) << 20;
  o.disk_dir = dir;
  o.disk_bytes = size_t(256) << 20;
  o.cache_enabled = cache;
  o.max_sequences = 4;
  return o;
}

std::vector<TokenId> generate(Runtime& rt, std::span<const TokenId> prompt, int n, PrefillReport* rep = nullptr,
                              std::string_view salt = {}) {
  auto s = rt.start(prompt, {}, salt);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  if (rep) *rep = s->report;
  std::vector<TokenId> out{s->first_token};
  for (int i = 1; i < n; ++i) {
    auto d = rt.decode(std::span(&s->seq, 1));
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    out.push_back((*d)[0]);
  }
  rt.finish(s->seq);
  return out;
}

// On a server that blends, a request with segments that asks every position's logprobs (or a
// server without its cache) is computed whole: its report says so (it said `disabled`).
TEST(Runtime, ABlendRequestComputedInFullSaysSo) {
  TempDir dir;
  for (const bool cache : {true, false}) {
    RuntimeOptions o = tiny(dir.path.string(), cache);
    o.blend.enabled = true;
    auto rt = Runtime::create(o);
    ASSERT_TRUE(rt.ok()) << rt.status().to_string();
    PromptRequest r;
    for (uint32_t i = 0; i < 80; ++i) r.prompt.push_back(TokenId(1 + i * 7 % 300));
    r.segments = {{16, 48}};
    for (const bool logprobs : {true, false}) {
      r.sampling.prompt_logprobs = logprobs;
      auto s = (*rt)->start(r);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      EXPECT_EQ(s->report.blend.decision == BlendDecision::kInFull, logprobs || !cache)
          << cache << logprobs << blend_decision_name(s->report.blend.decision);
      (*rt)->finish(s->seq);
    }
  }
}

// Start-up calibration writes its scratch chunks within a quarter of the disk tier's capacity
// (smaller chunks where whole ones would not fit: it wrote 33 MiB beside an 8 MiB tier, and
// failed on a filesystem that held the tier) and leaves nothing behind.
TEST(Runtime, CalibrationScratchStaysWithinTheDiskCapacity) {
  const KVGeometry g{.num_layers = 4, .num_kv_heads = 4, .head_dim = 64, .dtype = DType::kF32, .page_tokens = 16};
  for (const size_t capacity : {size_t(8) << 20, size_t(64) << 20, size_t(1) << 30}) {
    CalibrationOptions o;
    o.disk_dir = "/unused";
    o.disk_capacity_bytes = capacity;
    size_t chunks = 0;
    const DiskTierOptions d = calibration_scratch(g, o, chunks);
    const size_t written = chunks * (d.geometry.max_payload_bytes() + 4096);
    EXPECT_LE(written, std::max(capacity / 4, 8 * (d.geometry.max_payload_bytes() + 4096))) << capacity;
    EXPECT_GE(chunks, 8u);
    EXPECT_TRUE(d.validate().ok()) << d.validate().to_string();
  }
  size_t chunks = 0;
  CalibrationOptions small;
  small.disk_dir = "/unused";
  small.disk_capacity_bytes = size_t(8) << 20;
  EXPECT_LT(calibration_scratch(g, small, chunks).geometry.chunk_pages, 16u);
  TempDir dir;
  auto rt = Runtime::create(tiny(dir.path.string()));
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  EXPECT_TRUE(std::filesystem::exists(dir.path));
  EXPECT_FALSE(std::filesystem::exists(dir.path / ".calibration"));
}

// A disk calibration cannot measure (its scratch files cannot be made: a full or read-only disk)
// gets the assumed figures, and the profile's source says why: the server failed to start.
TEST(Runtime, ADiskThatCannotBeMeasuredIsPricedWithTheAssumedFigures) {
  RuntimeOptions o = tiny("");
  o.profile_path.clear();
  auto stack = build_stack(o);
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  CalibrationOptions cal;
  cal.disk_dir = "/proc/self/kvtier-cannot-be-made";  // no directory can be made there, root or not
  auto p = calibrate(*stack->engine, stack->cache->pool(), cal);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->link(TierKind::kDisk).bytes_per_s, kAssumedDiskLink.bytes_per_s);
  EXPECT_EQ(p->link(TierKind::kDisk).latency_s, kAssumedDiskLink.latency_s);
  EXPECT_NE(p->source.find("disk not measured"), std::string::npos) << p->source;
}

TEST(Runtime, SecondRequestHitsTheCacheWithTheSameOutput) {
  TempDir dir;
  auto rt = Runtime::create(tiny(dir.path.string()));
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  auto prompt = (*rt)->model().text.tokenize(std::string(400, 'a') + " the same long system prompt, then a question?", {.add_bos = true});
  PrefillReport r1, r2, r3;
  auto a = generate(**rt, prompt, 16, &r1);
  auto b = generate(**rt, prompt, 16, &r2);
  EXPECT_EQ(r1.cached_tokens, 0u);
  EXPECT_GT(r2.cached_tokens, 400u);
  EXPECT_EQ(a, b);
  // Another tenant's salt shares nothing.
  auto c = generate(**rt, prompt, 16, &r3, "tenant-b");
  EXPECT_EQ(r3.cached_tokens, 0u);
  EXPECT_EQ(a, c);
  const RuntimeStats stats = (*rt)->stats();
  EXPECT_EQ(stats.counters.requests, 3u);
  EXPECT_EQ(stats.counters.cached_tokens, r2.cached_tokens);
}

// A lossy disk codec: a disk hit is labelled in the request's report and
// counted in /metrics; a model whose heads the codec cannot group is refused
// at start with the reason.
TEST(Runtime, LossyDiskHitsAreLabelledAndCounted) {
  TempDir dir;
  RuntimeOptions o = tiny(dir.path.string());
  o.disk_codec = KvCodec::kQ8;
  auto refused = Runtime::create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("head_dim"), std::string::npos) << refused.status().to_string();

  o.model = "small";  // head_dim 64
  o.device_bytes = o.host_bytes = size_t(32) << 20;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  auto prompt = (*rt)->model().text.tokenize(std::string(700, 'b') + " a long prompt served from a q8 disk tier", {.add_bos = true});
  PrefillReport first, hit;
  generate(**rt, prompt, 2, &first);
  ASSERT_TRUE((*rt)->flush().ok());  // device and host dropped: the prefix is on disk only
  generate(**rt, prompt, 2, &hit);
  EXPECT_EQ(first.lossy_cached_tokens, 0u);
  EXPECT_GT(hit.cached_tokens_by_tier[static_cast<size_t>(TierKind::kDisk)], 0u);
  EXPECT_EQ(hit.lossy_cached_tokens, hit.cached_tokens);
  EXPECT_EQ((*rt)->stats().cache.lossy_tokens, hit.lossy_cached_tokens);
}

// The `small` preset (head_dim 64, which q8 groups) with a q8 disk tier under `dir`.
RuntimeOptions small_on_a_q8_disk(const std::string& dir) {
  RuntimeOptions o = tiny(dir);
  o.disk_codec = KvCodec::kQ8;
  o.model = "small";
  o.device_bytes = size_t(32) << 20;
  return o;
}

// A sequence whose prefix came from a lossy disk entry keeps its label through preemption: its KV
// was copied raw into a fresh lease, which carries no lossy marks, so at finish its pages went into
// the index as exact (and down to exact-only tiers). A lossy sequence is preempted by recompute.
TEST(Runtime, APreemptedLossySequenceStaysLabelled) {
  TempDir dir;
  RuntimeOptions o = small_on_a_q8_disk(dir.path.string());
  o.host_bytes = size_t(256) << 20;  // a quarter of it would hold the sequence raw
  auto made = Runtime::create(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Runtime& rt = **made;
  auto prompt = rt.model().text.tokenize(std::string(700, 'b') + " a long prompt served from a q8 disk tier", {.add_bos = true});
  generate(rt, prompt, 2);
  ASSERT_TRUE(rt.flush().ok());  // the prefix is on disk only
  auto s = rt.start(prompt, {});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_GT(s->report.lossy_cached_tokens, 0u);
  std::vector<TokenId> all(prompt.begin(), prompt.end());
  all.push_back(s->first_token);
  for (int i = 0; i < 20; ++i) {
    if (i == 10) {
      auto raw = rt.preempt(s->seq);
      ASSERT_TRUE(raw.ok()) << raw.status().to_string();
      EXPECT_FALSE(*raw);  // recomputed at resume, where its lookup labels it again
      ASSERT_TRUE(rt.resume(s->seq).ok());
    }
    auto d = rt.decode(std::span(&s->seq, 1));
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    all.push_back((*d)[0]);
  }
  rt.finish(s->seq);
  // The whole sequence again, in place on the device: its KV is still labelled approximate.
  auto again = rt.start(std::span(all).first(all.size() - 1), {});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_GT(again->report.cached_tokens, prompt.size());
  EXPECT_GT(again->report.lossy_cached_tokens, 0u);
  rt.finish(again->seq);
}

// A sequence computed exactly, preempted (recomputed at resume, no raw copy) after its exact KV went
// down to a lossy disk tier, comes back from those lossy entries: the resume says so, as does the
// report of a prompt resumed the same way mid-prefill. Both were reported exact.
TEST(Runtime, LossyKvLoadedAtResumeIsReported) {
  TempDir dir;
  RuntimeOptions o = small_on_a_q8_disk(dir.path.string());
  o.host_bytes = size_t(1) << 20;  // a quarter cannot hold the sequence raw: recomputed at resume
  auto made = Runtime::create(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Runtime& rt = **made;
  // Decoding: exact at start, lossy after the resume.
  auto prompt = rt.model().text.tokenize(std::string(900, 'c') + " decode then preempt", {.add_bos = true});
  auto s = rt.start(prompt, {});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->report.lossy_cached_tokens, 0u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(rt.decode(std::span(&s->seq, 1)).ok());
  auto raw = rt.preempt(s->seq);
  ASSERT_TRUE(raw.ok() && !*raw);
  ASSERT_TRUE(rt.flush().ok());  // device and host dropped: the prefix is on the q8 disk only
  auto resumed = rt.resume(s->seq, UINT32_MAX);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_GT(resumed->lossy_tokens, 0u);
  rt.finish(s->seq);
  // Mid-prefill: the first chunk exact, the rest computed on lossy KV after the resume.
  auto other = rt.model().text.tokenize(std::string(925, 'd') + " preempted while its prompt is computed", {.add_bos = true});
  PromptRequest request;
  request.prompt.assign(other.begin(), other.end());
  auto p = rt.start(request, 600);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_GT(p->prompt_left, 0u);
  ASSERT_TRUE(rt.preempt(p->seq).ok());
  ASSERT_TRUE(rt.flush().ok());
  ASSERT_TRUE(rt.resume(p->seq, UINT32_MAX).ok());
  Result<Runtime::Started> more = Status::Internal("not run");
  do more = rt.prefill_more(p->seq, UINT32_MAX);
  while (more.ok() && more->prompt_left > 0);
  ASSERT_TRUE(more.ok()) << more.status().to_string();
  EXPECT_GT(more->report.lossy_cached_tokens, 0u);
  rt.finish(p->seq);
}

TEST(Runtime, NoCacheBaselineGivesTheSameOutput) {
  TempDir dir;
  auto cached = Runtime::create(tiny(dir.path.string()));
  auto plain = Runtime::create(tiny("", false));
  ASSERT_TRUE(cached.ok() && plain.ok());
  auto prompt = (*plain)->model().text.tokenize(std::string(300, 'x'), {.add_bos = true});
  generate(**cached, prompt, 4);
  PrefillReport r;
  auto a = generate(**cached, prompt, 12, &r);
  EXPECT_GT(r.cached_tokens, 0u);
  PrefillReport r0;
  auto b = generate(**plain, prompt, 12, &r0);
  EXPECT_EQ(r0.cached_tokens, 0u);
  EXPECT_EQ(a, b);
}

TEST(Runtime, RejectsBadInputWithClearErrors) {
  auto rt = Runtime::create(tiny(""));
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  std::vector<TokenId> empty;
  EXPECT_EQ((*rt)->start(empty, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<TokenId> bad = {1, 2, 99999};
  auto r = (*rt)->start(bad, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("99999"), std::string::npos);
  std::vector<TokenId> neg = {1, -3};
  EXPECT_EQ((*rt)->start(neg, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<TokenId> huge((*rt)->model().max_context, 1);
  EXPECT_EQ((*rt)->start(huge, {}).status().code(), StatusCode::kInvalidArgument);
  SeqId ghost(12345);
  EXPECT_EQ((*rt)->decode(std::span(&ghost, 1)).status().code(), StatusCode::kNotFound);
  RuntimeOptions o = tiny("");
  o.model = "no-such-model";
  EXPECT_EQ(Runtime::create(o).status().code(), StatusCode::kInvalidArgument);
  o = tiny("");
  o.selective_hits = 0;  // refused by the options, before any model is loaded
  EXPECT_FALSE(Runtime::create(o).ok());
}

// A prompt that cannot fit the device pool at all is refused as invalid
// before the cache is touched (it could never run: waiting would not help,
// so not Busy); the limit is the model's max_kv_tokens; the runtime keeps
// serving from its cache.
TEST(Runtime, PromptLargerThanThePoolIsRefusedCleanly) {
  RuntimeOptions o = tiny("");
  o.device_bytes = size_t(64) * 8192;  // 64 pages of 16 tokens
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  EXPECT_EQ((*rt)->model().max_kv_tokens, 64u * 16u);
  std::vector<TokenId> small(500, 7), big(2000, 7);
  PrefillReport rep;
  auto a = generate(**rt, small, 4, &rep);
  auto r = (*rt)->start(big, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("device KV pool"), std::string::npos) << r.status().to_string();
  auto b = generate(**rt, small, 4, &rep);
  EXPECT_EQ(a, b);
  EXPECT_GT(rep.cached_tokens, 0u);
}

// Four sequences decoded in one batch: each gets exactly the tokens it gets when decoded alone.
TEST(Runtime, SequenceSlotsAreBoundedAndBatchedDecodeWorks) {
  constexpr int kTokens = 6;
  auto rt = Runtime::create(tiny(""));
  ASSERT_TRUE(rt.ok());
  auto solo = Runtime::create(tiny("", /*cache=*/false));
  ASSERT_TRUE(solo.ok());
  std::vector<SeqId> seqs;
  std::vector<std::vector<TokenId>> batched, alone;
  for (int i = 0; i < 4; ++i) {
    auto p = (*rt)->model().text.tokenize("conversation " + std::to_string(i) + std::string(size_t(i) * 7, 'x'),
                                          {.add_bos = true});
    alone.push_back(generate(**solo, p, kTokens));
    auto s = (*rt)->start(p, {});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    seqs.push_back(s->seq);
    batched.push_back({s->first_token});
  }
  // Distinct references, so results handed to the wrong sequence would show.
  for (int i = 1; i < 4; ++i) ASSERT_NE(alone[i], alone[0]) << "conversation " << i;
  auto p = (*rt)->model().text.tokenize("one too many", {.add_bos = true});
  EXPECT_EQ((*rt)->start(p, {}).status().code(), StatusCode::kBusy);
  for (int step = 1; step < kTokens; ++step) {
    auto d = (*rt)->decode(seqs);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    ASSERT_EQ(d->size(), 4u);
    for (size_t i = 0; i < seqs.size(); ++i) batched[i].push_back((*d)[i]);
  }
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(batched[i], alone[i]) << "conversation " << i;
  for (SeqId s : seqs) (*rt)->finish(s);
  EXPECT_TRUE((*rt)->start(p, {}).ok());
}

// A reply's cached KV is what a prefill of the conversation computes, bit for bit: the next turn
// over it gives the very logits a server without a cache gives (on quantized weights; on F32 ones
// BLAS rounds a prompt's rows by how many there are, so only closely). On quantized weights a decode step
// writes the KV a prefill writes (engine::Forward::decode_matches_prefill), so the reply is cached
// as decoded, every whole page of it, whatever reply_prefill_tokens says. On F32 weights BLAS's
// products round by batch, so decoded KV is prefilled again before it is cached, as far as
// reply_prefill_tokens lets it be: all 47 positions with KV, one page of them, none.
TEST(Runtime, AReplysCachedKvIsWhatAPrefillComputes) {
  for (const bool quantized : {true, false}) {
    SCOPED_TRACE(quantized ? "Q4_K_M" : "F32 weights");
    TempDir dir;
    RuntimeOptions o = tiny(dir.path.string());
    if (quantized) o.model = testdata::test_data_path("models/small-seed2-Q4_K_M.gguf");
    o.disk_dir.clear();
    o.device_bytes = size_t(16) << 20;
    o.cache_enabled = false;
    auto plain = Runtime::create(o);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    const TextCodec& text = (*plain)->model().text;
    const std::vector<TokenId> prompt = text.tokenize("def read_file(path):\n    with open(path) as f:", {.add_bos = true});
    auto first = [&](Runtime& rt, std::span<const TokenId> turn, PrefillReport& rep) {
      SamplingParams sp;
      sp.logprobs = 5;
      auto s = rt.start(turn, sp);
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) return engine::TokenLogprobs{};
      rep = s->report;
      const engine::TokenLogprobs lp = *rt.last_logprobs(s->seq);
      rt.finish(s->seq);
      return lp;
    };
    for (const uint32_t reply_prefill : {256u, 16u, 0u}) {
      SCOPED_TRACE("reply_prefill_tokens " + std::to_string(reply_prefill));
      o.cache_enabled = true;
      o.reply_prefill_tokens = reply_prefill;
      auto cached = Runtime::create(o);
      ASSERT_TRUE(cached.ok()) << cached.status().to_string();
      const auto reply = generate(**cached, prompt, 48);
      const uint64_t prefilled = (*cached)->stats().counters.decoded_tokens_prefilled;
      EXPECT_LE(prefilled, quantized ? 0u : reply_prefill);
      std::vector<TokenId> turn = prompt;
      turn.insert(turn.end(), reply.begin(), reply.end() - 1);  // the last sampled token has no KV
      const auto more = text.tokenize(" # and then", {.follows = turn.back()});
      turn.insert(turn.end(), more.begin(), more.end());
      PrefillReport hit, computed;
      const engine::TokenLogprobs a = first(**cached, turn, hit), b = first(**plain, turn, computed);
      const uint32_t with_kv = uint32_t(prompt.size()) + (quantized ? 47 : uint32_t(prefilled));
      EXPECT_EQ(hit.cached_tokens, with_kv / 16 * 16);  // the reply's pages as far as they were cached
      EXPECT_GE(hit.cached_tokens, prompt.size() / 16 * 16 + std::min(quantized ? 32u : reply_prefill, 32u));
      EXPECT_EQ(computed.cached_tokens, 0u);
      EXPECT_EQ(a.token, b.token);
      ASSERT_EQ(a.top.size(), b.top.size());
      if (!quantized) {  // BLAS rounds the hit's suffix (a few rows) otherwise than the whole prompt
        EXPECT_NEAR(a.logprob, b.logprob, 1e-4);
        continue;
      }
      EXPECT_EQ(a.logprob, b.logprob);  // bit for bit
      for (size_t k = 0; k < a.top.size(); ++k) EXPECT_EQ(a.top[k], b.top[k]) << k;
    }
  }
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// Logprobs of a generation: the same whether its prompt came from the cache or
// not; prompt logprobs recompute the prompt in full and still give the same tokens.
TEST(Runtime, LogprobsAreExactAcrossCacheHitsAndPromptLogprobs) {
  TempDir dir;
  auto rt = Runtime::create(tiny(dir.path.string()));
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  const auto prompt = (*rt)->model().text.tokenize(std::string(200, 'q') + " logprobs please", {.add_bos = true});
  auto run = [&](bool prompt_logprobs, PrefillReport& rep, std::vector<engine::TokenLogprobs>& prompt_lp) {
    SamplingParams sp;
    sp.logprobs = 3;
    sp.prompt_logprobs = prompt_logprobs;
    auto s = (*rt)->start(prompt, sp);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    rep = s->report;
    prompt_lp = s->prompt_logprobs;
    std::vector<engine::TokenLogprobs> out{*(*rt)->last_logprobs(s->seq)};
    EXPECT_EQ(out[0].token, s->first_token);
    for (int i = 0; i < 5; ++i) {
      auto d = (*rt)->decode(std::span(&s->seq, 1));
      EXPECT_TRUE(d.ok());
      out.push_back(*(*rt)->last_logprobs(s->seq));
      EXPECT_EQ(out.back().token, (*d)[0]);
    }
    (*rt)->finish(s->seq);
    return out;
  };
  PrefillReport full, warm, again;
  std::vector<engine::TokenLogprobs> none, plp;
  const auto c = run(true, full, plp);  // first: its KV, computed in full, is still committed
  const auto a = run(false, warm, none);
  const auto b = run(false, again, none);
  EXPECT_GT(warm.cached_tokens, 0u);
  EXPECT_EQ(full.cached_tokens, 0u);
  EXPECT_TRUE(full.computed_in_full_for_logprobs);
  ASSERT_EQ(plp.size(), prompt.size() - 1);
  for (size_t i = 0; i < plp.size(); ++i) {
    EXPECT_EQ(plp[i].token, prompt[i + 1]);
    EXPECT_LE(plp[i].logprob, 0.0f);
    ASSERT_EQ(plp[i].top.size(), 3u);
    EXPECT_GE(plp[i].top[0].second, plp[i].top[2].second);
  }
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].token, b[k].token);
    EXPECT_EQ(a[k].token, c[k].token);
    EXPECT_FLOAT_EQ(a[k].logprob, b[k].logprob);
    EXPECT_NEAR(a[k].logprob, c[k].logprob, 1e-4);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(a[k].top[0].first, a[k].token);
    EXPECT_FLOAT_EQ(a[k].top[0].second, a[k].logprob);
  }
}

}  // namespace
}  // namespace kvtier
