// Chunked prefill (Runtime::start with a chunk, Runtime::prefill_more): a prompt computed in parts
// gives the one-call prefill's tokens and log-probabilities bit for bit (on a quantized model, whose
// matrices round a row alike at any batch), from a cold start, after a cache hit, with prompt
// logprobs, and across a preemption; what a sequence computed before it ended is cached. A decoding
// sequence preempted without a raw copy goes on bit for bit too (its KV recomputed as written, in
// chunks when resume() is given one).
#include <gtest/gtest.h>

#include <functional>

#include "engine/gguf.h"
#include "runtime/runtime.h"
#include "test_data.h"

namespace kvtier {
namespace {

RuntimeOptions quantized(bool cache) {
  RuntimeOptions o;
  o.model = testdata::test_data_path("models/small-seed2-Q4_K_M.gguf");
  o.device_bytes = size_t(16) << 20;
  o.host_bytes = size_t(16) << 20;
  o.cache_enabled = cache;
  o.max_sequences = 4;
  return o;
}

std::unique_ptr<Runtime> make(bool cache, size_t host_bytes = size_t(16) << 20) {
  RuntimeOptions o = quantized(cache);
  o.host_bytes = host_bytes;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? std::move(rt).value() : nullptr;
}

struct Generated {
  std::vector<engine::TokenLogprobs> tokens;  // the first token's and each decoded one's
  std::vector<engine::TokenLogprobs> prompt;  // with prompt_logprobs
  PrefillReport report;
  std::vector<uint32_t> chunks;               // positions each call computed
};

// Computes the prompt in chunks of `chunk` (UINT32_MAX: one call), decodes `n - 1` more tokens and finishes.
// `between` runs after the first chunk while the prompt is not all computed.
Generated generate(Runtime& rt, const PromptRequest& request, uint32_t chunk, int n,
                   const std::function<void(SeqId)>& between = {}) {
  Generated g;
  auto s = rt.start(request, chunk);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return g;
  g.chunks.push_back(s->computed);
  if (s->prompt_left > 0 && between) between(s->seq);
  while (s.ok() && s->prompt_left > 0) {
    const SeqId one[] = {s->seq};
    EXPECT_TRUE(rt.decode(one).status().is(StatusCode::kFailedPrecondition));  // not before its first token
    s = rt.prefill_more(s->seq, chunk);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) g.chunks.push_back(s->computed);
  }
  if (!s.ok()) return g;
  g.report = s->report;
  g.prompt = s->prompt_logprobs;
  g.tokens.push_back(*rt.last_logprobs(s->seq));
  EXPECT_EQ(g.tokens[0].token, s->first_token);
  for (int i = 1; i < n; ++i) {
    const SeqId one[] = {s->seq};
    auto d = rt.decode(one);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    if (!d.ok()) break;
    g.tokens.push_back(*rt.last_logprobs(s->seq));
  }
  rt.finish(s->seq);
  return g;
}

void expect_same(const std::vector<engine::TokenLogprobs>& a, const std::vector<engine::TokenLogprobs>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token, b[i].token) << i;
    EXPECT_EQ(a[i].logprob, b[i].logprob) << i;  // bit for bit
    EXPECT_EQ(a[i].top, b[i].top) << i;
  }
}

PromptRequest request_of(const Runtime& rt, const std::string& text, bool prompt_logprobs = false) {
  PromptRequest r;
  r.prompt = rt.model().text.tokenize(text, {.add_bos = true});
  r.sampling.logprobs = 4;
  r.sampling.prompt_logprobs = prompt_logprobs;
  return r;
}

const std::string kText =
    "def read_file(path):\n    with open(path) as f:\n        return f.read()\n\n"
    "def write_file(path, text):\n    with open(path, 'w') as f:\n        f.write(text)\n\n"
    "class Config:\n    def __init__(self, values):\n        self.values = dict(values)\n";

TEST(ChunkedPrefill, GivesTheOneCallPrefillsTokensBitForBit) {
  auto plain = make(false);
  ASSERT_NE(plain, nullptr);
  const PromptRequest r = request_of(*plain, kText);
  ASSERT_GT(r.prompt.size(), 64u);
  const Generated whole = generate(*plain, r, UINT32_MAX, 8);
  ASSERT_EQ(whole.chunks, std::vector<uint32_t>{uint32_t(r.prompt.size())});
  for (const uint32_t chunk : {1u, 7u, 16u, 50u}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Generated parts = generate(*plain, r, chunk, 8);
    expect_same(parts.tokens, whole.tokens);
    uint32_t sum = 0;
    for (uint32_t c : parts.chunks) {
      EXPECT_LE(c, chunk);
      sum += c;
    }
    EXPECT_EQ(sum, r.prompt.size());
    EXPECT_EQ(parts.report.prompt_tokens, r.prompt.size());
  }
}

