// Preemption against the real runtime: two sequences admitted together whose
// KV outgrows a device pool that fits one and a half of them. Neither fails;
// the youngest is paused (its KV raw in host memory, or dropped and
// recomputed when there is no host tier) and resumed once the other ends,
// and each output is the one it has when run alone.
#include <gtest/gtest.h>

#include "server/scheduler.h"

namespace kvtier::server {
namespace {

struct Run {
  std::vector<std::vector<TokenId>> outputs;
  uint64_t preemptions = 0;
  RuntimeCounters counters;
};

RuntimeOptions tiny(size_t host_bytes) {
  RuntimeOptions o;
  o.model = "tiny";
  o.threads = 1;
  o.host_bytes = host_bytes;
  o.max_sequences = 4;
  return o;
}

// The tiny model's pool, in tokens, for `device_bytes`.
uint32_t pool_tokens(RuntimeOptions o) {
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? (*rt)->model().max_kv_tokens : 0;
}

GenerationRequest request(uint32_t prompt_tokens, uint32_t max_tokens, int salt) {
  GenerationRequest r;
  for (uint32_t i = 0; i < prompt_tokens; ++i) r.prompt.push_back(TokenId(3 + (i * 13 + uint32_t(salt) * 101) % 400));
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// Submits every request at once (together: true) or one after another.
Run run(const RuntimeOptions& o, const std::vector<GenerationRequest>& requests, bool together,
        uint32_t chunk_tokens = kDefaultPrefillChunkTokens) {
  Run out;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  if (!rt.ok()) return out;
  SchedulerOptions so;
  so.max_running = o.max_sequences;
  so.prefill_chunk_tokens = chunk_tokens;
  auto sched = Scheduler::create(so, std::move(rt).value());
  EXPECT_TRUE(sched.ok());
  if (!sched.ok()) return out;
  std::vector<std::shared_ptr<RequestState>> states;
  auto collect = [&](RequestState& s) {
    const RequestState::View v = s.wait_done();
    EXPECT_TRUE(v.error.ok()) << v.error.to_string();
    out.outputs.push_back(v.tokens.ids);
  };
  for (const GenerationRequest& r : requests) {
    auto st = (*sched)->submit(r);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    if (!st.ok()) return out;
    if (together) states.push_back(*st);
    else collect(**st);
  }
  for (auto& s : states) collect(*s);
  out.preemptions = (*sched)->counts().preemptions;
  auto stats = (*sched)->call([](Runtime& r) { return r.stats(); });
  if (stats.ok()) out.counters = stats->counters;
  return out;
}

void check_preemption(size_t host_bytes, bool expect_raw, bool cache = true, uint32_t chunk_tokens = kDefaultPrefillChunkTokens) {
  RuntimeOptions o = tiny(host_bytes);
  o.cache_enabled = cache;
  o.device_bytes = size_t(1) << 20;
  const uint32_t pool = pool_tokens(o);
  ASSERT_GE(pool, 64u);
  // Each sequence needs two thirds of the pool by its end: one fits, two do not (4/3 of it).
  const uint32_t per_seq = pool * 2 / 3;
  const std::vector<GenerationRequest> requests = {request(per_seq / 3, per_seq - per_seq / 3 - 1, 1),
                                                   request(per_seq / 3, per_seq - per_seq / 3 - 1, 2)};
  const Run alone = run(o, requests, false);
  const Run together = run(o, requests, true, chunk_tokens);
  ASSERT_EQ(alone.outputs.size(), 2u);
  ASSERT_EQ(together.outputs.size(), 2u);
  EXPECT_EQ(alone.preemptions, 0u);
  EXPECT_GE(together.preemptions, 1u) << "the two sequences never outgrew the pool: the test proves nothing";
  EXPECT_EQ(together.counters.preempted_raw + together.counters.preempted_recompute, together.preemptions);
  EXPECT_EQ(together.counters.preempted_raw > 0, expect_raw);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(together.outputs[i].size(), requests[i].max_tokens);
    EXPECT_EQ(together.outputs[i], alone.outputs[i]) << "request " << i << " changed under preemption";
  }
}

TEST(Preemption, RawCopyInHostMemoryKeepsTheOutput) { check_preemption(size_t(16) << 20, /*expect_raw=*/true); }

TEST(Preemption, RecomputeWithoutAHostTierKeepsTheOutput) { check_preemption(0, /*expect_raw=*/false); }

// Without the cache nothing of the paused sequence is found at resume: all of its KV is computed
// again, in chunks of the prefill budget (a few steps, the sequence not decoded until the last).
TEST(Preemption, RecomputeInChunksWithoutTheCacheKeepsTheOutput) {
  check_preemption(0, /*expect_raw=*/false, /*cache=*/false, /*chunk_tokens=*/8);
}

// A sequence being resumed in chunks holds the pages of all its tokens while the others decode.
// Three sequences with short prompts fill the pool and the youngest pauses; the middle one ends a
// while later, and the paused one resumes, a token a step, while the oldest decodes on until it
// needs a page the pool no longer has. Then the youngest, the one being resumed, pauses again:
// the oldest, the only one decoding, must not fail for want of a sequence to pause. It resumes
// once room appears, and every output is the one it has alone.
TEST(Preemption, ASequenceBeingResumedPausesAgainWhenAnOlderOneNeedsItsPages) {
  RuntimeOptions o = tiny(0);
  o.cache_enabled = false;
  o.device_bytes = size_t(1) << 20;
  const uint32_t pool = pool_tokens(o);
  ASSERT_GE(pool, 512u);
  // Admitted a prompt apart (a prompt position a step), the youngest holds about `fill` tokens
  // when the three fill the pool; the middle one ends fill / 4 steps after that.
  const uint32_t prompt = 16, fill = (pool + 3 * prompt) / 3 - 2 * prompt;
  const std::vector<GenerationRequest> requests = {request(prompt, pool * 3 / 4, 1), request(prompt, fill + fill / 4, 2),
                                                   request(prompt, pool / 2, 3)};
  const auto alone = run(o, requests, false);
  const auto together = run(o, requests, true, /*chunk_tokens=*/1);
  ASSERT_EQ(alone.outputs.size(), 3u);
  ASSERT_EQ(together.outputs.size(), 3u);
  EXPECT_EQ(alone.preemptions, 0u);
  EXPECT_GE(together.preemptions, 2u) << "the resumed sequence never paused again: the test proves nothing";
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(together.outputs[i].size(), requests[i].max_tokens);
    EXPECT_EQ(together.outputs[i], alone.outputs[i]) << "request " << i << " changed under preemption";
  }
}

// The pool bounds the KV a sequence writes: its prompt's and every generated token's but the last
// (never fed back). Requests exactly at that bound run to the end alone; one token more is refused
// at submit. (Admission counted the last token too, so a prompt of the whole pool, the limit
// /v1/models publishes, could generate nothing.)
TEST(Preemption, ASequenceWhoseKvFillsThePoolExactlyRunsToItsEnd) {
  RuntimeOptions o = tiny(0);
  o.device_bytes = size_t(1) << 20;
  const uint32_t pool = pool_tokens(o);
  ASSERT_GE(pool, 64u);
  const auto done = run(o, {request(pool, 1, 1), request(pool - 7, 8, 2)}, /*together=*/false);
  ASSERT_EQ(done.outputs.size(), 2u);
  EXPECT_EQ(done.outputs[0].size(), 1u);
  EXPECT_EQ(done.outputs[1].size(), 8u);
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok());
  auto sched = Scheduler::create({}, std::move(rt).value());
  ASSERT_TRUE(sched.ok());
  const auto over = (*sched)->submit(request(pool - 7, 9, 3));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("needs KV for " + std::to_string(pool + 1)), std::string::npos)
      << over.status().to_string();
}

}  // namespace
}  // namespace kvtier::server