// After a cache hit the first chunk starts where the cached prefix ends; with prompt logprobs every
// position's are given once, in order, as in one call.
TEST(ChunkedPrefill, ContinuesAfterACacheHitAndGivesPromptLogprobs) {
  auto plain = make(false);
  auto cached = make(true);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(cached, nullptr);
  const PromptRequest first = request_of(*plain, kText.substr(0, kText.size() / 2));
  const PromptRequest r = request_of(*plain, kText);
  const Generated whole = generate(*plain, r, UINT32_MAX, 6);
  (void)generate(*cached, first, 5, 2);  // cached: its whole pages
  const Generated hit = generate(*cached, r, 9, 6);
  EXPECT_GE(hit.report.cached_tokens, 32u);
  EXPECT_EQ(hit.chunks.front(), 9u);  // past the cached prefix
  expect_same(hit.tokens, whole.tokens);

  const PromptRequest lp = request_of(*plain, kText, /*prompt_logprobs=*/true);
  const Generated lp_whole = generate(*plain, lp, UINT32_MAX, 3);
  const Generated lp_parts = generate(*cached, lp, 11, 3);
  ASSERT_EQ(lp_whole.prompt.size(), lp.prompt.size() - 1);
  expect_same(lp_parts.prompt, lp_whole.prompt);
  expect_same(lp_parts.tokens, lp_whole.tokens);
  EXPECT_TRUE(lp_parts.report.computed_in_full_for_logprobs);
}

// Preempted between two chunks, a prompt caches what it computed and gives up its pages; resumed,
// it goes on from the cache and ends as it would have.
TEST(ChunkedPrefill, APreemptedPromptResumesFromWhatItCached) {
  auto plain = make(false);
  auto cached = make(true);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(cached, nullptr);
  const PromptRequest r = request_of(*plain, kText);
  const Generated whole = generate(*plain, r, UINT32_MAX, 6);
  const Generated parts = generate(*cached, r, 40, 6, [&](SeqId seq) {
    auto kept = cached->preempt(seq);
    ASSERT_TRUE(kept.ok()) << kept.status().to_string();
    EXPECT_FALSE(*kept);  // its KV went to the cache, not to a raw copy
    EXPECT_TRUE(cached->prefill_more(seq, 40).status().is(StatusCode::kFailedPrecondition));
    ASSERT_TRUE(cached->resume(seq).ok());
  });
  expect_same(parts.tokens, whole.tokens);
  // What it found when it started: its own first chunk, found again at resume, is not a hit.
  EXPECT_EQ(parts.report.cached_tokens, 0u);
  EXPECT_EQ(cached->stats().counters.cached_tokens, 0u);
  EXPECT_EQ(cached->stats().cache.reused_tokens_by_tier[int(TierKind::kDevice)], 32u);  // the resume's lookup
  EXPECT_EQ(cached->stats().counters.preempted_recompute, 1u);
}

// A sequence that ends while its prompt is being computed (its client left) caches the whole pages
// it computed.
TEST(ChunkedPrefill, ASequenceEndedMidPromptCachesWhatItComputed) {
  auto cached = make(true);
  ASSERT_NE(cached, nullptr);
  const PromptRequest r = request_of(*cached, kText);
  auto s = cached->start(r, 40);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_GT(s->prompt_left, 0u);
  cached->finish(s->seq);
  EXPECT_TRUE(cached->prefill_more(s->seq, 40).status().is(StatusCode::kNotFound));
  const Generated again = generate(*cached, r, UINT32_MAX, 1);
  EXPECT_EQ(again.report.cached_tokens, 32u);
}

// Preempted while decoding, with no host memory for a raw copy, a sequence's KV is recomputed at
// resume by prefill, from the cache where it holds it, and it goes on as it would have unpreempted,
// bit for bit: on quantized weights a decode step writes the KV a prefill writes
// (engine::Forward::decode_matches_prefill). The preemption commits the sequence's pages, so the
// resume finds them while the pool has not reused them; and where an earlier run cached the same
// conversation's reply (as decoded, not prefilled again: decoded_tokens_prefilled stays 0), the
// resume takes that too.
TEST(ChunkedPrefill, ADecodingSequencePreemptedWithoutARawCopyGoesOnBitForBit) {
  auto plain = make(false);
  ASSERT_NE(plain, nullptr);
  const PromptRequest r = request_of(*plain, kText);
  constexpr int kTokens = 48, kBefore = 30;
  const Generated whole = generate(*plain, r, UINT32_MAX, kTokens);
  for (const bool earlier_run : {false, true}) {
    SCOPED_TRACE(earlier_run ? "the reply cached by an earlier run" : "a cache without the reply");
    auto cached = make(true, /*host_bytes=*/0);
    ASSERT_NE(cached, nullptr);
    if (earlier_run) expect_same(generate(*cached, r, UINT32_MAX, kTokens).tokens, whole.tokens);
    EXPECT_EQ(cached->stats().counters.decoded_tokens_prefilled, 0u);

    auto s = cached->start(r);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    std::vector<engine::TokenLogprobs> tokens = {*cached->last_logprobs(s->seq)};
    const SeqId one[] = {s->seq};
    for (int i = 1; i < kTokens; ++i) {
      if (i == kBefore) {
        auto kept = cached->preempt(s->seq);
        ASSERT_TRUE(kept.ok()) << kept.status().to_string();
        EXPECT_FALSE(*kept);  // no host memory: recomputed at resume
        const uint64_t reused = cached->stats().cache.reused_tokens_by_tier[int(TierKind::kDevice)];
        ASSERT_TRUE(cached->resume(s->seq).ok());
        // The prompt's whole pages and the generated ones past them were found, not recomputed.
        const uint32_t known = uint32_t(r.prompt.size()) + kBefore - 1;
        EXPECT_EQ(cached->stats().cache.reused_tokens_by_tier[int(TierKind::kDevice)] - reused, known / 16 * 16);
        EXPECT_GT(known / 16 * 16, r.prompt.size());
      }
      auto d = cached->decode(one);
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      tokens.push_back(*cached->last_logprobs(s->seq));
    }
    cached->finish(s->seq);
    expect_same(tokens, whole.tokens);
    EXPECT_EQ(cached->stats().counters.preempted_recompute, 1u);
  }
}

// Recomputed at resume with nothing cached to load, a decoding sequence is computed in chunks, as a
// prompt is: each resume() call computes at most its chunk and says what is left, decode() refuses
// the sequence until nothing is, a preemption between two chunks starts it over (never as a raw
// copy: its pages would come back too few for its tokens), and it goes on bit for bit.
TEST(ChunkedPrefill, ADecodingSequenceRecomputedAtResumeIsComputedInChunks) {
  auto plain = make(false);
  ASSERT_NE(plain, nullptr);
  const PromptRequest r = request_of(*plain, kText);
  constexpr int kTokens = 24, kBefore = 12;
  constexpr uint32_t kChunk = 7;
  const Generated whole = generate(*plain, r, UINT32_MAX, kTokens);
  const uint32_t known = uint32_t(r.prompt.size()) + kBefore - 1;  // positions with KV at the preemption
  // Host memory for raw copies (a quarter of the host tier) of one page fewer than the sequence
  // holds when it is first preempted, and more than it holds after two chunks.
  auto model = engine::load_gguf(quantized(false).model);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const size_t page_bytes = (*model)->config().kv_geometry(DType::kF32, 16).page_bytes();
  const uint32_t pages = (known + 15) / 16;
  ASSERT_GT(pages - 1, (2 * kChunk + 15) / 16);
  auto rt = make(false, 4 * (pages - 1) * page_bytes);  // no cache: every position is recomputed
  ASSERT_NE(rt, nullptr);
  auto s = rt->start(r);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::vector<engine::TokenLogprobs> tokens = {*rt->last_logprobs(s->seq)};
  const SeqId one[] = {s->seq};
  for (int i = 1; i < kTokens; ++i) {
    if (i == kBefore) {
      auto kept = rt->preempt(s->seq);
      ASSERT_TRUE(kept.ok()) << kept.status().to_string();
      EXPECT_FALSE(*kept);  // too large for the raw copies' memory: recomputed
      for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(round == 0 ? "preempted again after two chunks" : "resumed to the end");
        uint32_t computed = 0, calls = 0;
        for (;;) {
          auto resumed = rt->resume(s->seq, kChunk);
          ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
          EXPECT_EQ(resumed->computed, std::min(kChunk, known - computed));
          computed += resumed->computed;
          ++calls;
          EXPECT_EQ(resumed->left, known - computed);
          if (resumed->left == 0) break;
          EXPECT_TRUE(rt->decode(one).status().is(StatusCode::kFailedPrecondition));
          if (round == 0 && calls == 2) break;
        }
        if (round == 1) {
          EXPECT_EQ(computed, known);
          EXPECT_EQ(calls, (known + kChunk - 1) / kChunk);
          break;
        }
        auto again = rt->preempt(s->seq);
        ASSERT_TRUE(again.ok()) << again.status().to_string();
        EXPECT_FALSE(*again);  // host memory to spare, but a sequence being resumed is recomputed
      }
    }
    auto d = rt->decode(one);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    tokens.push_back(*rt->last_logprobs(s->seq));
  }
  rt->finish(s->seq);
  expect_same(tokens, whole.tokens);
  EXPECT_EQ(rt->stats().counters.preempted_recompute, 2u);
}

}  // namespace
}  // namespace kvtier
